import AsyncHTTPClient
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import StratusCore
import StratusStore
import Synchronization

/// What a provider answered one push.
enum PushOutcome: Sendable, Equatable {
    /// Accepted.
    case sent
    /// Refused for now (429, 5xx, a timeout, a connection lost): again after `after`, or the
    /// backoff when `nil`.
    case retry(after: Duration?, reason: String)
    /// The device no longer exists (APNs 410 or BadDeviceToken, Web Push 404 or 410).
    case deviceGone
    /// Refused for good (the payload, the credential or the topic is wrong): dropped, and the
    /// reason kept for `stratus push status`.
    case refused(String)

    var label: String {
        switch self {
        case .sent: "sent"
        case .retry: "retried"
        case .deviceGone: "device_gone"
        case .refused: "refused"
        }
    }
}

/// Where pushes go and what they trust: settings of `stratus serve`.
public struct PushSettings: Sendable {
    /// `HOST:PORT` for every APNs request, instead of Apple's hosts (sandbox and production).
    public var apnsHost: String?
    /// A PEM file of extra certificate authorities trusted for the push hosts.
    public var caFile: String?
    /// How long one request to a provider may take.
    public var timeout: Duration = .seconds(10)

    public init(apnsHost: String? = nil, caFile: String? = nil) {
        self.apnsHost = apnsHost
        self.caFile = caFile
    }

    /// `HOST:PORT` as its two parts (port 443 when none is given).
    static func split(_ host: String) -> (String, Int) {
        guard let colon = host.lastIndex(of: ":"), let port = Int(host[host.index(after: colon)...]) else { return (host, 443) }
        return (String(host[..<colon]), port)
    }

    static let appleHosts: [ContainerEnvironment: String] = [.development: "api.sandbox.push.apple.com:443", .production: "api.push.apple.com:443"]

    /// The APNs host for a device registered in `environment` (its apnsEnvironment).
    func apnsHost(for environment: ContainerEnvironment) -> String {
        apnsHost ?? Self.appleHosts[environment]!
    }
}

/// A container environment's APNs credential in use: its setting (the topic its pushes carry)
/// and the provider that signs and sends them.
struct APNsCredential: Sendable {
    let setting: APNsSetting
    let provider: APNsProvider
}

/// One APNs signing key in use (a key id of a team): its current provider token and its
/// connections (one HTTP/2 connection per APNs host, many streams on it). Containers whose
/// credentials name the same key share it, as Apple allows: one token sends to every topic of its
/// team, while a connection carries one team's tokens only (`PushDispatcher.provider`).
final class APNsProvider: Sendable {
    struct Identity: Hashable, Sendable {
        var keyID: String
        var teamID: String
        /// The key's public half: two credentials naming one key id with different keys stay apart.
        var publicKey: Data
    }

    let identity: Identity
    nonisolated(unsafe) let key: P256.Signing.PrivateKey
    private let token = Mutex<(value: String, issued: ContinuousClock.Instant)?>(nil)
    private let connections = Mutex<[String: APNsConnection]>([:])

    init(keyID: String, teamID: String, key: P256.Signing.PrivateKey) {
        self.identity = Identity(keyID: keyID, teamID: teamID, publicKey: key.publicKey.rawRepresentation)
        self.key = key
    }

    /// The provider token: an ES256 JWT (`kid` the key id, `iss` the team, `iat` now), made again
    /// after 50 minutes (APNs refuses one older than an hour, and one remade more often than every
    /// 20 minutes) or when APNs said it expired.
    func providerToken(renew: Bool = false) throws -> String {
        let now = ContinuousClock.now
        if !renew, let current = token.withLock({ $0 }), now - current.issued < .seconds(50 * 60) { return current.value }
        let value = try ES256JWT.make(header: ["alg": "ES256", "kid": .string(identity.keyID)],
                                      claims: ["iss": .string(identity.teamID), "iat": .int(Int64(Date().timeIntervalSince1970))], key: key)
        token.withLock { $0 = (value, now) }
        return value
    }

    /// The connection to `host` (`HOST:PORT`), made when there is none or the last one closed.
    /// Called by the dispatcher's loop (one task per provider and host at a time), so two are
    /// never made at once.
    func connection(to host: String, tls: NIOSSLContext, timeout: Duration) async throws -> APNsConnection {
        if let current = connections.withLock({ $0[host] }), current.isUsable { return current }
        let (name, port) = PushSettings.split(host)
        let made = try await APNsConnection.connect(host: name, port: port, tls: tls, timeout: timeout)
        let old = connections.withLock { $0.updateValue(made, forKey: host) }
        if let old { await old.close() }
        return made
    }

    func shutdown() async {
        for connection in connections.withLock({ all in defer { all.removeAll() }; return Array(all.values) }) { await connection.close() }
    }
}

/// Sends one push to APNs or a Web Push service and says what came of it.
struct PushProviders: Sendable {
    let settings: PushSettings
    let vapid: VAPIDKeys
    /// The `sub` of VAPID tokens: where a push service can reach the sender. RFC 8292 asks for a
    /// mailto: or https: URI: the server's public URL when it is https, else a postmaster
    /// address at its host.
    let contact: String

    init(settings: PushSettings, vapid: VAPIDKeys, publicURL: String, logger: Logger) {
        self.settings = settings
        self.vapid = vapid
        self.logger = logger
        if publicURL.hasPrefix("https://") {
            contact = publicURL
        } else {
            contact = "mailto:postmaster@" + (URL(string: publicURL)?.host ?? "localhost")
        }
    }
    let logger: Logger

    /// TLS for the push hosts: the system's trust roots and the `--push-ca-file` ones.
    static func tlsConfiguration(_ settings: PushSettings) throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile = settings.caFile {
            tls.additionalTrustRoots = [.certificates(try NIOSSLCertificate.fromPEMFile(caFile))]
        }
        return tls
    }

    /// TLS for APNs connections (HTTP/2 only).
    static func apnsTLS(_ settings: PushSettings) throws -> NIOSSLContext {
        var tls = try tlsConfiguration(settings)
        tls.applicationProtocols = ["h2"]
        return try NIOSSLContext(configuration: tls)
    }

    /// The client for Web Push services.
    static func client(_ settings: PushSettings) throws -> HTTPClient {
        let tls = try tlsConfiguration(settings)
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls, timeout: .init(connect: .seconds(10), read: .seconds(30)),
                                                     connectionPool: .init(idleTimeout: .seconds(300)))
        configuration.httpVersion = .automatic
        return HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
    }

    /// APNs: each push a POST /3/device/<token> with its topic, authenticated by the provider's
    /// token, all on the provider's connection to `host`, written together. Pushes APNs answers
    /// `ExpiredProviderToken` go once more with a token made anew.
    func sendAPNs(_ pushes: [(push: OutgoingPush, token: String, topic: String)], host: String, provider: APNsProvider, tls: NIOSSLContext) async -> [PushOutcome] {
        var outcomes = [PushOutcome?](repeating: nil, count: pushes.count)
        var pending = Array(pushes.indices)
        var renewed = false
        while !pending.isEmpty {
            let bearer: String
            do {
                bearer = "bearer " + (try provider.providerToken(renew: renewed))
            } catch {
                for index in pending { outcomes[index] = .refused("the APNs key could not sign a provider token: \(error)") }
                break
            }
            let results: [Result<APNsResponse, any Error>]
            do {
                let connection = try await provider.connection(to: host, tls: tls, timeout: settings.timeout)
                results = await connection.send(pending.map { request(pushes[$0].push, token: pushes[$0].token, bearer: bearer, topic: pushes[$0].topic) })
            } catch {
                for index in pending { outcomes[index] = .retry(after: nil, reason: "APNs at \(host) could not be reached: \(error)") }
                break
            }
            var again: [Int] = []
            for (index, result) in zip(pending, results) {
                switch result {
                case .failure(let error):
                    outcomes[index] = .retry(after: nil, reason: "APNs at \(host) did not answer: \(error)")
                case .success(let response):
                    let reason = (try? JSONParser.parse(Array(buffer: response.body)))?["reason"]?.stringValue ?? ""
                    if response.status == 403, reason == "ExpiredProviderToken", !renewed {
                        again.append(index)
                    } else {
                        outcomes[index] = Self.apnsOutcome(status: response.status, reason: reason, retryAfter: response.headers.first(name: "retry-after"),
                                                           topic: pushes[index].topic)
                    }
                }
            }
            pending = again
            renewed = true
        }
        return outcomes.map { $0 ?? .retry(after: nil, reason: "not sent") }
    }

    /// One push as an APNs request.
    func request(_ push: OutgoingPush, token: String, bearer: String, topic: String) -> APNsRequest {
        var headers = [("authorization", bearer), ("apns-topic", topic), ("apns-push-type", push.alert ? "alert" : "background"),
                       ("apns-priority", push.alert ? "10" : "5"), ("apns-id", push.pushID.uuidString.lowercased()),
                       ("apns-expiration", String(Int(push.createdAt.timeIntervalSince1970) + Int(PushDispatcher.lifetime.components.seconds)))]
        if let collapseID = push.collapseID { headers.append(("apns-collapse-id", collapseID)) }
        headers.append(("content-type", "application/json"))
        return APNsRequest(path: "/3/device/" + token, headers: headers, body: ByteBuffer(string: push.payload))
    }

    /// What an APNs answer means for the push.
    static func apnsOutcome(status: Int, reason: String, retryAfter: String?, topic: String) -> PushOutcome {
        switch status {
        case 200:
            return .sent
        case 410:
            return .deviceGone
        case 400 where reason == "BadDeviceToken":
            return .deviceGone
        case 429, 500...599:
            return .retry(after: retryAfter.flatMap(Self.retryAfter), reason: "APNs answered \(status) \(reason)")
        case 400 where reason == "DeviceTokenNotForTopic":
            return .refused("APNs: the device token is not for topic '\(topic)': the app that registered it has another bundle id; set the topic to the app's bundle id")
        case 403:
            return .refused("APNs refused the credential (\(reason)): check the key id, team id and .p8 key with 'stratus push apns set'")
        default:
            return .refused("APNs answered \(status) \(reason)")
        }
    }

    /// Web Push: the message encrypted for the browser (RFC 8291), POSTed to its endpoint with a
    /// VAPID token (RFC 8292).
    func sendWebPush(_ push: OutgoingPush, endpoint: String, p256dh: String, auth: String, client: HTTPClient) async -> PushOutcome {
        guard let url = URL(string: endpoint), let scheme = url.scheme, let host = url.host else { return .deviceGone }
        guard let body = WebPushEncryption.encrypt(Array(push.payload.utf8), p256dh: p256dh, auth: auth) else { return .deviceGone }
        let audience = "\(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
        let key = vapid.privateKey(containerID: push.containerID)
        let token: String
        do {
            token = try ES256JWT.make(header: ["typ": "JWT", "alg": "ES256"],
                                      claims: ["aud": .string(audience), "exp": .int(Int64(Date().timeIntervalSince1970) + 12 * 3600), "sub": .string(contact)],
                                      key: key)
        } catch {
            return .refused("the container's VAPID key could not sign: \(error)")
        }
        var request = HTTPClientRequest(url: endpoint)
        request.method = .POST
        // RFC 8292 §3, the parameters joined by a bare comma (as py_vapid and Mozilla's autopush write it).
        request.headers.add(name: "authorization", value: "vapid t=\(token),k=\(TokenSealer.base64url(Array(key.publicKey.x963Representation)))")
        request.headers.add(name: "content-encoding", value: "aes128gcm")
        request.headers.add(name: "content-type", value: "application/octet-stream")
        request.headers.add(name: "ttl", value: String(PushDispatcher.lifetime.components.seconds))
        request.headers.add(name: "urgency", value: push.alert ? "high" : "normal")
        if let collapseID = push.collapseID { request.headers.add(name: "topic", value: Self.webPushTopic(collapseID)) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let status: UInt, headers: HTTPHeaders
        do {
            let response = try await client.execute(request, timeout: .seconds(settings.timeout.components.seconds))
            _ = try? await response.body.collect(upTo: 64 * 1024)
            (status, headers) = (response.status.code, response.headers)
        } catch {
            return .retry(after: nil, reason: "the push service at \(audience) did not answer: \(error)")
        }
        let retryAfter = headers.first(name: "retry-after")
        switch status {
        case 200...299: return .sent
        case 404, 410: return .deviceGone
        case 429, 500...599: return .retry(after: retryAfter.flatMap(Self.retryAfter), reason: "the push service at \(audience) answered \(status)")
        default: return .refused("the push service at \(audience) answered \(status)")
        }
    }

    /// Web Push's `Topic` (RFC 8030 §5.4): at most 32 characters of the base64url alphabet.
    static func webPushTopic(_ id: String) -> String {
        String(TokenSealer.base64url(Array(SHA256.hash(data: Array(id.utf8)))).prefix(32))
    }

    /// `Retry-After` in seconds (or an HTTP date), capped at an hour.
    static func retryAfter(_ header: String) -> Duration? {
        let value = header.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(value) { return .seconds(min(max(seconds, 0), 3600)) }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = format.date(from: value) else { return nil }
        return .seconds(min(max(Int(date.timeIntervalSinceNow.rounded(.up)), 0), 3600))
    }
}
