import Crypto
import Foundation
import Hummingbird
import NIOCore
import NIOWebSocket
import StratusCore
import StratusStore
import Synchronization

/// Notification delivery as CloudKit JS expects it: `tokens/create` returns a `webcourierURL`,
/// which the client long-polls (a plain GET) for one notification at a time; `tokens/register`
/// stores an APNs device token or a Web Push subscription for the user (`PushRegistration`).
final class CourierController: Sendable {
    let records: RecordStore
    let notifier: Notifier
    let authenticator: Authenticator
    /// Charges `tokens/…` calls to the caller's rate limits.
    let rateLimiter: RateLimiter
    let bodies: RequestBodies
    /// Counts delivered notifications.
    let metrics: Metrics
    /// The containers' VAPID keys (Web Push).
    let vapid: VAPIDKeys
    /// The service's public URL, which web courier URLs start with.
    let publicURL: String
    /// Web courier tokens recently polled, by container and hash, with when they were read.
    let courierTokens = Mutex<[String: (CourierToken, ContinuousClock.Instant)]>([:])

    init(records: RecordStore, notifier: Notifier, authenticator: Authenticator, rateLimiter: RateLimiter, bodies: RequestBodies,
         metrics: Metrics, publicURL: String, vapid: VAPIDKeys) {
        self.vapid = vapid
        self.records = records
        self.notifier = notifier
        self.authenticator = authenticator
        self.rateLimiter = rateLimiter
        self.bodies = bodies
        self.metrics = metrics
        self.publicURL = publicURL
    }

    /// How long a poll of the web courier waits for a notification before answering 204.
    static let courierPollTimeout: Duration = .seconds(30)
    /// How long an undelivered notification is kept.
    static let notificationLifetime: Duration = .seconds(7 * 24 * 3600)
    /// How long a web courier token lives without being polled.
    static let courierTokenLifetime: Duration = .seconds(30 * 24 * 3600)

    func addRoutes(to router: Router<BasicRequestContext>) {
        for prefix in ["/device/1", "/database/1"] {
            router.post("\(prefix)/:container/:environment/tokens/create") { request, context -> Response in
                let caller = try await self.courierCaller(request, context)
                let body = try await self.bodies.readObject(request)
                let apnsEnvironment = try Self.apnsEnvironment(body, caller: caller)
                let user = try caller.requireUser(signInURL: self.authenticator.signInURL(container: caller.container.name, environment: caller.environment,
                                                                                          apiToken: caller.apiToken))
                let token = TokenSealer.randomToken(prefix: "wc_")
                try await self.records.subscriptions.createCourierToken(containerID: caller.container.id, environment: caller.environment, owner: user,
                                                          tokenHash: Self.courierTokenHash(token))
                // This process's writes hear of the token now, not when the invalidation comes back.
                self.notifier.invalidate(.courierTokens(containerID: caller.container.id, environment: caller.environment, owner: user))
                let url = "\(self.publicURL)/device/1/\(caller.container.name)/\(caller.environment.rawValue)/courier/\(token)"
                return .json(["apnsEnvironment": .string(apnsEnvironment), "apnsToken": .string(Data(token.utf8).base64EncodedString()),
                              "webcourierURL": .string(url)])
            }
            // The container's VAPID public key, for a signed-in web app's `pushManager.subscribe({applicationServerKey})`
            // (then `tokens/register` with the subscription), as the other device routes: signed in.
            router.get("\(prefix)/:container/:environment/webpush/key") { request, context -> Response in
                let caller = try await self.courierCaller(request, context)
                _ = try caller.requireUser(signInURL: self.authenticator.signInURL(container: caller.container.name, environment: caller.environment,
                                                                                   apiToken: caller.apiToken))
                return .json(["vapidPublicKey": .string(self.vapid.publicKey(containerID: caller.container.id))])
            }
            router.post("\(prefix)/:container/:environment/tokens/register") { request, context -> Response in
                let caller = try await self.courierCaller(request, context)
                let body = try await self.bodies.readObject(request)
                let apnsEnvironment = try Self.apnsEnvironment(body, caller: caller)
                let user = try caller.requireUser(signInURL: self.authenticator.signInURL(container: caller.container.name, environment: caller.environment,
                                                                                          apiToken: caller.apiToken))
                // An APNs device token or a Web Push subscription is stored for the user; the web
                // courier's own token registers nothing (its notifications go to the courier).
                let device = try PushRegistration.device(body, user: user, apnsEnvironment: ContainerEnvironment(rawValue: apnsEnvironment) ?? caller.environment)
                if let device {
                    try await self.records.subscriptions.registerPushDevice(device, containerID: caller.container.id, environment: caller.environment)
                }
                var answer: [String: JSON] = ["apnsEnvironment": .string(apnsEnvironment)]
                if case .webPush(let endpoint, _, _)? = device?.address {
                    answer["webPushSubscription"] = ["endpoint": .string(endpoint)]
                } else {
                    answer["apnsToken"] = body["apnsToken"] ?? .null
                }
                return .json(.object(answer))
            }
        }
        router.get("/device/1/:container/:environment/courier/:token") { request, context -> Response in
            try await self.pollCourier(request, container: context.parameters.get("container") ?? "",
                                       environment: context.parameters.get("environment") ?? "", token: context.parameters.get("token") ?? "")
        }
    }

    /// Authenticates a `tokens/…` call (an API token and the user's web auth token) and charges its rate limits.
    func courierCaller(_ request: Request, _ context: BasicRequestContext) async throws -> Caller {
        let caller = try await authenticator.authenticate(request, containerName: context.parameters.get("container") ?? "",
                                                          environmentSegment: context.parameters.get("environment") ?? "")
        try await rateLimiter.admit(caller, body: [:])
        return caller
    }

    /// The `apnsEnvironment` member: "development" or "production" (the container's environment when absent).
    static func apnsEnvironment(_ body: [String: JSON], caller: Caller) throws(StratusError) -> String {
        guard let given = try Wire.string(body["apnsEnvironment"], key: "apnsEnvironment") else { return caller.environment.rawValue }
        guard given == "development" || given == "production" else {
            throw .badRequest("'apnsEnvironment' must be \"development\" or \"production\"")
        }
        return given
    }

    /// A courier token by hash, remembered for a minute: a client polls again at once after each
    /// notification, and tokens are never revoked (only swept after 30 days without a poll).
    func courierToken(containerID: ContainerID, hash: String) async throws -> CourierToken? {
        let key = "\(containerID)/\(hash)"
        let now = ContinuousClock.now
        if let (token, read) = courierTokens.withLock({ $0[key] }), now - read < .seconds(60) { return token }
        guard let token = try await records.subscriptions.pollCourierToken(containerID: containerID, tokenHash: hash) else { return nil }
        courierTokens.withLock { tokens in
            if tokens.count >= 100_000 { tokens.removeAll() }
            tokens[key] = (token, now)
        }
        return token
    }

    /// `/device/1/<container>/<environment>/courier/<token>`'s parts (answered ahead of the router,
    /// as the data API is: its trie showed in the profile of every poll).
    static func courierPollPath(_ path: String) -> (container: String, environment: String, token: String)? {
        guard path.hasPrefix("/device/1/") else { return nil }
        let parts = path.utf8.split(separator: UInt8(ascii: "/"), maxSplits: 7, omittingEmptySubsequences: false).map { Substring($0) }
        guard parts.count == 7, parts[5] == "courier", parts[3...].allSatisfy({ !$0.isEmpty }) else { return nil }
        return (String(parts[3]), String(parts[4]), String(parts[6]))
    }

    /// SHA-256 of a courier token, in lowercase hex (computed on every poll).
    static func courierTokenHash(_ token: String) -> String {
        let digits = Array("0123456789abcdef".utf8)
        let hash = TokenSealer.hash(token)
        return String(unsafeUninitializedCapacity: hash.count * 2) { buffer in
            for (index, byte) in hash.enumerated() {
                buffer[2 * index] = digits[Int(byte >> 4)]
                buffer[2 * index + 1] = digits[Int(byte & 0x0f)]
            }
            return hash.count * 2
        }
    }

    /// One long poll: the oldest notification waiting for the token (200, its JSON), or 204 after
    /// `courierPollTimeout` (`?timeout=` seconds, 1–60, may shorten or lengthen it). A poll whose
    /// client has gone takes nothing, and a notification whose answer could not be written is put
    /// back for the next poll.
    func pollCourier(_ request: Request, container containerName: String, environment environmentName: String, token text: String) async throws -> Response {
        let environment = try ContainerEnvironment(segment: environmentName)
        let container = try await authenticator.container(named: containerName)
        let unknown = StratusError(.authenticationFailed, "this web courier URL is not valid here: call tokens/create with this container and environment for a new one")
        guard text.hasPrefix("wc_"), text.utf8.count <= 100,
              let token = try await courierToken(containerID: container.id, hash: Self.courierTokenHash(text)),
              token.environment == environment else { throw unknown }
        if request.headers[.upgrade]?.lowercased() == "websocket" { return try webSocketCourier(request, token: token) }
        var timeout = Self.courierPollTimeout
        if let given = request.uri.queryParameters.get("timeout") {
            guard let seconds = Int(given), (1...60).contains(seconds) else { throw StratusError.badRequest("'timeout' must be 1–60 seconds") }
            timeout = .seconds(seconds)
        }
        let deadline = ContinuousClock.now + timeout
        let key = Notifier.CourierKey(containerID: container.id, environment: environment, owner: token.owner)
        let waiter = notifier.couriers.register(key, tokenHash: token.tokenHash)
        defer { notifier.unregister(key, waiter) }
        let connection = RequestConnection.current
        // A client that goes away wakes its poll, which then ends.
        connection?.onGone { waiter.wake() }
        let notifier = self.notifier
        let empty = Response(status: .noContent, headers: [.cacheControl: "no-store"])
        while true {
            // One handed over while the poll waited (a notification of this process's write), or
            // the oldest in the queue.
            let taken: (seq: Int64?, payload: String, made: Date)?
            if let (payload, made) = waiter.takeHanded() ?? notifier.couriers.takeHeld(key, token: token.tokenHash) {
                taken = (nil, payload, made)
            } else if let connection, !connection.isOpen {
                // A client that went away takes nothing: what arrives waits for its next poll.
                return empty
            } else {
                // The look at the deadline always asks PostgreSQL (see `take`).
                taken = try await take(token, key: key, ask: ContinuousClock.now >= deadline)
            }
            if let (seq, payload, made) = taken {
                if let connection {
                    connection.onUndelivered { Task { await notifier.putBack(token, seq: seq, payload: payload) } }
                    if !connection.isOpen {
                        connection.answerFailed()
                        return empty
                    }
                }
                var headers: HTTPFields = [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"]
                let bytes = ByteBuffer(string: payload)
                headers[.contentLength] = String(bytes.readableBytes)
                metrics.notificationDelivered(made: made)
                return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: bytes))
            }
            guard ContinuousClock.now < deadline else { return empty }
            await waiter.wait(until: deadline)
        }
    }

    /// The oldest notification queued for `token`, unless this process knows its queue is empty.
    /// With `ask`, PostgreSQL is asked whatever this process knows: a wake-up can be lost (the
    /// process that queued died before sending it), and a poll's last look at its timeout, or a
    /// WebSocket's after each quiet period, bounds how long that hides a notification.
    func take(_ token: CourierToken, key: Notifier.CourierKey, ask: Bool = false) async throws -> (seq: Int64?, payload: String, made: Date)? {
        guard ask || notifier.couriers.mayHaveQueued(key, token: token.tokenHash) else { return nil }
        let generation = notifier.couriers.queueGeneration(key)
        guard let (seq, payload, made) = try await records.subscriptions.takeNotification(token) else {
            notifier.couriers.noteEmpty(key, token: token.tokenHash, generation: generation)
            return nil
        }
        return (seq, payload, made)
    }

    /// The same URL opened as a WebSocket (`Upgrade: websocket`): the handshake's answer, and
    /// once the connection has switched, every notification for the token as one text frame,
    /// as it arrives, until the client closes.
    func webSocketCourier(_ request: Request, token: CourierToken) throws -> Response {
        guard let connection = RequestConnection.current else {
            throw StratusError.badRequest("a WebSocket needs a connection of its own to this server")
        }
        guard let key = request.headers[.secWebSocketKey], Data(base64Encoded: key)?.count == 16 else {
            throw StratusError.badRequest("a WebSocket handshake needs a Sec-WebSocket-Key header (16 random bytes in base64)")
        }
        guard request.headers[.secWebSocketVersion] == "13" else {
            throw StratusError.badRequest("only WebSocket version 13 is spoken (Sec-WebSocket-Version: 13)")
        }
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8))).base64EncodedString()
        connection.upgrade { channel in await self.streamCourier(token, on: channel) }
        return Response(status: .switchingProtocols, headers: [.upgrade: "websocket", .connection: "Upgrade", .secWebSocketAccept: accept])
    }

    /// Sends each notification waiting for `token` as a text frame, and waits for more, until the
    /// connection closes. One whose frame could not be written is put back.
    func streamCourier(_ token: CourierToken, on channel: any Channel) async {
        let key = Notifier.CourierKey(containerID: token.containerID, environment: token.environment, owner: token.owner)
        let waiter = notifier.couriers.register(key, tokenHash: token.tokenHash, takesMany: true)
        defer { notifier.unregister(key, waiter) }
        channel.closeFuture.whenComplete { _ in waiter.wake() }
        var quietSince = ContinuousClock.now
        while channel.isActive {
            let taken: (seq: Int64?, payload: String, made: Date)?
            if let (payload, made) = waiter.takeHanded() {
                taken = (nil, payload, made)
            } else {
                do {
                    taken = try await take(token, key: key, ask: ContinuousClock.now - quietSince >= Self.courierPollTimeout)
                } catch {
                    // The database is out of reach: try again shortly.
                    try? await Task.sleep(for: .seconds(1))
                    continue
                }
            }
            guard let (seq, payload, made) = taken else {
                if ContinuousClock.now - quietSince >= Self.courierPollTimeout { quietSince = .now }
                await waiter.wait(until: quietSince + Self.courierPollTimeout)
                continue
            }
            do {
                try await channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: payload))).get()
                metrics.notificationDelivered(made: made)
            } catch {
                await notifier.putBack(token, seq: seq, payload: payload)
                return
            }
        }
    }
}
