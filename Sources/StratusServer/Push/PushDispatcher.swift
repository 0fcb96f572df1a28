import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import StratusCore
import StratusStore
import Synchronization

/// Sends the pushes queued in `push_outbox` to APNs and Web Push services, after the writes that
/// made them committed, never in a write's way.
///
/// Each server process runs one loop (`run`): it claims due pushes (up to `batch`, for a lease,
/// so no other process sends them meanwhile), sends them all at once (APNs: one HTTP/2 connection
/// per credential, a stream per push), and settles them in one statement: sent or refused for
/// good → gone; a device the provider no longer knows → forgotten; 429, 5xx, a timeout → due again
/// after `Retry-After` or the backoff. A process that dies mid-send leaves its claimed pushes to
/// whoever claims them when the lease ends: at least once, with the same `apns-id`. The loop is
/// woken at once by this process's writes and looks every second for the others'.
public final class PushDispatcher: Sendable {
    /// How long a push may wait: APNs' `apns-expiration` and Web Push's `TTL`; older ones are dropped.
    static let lifetime: Duration = .seconds(24 * 3600)
    static let batch = 500
    static let lease: Duration = .seconds(30)

    let subscriptions: SubscriptionStore
    let rateLimiter: RateLimiter
    let sealer: PushKeySealer
    let providers: PushProviders
    let settings: PushSettings
    let metrics: Metrics
    let logger: Logger

    struct CredentialKey: Hashable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
    }

    /// Each container environment's APNs setting as last read (`nil`: none set), kept 30 seconds
    /// or until this process changes it.
    private let settingsRead = Mutex<[CredentialKey: (setting: APNsSetting?, read: ContinuousClock.Instant)]>([:])
    /// The credentials in use, each with its client: made by the loop as it sends, shut down when it ends.
    private let credentials = Mutex<[CredentialKey: APNsCredential]>([:])
    /// Clients of credentials replaced or removed, shut down by the loop.
    private let retired = Mutex<[HTTPClient]>([])
    /// The client for Web Push services (one pool, by host).
    private let webPushClient = Mutex<HTTPClient?>(nil)
    /// The last refusal for good per container environment, for `stratus push status`.
    private let lastRefusals = Mutex<[CredentialKey: (reason: String, at: Date)]>([:])
    private let wake = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))

    init(subscriptions: SubscriptionStore, rateLimiter: RateLimiter, secret: [UInt8], vapid: VAPIDKeys, publicURL: String,
         settings: PushSettings, metrics: Metrics, logger: Logger) {
        self.subscriptions = subscriptions
        self.rateLimiter = rateLimiter
        self.sealer = PushKeySealer(secret: secret)
        self.settings = settings
        self.providers = PushProviders(settings: settings, vapid: vapid, publicURL: publicURL, logger: logger)
        self.metrics = metrics
        self.logger = logger
    }

    /// Pushes this process queued, already claimed for it (their rows were written with a lease):
    /// sent without a claiming statement. Past `handedLimit` waiting, the rest are left to be
    /// claimed from the table when their lease ends.
    private let handed = Mutex<[OutgoingPush]>([])
    static let handedLimit = 20_000

    /// Takes pushes this process queued (`SubscriptionStore.queuePushes` wrote them claimed) and
    /// wakes the loop.
    func queued(_ pushes: [OutgoingPush]) {
        handed.withLock { waiting in
            waiting.append(contentsOf: pushes.prefix(max(0, Self.handedLimit - waiting.count)))
        }
        wake.continuation.yield()
    }

    /// Forgets a container environment's credential (it was set or removed here).
    func forget(containerID: ContainerID, environment: ContainerEnvironment) {
        _ = settingsRead.withLock { $0.removeValue(forKey: CredentialKey(containerID: containerID, environment: environment)) }
    }

    /// The container environment's APNs setting, `nil` when none is set.
    func apnsSetting(containerID: ContainerID, environment: ContainerEnvironment) async throws -> APNsSetting? {
        let key = CredentialKey(containerID: containerID, environment: environment)
        let now = ContinuousClock.now
        if let cached = settingsRead.withLock({ $0[key] }), now - cached.read < .seconds(30) { return cached.setting }
        let setting = try await subscriptions.apnsSettings(containerID: containerID)[environment]
        settingsRead.withLock { $0[key] = (setting, now) }
        return setting
    }

    /// Whether a container environment's subscribers' APNs devices can be pushed to.
    func hasAPNs(containerID: ContainerID, environment: ContainerEnvironment) async -> Bool {
        (try? await apnsSetting(containerID: containerID, environment: environment)) != nil
    }

    /// The credential to send with (made here, by the loop, with its client): `nil` when none is
    /// set or its key cannot be opened.
    func credential(containerID: ContainerID, environment: ContainerEnvironment) async throws -> APNsCredential? {
        let key = CredentialKey(containerID: containerID, environment: environment)
        guard let setting = try await apnsSetting(containerID: containerID, environment: environment) else { return nil }
        if let current = credentials.withLock({ $0[key] }), current.setting == setting { return current }
        let made: APNsCredential
        do {
            let privateKey = try P256.Signing.PrivateKey(pemRepresentation: try sealer.open(setting.sealedKey))
            made = APNsCredential(setting: setting, key: privateKey, client: try PushProviders.client(settings))
        } catch {
            logger.error("the APNs key of a container could not be opened (was the server secret changed?); set it again with 'stratus push apns set'",
                         metadata: ["stratus.container": "\(containerID)", "stratus.error": "\(error)"])
            return nil
        }
        let (chosen, old) = credentials.withLock { cached -> (APNsCredential, APNsCredential?) in
            if let current = cached[key], current.setting == setting { return (current, made) }
            let old = cached[key]
            cached[key] = made
            return (made, old)
        }
        if let old { retired.withLock { $0.append(old.client) } }
        return chosen
    }

    /// The last refusal for good in a container environment.
    func lastRefusal(containerID: ContainerID, environment: ContainerEnvironment) -> (reason: String, at: Date)? {
        lastRefusals.withLock { $0[CredentialKey(containerID: containerID, environment: environment)] }
    }

    /// Claims, sends and settles pushes until cancelled.
    public func run() async {
        await withTaskCancellationHandler {
            while !Task.isCancelled {
                var claimed = handed.withLock { waiting -> [OutgoingPush] in
                    let taken = Array(waiting.prefix(Self.batch))
                    waiting.removeFirst(taken.count)
                    return taken
                }
                do {
                    if claimed.isEmpty { claimed = try await subscriptions.claimPushes(limit: Self.batch, lease: Self.lease) }
                } catch {
                    if !Task.isCancelled {
                        logger.warning("pushes could not be claimed; trying again in a second", metadata: ["stratus.error": "\(String(reflecting: error))"])
                    }
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
                if claimed.isEmpty {
                    await waitForWork(.seconds(1))
                    continue
                }
                await send(claimed)
                await shutDownRetired()
            }
        } onCancel: {
            wake.continuation.yield()
        }
        await shutDownRetired()
        for client in credentials.withLock({ cached in defer { cached.removeAll() }; return cached.values.map(\.client) }) {
            try? await client.shutdown()
        }
        if let client = webPushClient.withLock({ client in defer { client = nil }; return client }) { try? await client.shutdown() }
    }

    private func waitForWork(_ timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [wake] in for await _ in wake.stream { return } }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
        }
    }

    private func shutDownRetired() async {
        for client in retired.withLock({ list in defer { list.removeAll() }; return list }) { try? await client.shutdown() }
    }

    /// Sends claimed pushes, all at once, and settles them.
    func send(_ claimed: [OutgoingPush]) async {
        var pushes: [OutgoingPush] = []
        var done: [OutgoingPush] = [], retry: [(OutgoingPush, Duration)] = [], gone: [OutgoingPush] = []
        // Past their lifetime: dropped. Past the container's pushesPerSecond: later.
        var perEnvironment: [CredentialKey: [OutgoingPush]] = [:]
        for push in claimed {
            if Date().timeIntervalSince(push.createdAt) > Double(Self.lifetime.components.seconds) {
                done.append(push)
                metrics.pushFinished(provider: push.provider, outcome: "expired", made: nil)
                continue
            }
            perEnvironment[CredentialKey(containerID: push.containerID, environment: push.environment), default: []].append(push)
        }
        for (key, list) in perEnvironment {
            let allowed = await rateLimiter.admitPushes(list.count, containerID: key.containerID, environment: key.environment)
            pushes += list.prefix(allowed)
            for push in list.dropFirst(allowed) { retry.append((push, .seconds(1))) }
        }
        let results = await withTaskGroup(of: (OutgoingPush, PushOutcome).self) { group -> [(OutgoingPush, PushOutcome)] in
            for push in pushes {
                group.addTask { (push, await self.sendOne(push)) }
            }
            var results: [(OutgoingPush, PushOutcome)] = []
            for await result in group { results.append(result) }
            return results
        }
        for (push, outcome) in results {
            switch outcome {
            case .sent:
                done.append(push)
                rateLimiter.notePushes(1, containerID: push.containerID, environment: push.environment)
            case .deviceGone:
                gone.append(push)
            case .refused(let reason):
                done.append(push)
                lastRefusals.withLock { $0[CredentialKey(containerID: push.containerID, environment: push.environment)] = (reason, Date()) }
                logger.warning("a push was refused for good and dropped", metadata: ["stratus.container": "\(push.containerID)", "stratus.reason": "\(reason)"])
            case .retry(let after, let reason):
                if push.attempts + 1 >= 12 {
                    done.append(push)
                    lastRefusals.withLock { $0[CredentialKey(containerID: push.containerID, environment: push.environment)] = ("gave up after 12 attempts: \(reason)", Date()) }
                    metrics.pushFinished(provider: push.provider, outcome: "expired", made: nil)
                    continue
                }
                retry.append((push, after ?? Self.backoff(attempt: push.attempts)))
            }
            metrics.pushFinished(provider: push.provider, outcome: outcome.label, made: outcome == .sent ? push.createdAt : nil)
        }
        do {
            try await subscriptions.settlePushes(done: done, retry: retry, gone: gone)
        } catch {
            // Their leases run out and they are claimed again: sent twice at worst, never lost.
            logger.warning("pushes sent could not be settled; they will be sent again when their lease ends",
                           metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
    }

    /// 1, 2, 4, … seconds, at most five minutes, with a quarter of jitter.
    static func backoff(attempt: Int) -> Duration {
        let base = min(300.0, pow(2.0, Double(min(attempt, 16))))
        return .milliseconds(Int(base * 1000 * Double.random(in: 0.75...1.0)))
    }

    func sendOne(_ push: OutgoingPush) async -> PushOutcome {
        switch push.address {
        case .apns(let token, let apnsEnvironment):
            guard let credential = try? await credential(containerID: push.containerID, environment: push.environment) else {
                return .refused("no APNs credential is set for this environment; set one with 'stratus push apns set'")
            }
            return await providers.sendAPNs(push, token: token, apnsEnvironment: apnsEnvironment, credential: credential)
        case .webPush(let endpoint, let p256dh, let auth):
            let client: HTTPClient
            do {
                client = try webPushClient.withLock { existing in
                    if let existing { return existing }
                    let made = try PushProviders.client(settings)
                    existing = made
                    return made
                }
            } catch {
                return .retry(after: nil, reason: "no client for Web Push: \(error)")
            }
            return await providers.sendWebPush(push, endpoint: endpoint, p256dh: p256dh, auth: auth, client: client)
        }
    }
}

extension OutgoingPush {
    var provider: String {
        if case .apns = address { return "apns" }
        return "webpush"
    }
}
