import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOSSL
import StratusCore
import StratusStore
import Synchronization

/// Sends the pushes queued in `push_outbox` to APNs and Web Push services, after the writes that
/// made them committed, never in a write's way.
///
/// Each server process runs one loop (`run`): it takes the pushes this process queued (written
/// already claimed for a lease, so no other process sends them meanwhile) and, once a second,
/// claims due ones from the table (retries, and pushes a process that died left); sends them all
/// at once (APNs: one HTTP/2 connection per signing key and host, shared by the containers
/// whose credentials name that key, a stream per push, written together); and settles them: sent or refused for good → gone (a tenth of a second's in one
/// statement); a device the provider no longer knows → forgotten; 429, 5xx, a timeout → due again
/// after `Retry-After` or the backoff. A process that dies mid-send leaves its claimed pushes to
/// whoever claims them when the lease ends: at least once, with the same `apns-id`.
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
    /// The credentials in use, made by the loop as it sends.
    private let credentials = Mutex<[CredentialKey: APNsCredential]>([:])
    /// The signing keys in use, each shared by the credentials naming it, with its connections:
    /// closed when the loop ends (a key no credential names any more keeps its idle ones until then).
    private let providersInUse = Mutex<[APNsProvider.Identity: APNsProvider]>([:])
    /// TLS for APNs connections, made by the loop when first needed.
    private let apnsTLS = Mutex<NIOSSLContext?>(nil)
    /// The client for Web Push services (one pool, by host).
    private let webPushClient = Mutex<HTTPClient?>(nil)
    /// The last refusal for good per container environment, for `stratus push status`.
    private let lastRefusals = Mutex<[CredentialKey: (reason: String, at: Date)]>([:])
    private let wake = WakeSignal()

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
        wake.signal()
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

    /// The credential to send with (made here, by the loop; its provider shared with the credentials
    /// naming the same key): `nil` when none is set or its key cannot be opened.
    func credential(containerID: ContainerID, environment: ContainerEnvironment) async throws -> APNsCredential? {
        let key = CredentialKey(containerID: containerID, environment: environment)
        guard let setting = try await apnsSetting(containerID: containerID, environment: environment) else { return nil }
        if let current = credentials.withLock({ $0[key] }), current.setting == setting { return current }
        let privateKey: P256.Signing.PrivateKey
        do {
            privateKey = try P256.Signing.PrivateKey(pemRepresentation: try sealer.open(setting.sealedKey))
        } catch {
            logger.error("the APNs key of a container could not be opened (was the server secret changed?); set it again with 'stratus push apns set'",
                         metadata: ["stratus.container": "\(containerID)", "stratus.error": "\(error)"])
            return nil
        }
        let made = APNsProvider(keyID: setting.keyID, teamID: setting.teamID, key: privateKey)
        let provider = providersInUse.withLock { providers in
            if let existing = providers[made.identity] { return existing }
            providers[made.identity] = made
            return made
        }
        let credential = APNsCredential(setting: setting, provider: provider)
        credentials.withLock { $0[key] = credential }
        return credential
    }

    /// The last refusal for good in a container environment.
    func lastRefusal(containerID: ContainerID, environment: ContainerEnvironment) -> (reason: String, at: Date)? {
        lastRefusals.withLock { $0[CredentialKey(containerID: containerID, environment: environment)] }
    }

    /// Claims, sends and settles pushes until cancelled. Pushes sent leave the table together, a
    /// tenth of a second's (or a thousand) in one statement.
    public func run() async {
        var unsettled: [OutgoingPush] = []
        var since = ContinuousClock.now
        var nextClaim = ContinuousClock.now
        var lastSend = ContinuousClock.now
        func settleIfDue(_ force: Bool = false) async {
            guard !unsettled.isEmpty, force || unsettled.count >= 1000 || ContinuousClock.now - since >= Self.settleEvery else { return }
            await settle(done: unsettled, retry: [], gone: [])
            unsettled.removeAll()
        }
        await withTaskCancellationHandler {
            while !Task.isCancelled {
                // At most one send per `gather` unless a full batch waits: pushes that come one by one
                // go out a few together, each send's fixed cost shared.
                let pause = lastSend + Self.gather - ContinuousClock.now
                if pause > .zero, handed.withLock({ $0.count }) < Self.batch { try? await Task.sleep(for: pause) }
                var claimed = handed.withLock { waiting -> [OutgoingPush] in
                    let taken = Array(waiting.prefix(Self.batch))
                    waiting.removeFirst(taken.count)
                    return taken
                }
                do {
                    // The table holds retries (due a second or more later) and what dead processes
                    // left: looked at once a second, or at once while claims come back full.
                    if claimed.isEmpty, ContinuousClock.now >= nextClaim {
                        claimed = try await subscriptions.claimPushes(limit: Self.batch, lease: Self.lease)
                        nextClaim = ContinuousClock.now + (claimed.count == Self.batch ? .zero : .seconds(1))
                    }
                } catch {
                    if !Task.isCancelled {
                        logger.warning("pushes could not be claimed; trying again in a second", metadata: ["stratus.error": "\(String(reflecting: error))"])
                    }
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
                if claimed.isEmpty {
                    await settleIfDue()
                    let until = unsettled.isEmpty ? nextClaim : min(nextClaim, since + Self.settleEvery)
                    await wake.wait(max(.milliseconds(1), until - ContinuousClock.now))
                    continue
                }
                if unsettled.isEmpty { since = ContinuousClock.now }
                lastSend = ContinuousClock.now
                unsettled += await send(claimed)
                await settleIfDue()
            }
        } onCancel: {
            wake.signal()
        }
        await settleIfDue(true)
        credentials.withLock { $0.removeAll() }
        for provider in providersInUse.withLock({ all in defer { all.removeAll() }; return Array(all.values) }) {
            await provider.shutdown()
        }
        if let client = webPushClient.withLock({ client in defer { client = nil }; return client }) { try? await client.shutdown() }
    }

    /// The least time between two sends (unless a full batch waits).
    static let gather: Duration = .milliseconds(5)
    /// How long pushes sent wait to leave the table together.
    static let settleEvery: Duration = .milliseconds(100)

    /// Sends claimed pushes, all at once, and settles those to be retried or whose device is
    /// gone; returns those done with (sent, refused for good or expired), for the caller to settle.
    func send(_ claimed: [OutgoingPush]) async -> [OutgoingPush] {
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
        let results = await sendAll(pushes)
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
        await settle(done: [], retry: retry, gone: gone)
        return done
    }

    func settle(done: [OutgoingPush], retry: [(OutgoingPush, Duration)], gone: [OutgoingPush]) async {
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

    /// Sends pushes at once: APNs ones as one batch of streams per signing key and host (the
    /// containers sharing a key share its connection), Web Push ones each a request of its own.
    func sendAll(_ pushes: [OutgoingPush]) async -> [(OutgoingPush, PushOutcome)] {
        struct Route: Hashable {
            var provider: APNsProvider.Identity
            var host: String
        }
        var results: [(OutgoingPush, PushOutcome)] = []
        var apns: [(push: OutgoingPush, token: String, host: String)] = []
        var webPushes: [OutgoingPush] = []
        for push in pushes {
            switch push.address {
            case .apns(let token, let apnsEnvironment):
                apns.append((push, token, settings.apnsHost(for: apnsEnvironment)))
            case .webPush:
                webPushes.append(push)
            }
        }
        var tls: NIOSSLContext?
        do {
            tls = try apnsTLS.withLock { made in
                if made == nil, !apns.isEmpty { made = try PushProviders.apnsTLS(settings) }
                return made
            }
        } catch {
            results += apns.map { ($0.push, .retry(after: nil, reason: "no TLS for APNs: \(error)")) }
            apns.removeAll()
        }
        var credentials: [CredentialKey: APNsCredential?] = [:]
        var batches: [Route: (provider: APNsProvider, pushes: [(push: OutgoingPush, token: String, topic: String)])] = [:]
        for (push, token, host) in apns {
            let key = CredentialKey(containerID: push.containerID, environment: push.environment)
            if credentials[key] == nil { credentials[key] = .some(try? await credential(containerID: key.containerID, environment: key.environment)) }
            guard let credential = credentials[key] ?? nil else {
                results.append((push, .refused("no APNs credential is set for this environment; set one with 'stratus push apns set'")))
                continue
            }
            let route = Route(provider: credential.provider.identity, host: host)
            batches[route, default: (credential.provider, [])].pushes.append((push, token, credential.setting.topic))
        }
        return await withTaskGroup(of: [(OutgoingPush, PushOutcome)].self) { group in
            for (route, batch) in batches {
                guard let tls else { continue }
                group.addTask {
                    Array(zip(batch.pushes.map(\.push), await self.providers.sendAPNs(batch.pushes, host: route.host, provider: batch.provider, tls: tls)))
                }
            }
            for push in webPushes {
                group.addTask { [(push, await self.sendWebPush(push))] }
            }
            for await sent in group { results += sent }
            return results
        }
    }

    func sendWebPush(_ push: OutgoingPush) async -> PushOutcome {
        guard case .webPush(let endpoint, let p256dh, let auth) = push.address else { return .refused("not a Web Push address") }
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

extension OutgoingPush {
    var provider: String {
        if case .apns = address { return "apns" }
        return "webpush"
    }
}

/// Wakes a loop waiting with a timeout. A signal while nothing waits is kept (one) for the next
/// wait. (An AsyncStream served this once: a wait whose timeout won cancelled its iteration,
/// which ended the stream, and every later wait returned at once: the loop spun.)
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: (id: Int, continuation: CheckedContinuation<Void, Never>)?
        var expired = 0
        var last = 0
    }

    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }

    /// Returns at the next signal (or at once for one kept), or after `timeout`.
    func wait(_ timeout: Duration) async {
        let id = state.withLock { state -> Int in
            state.last += 1
            return state.last
        }
        let timer = Task { [self] in
            try? await Task.sleep(for: timeout)
            expire(id)
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.pending || state.expired == id {
                    state.pending = false
                    return true
                }
                state.waiter = (id, continuation)
                return false
            }
            if now { continuation.resume() }
        }
        timer.cancel()
    }

    private func expire(_ id: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter, waiter.id == id else {
                state.expired = id
                return nil
            }
            state.waiter = nil
            return waiter.continuation
        }
        waiter?.resume()
    }
}
