import Foundation
import StratusCore
import StratusStore

/// What `tokens/register` registers: an APNs device token (hex, as iOS gives it, or base64, as
/// CloudKit JS sends it), or — Stratus's documented extension of the same route — a Web Push
/// subscription (`webPushSubscription`: the browser's `PushSubscription` JSON). The `apnsToken`
/// that `tokens/create` answers (the web courier's, in base64) registers nothing: its
/// notifications go to the courier.
enum PushRegistration {
    /// The device the body registers for `user` (`nil` for a web courier token).
    static func device(_ body: [String: JSON], user: UserID, apnsEnvironment: ContainerEnvironment) throws(StratusError) -> PushDevice? {
        if let subscription = body["webPushSubscription"], subscription != .null {
            return PushDevice(address: try webPush(subscription), user: user)
        }
        guard let given = try Wire.string(body["apnsToken"], key: "apnsToken"), !given.isEmpty, given.utf8.count <= 1_024 else {
            throw .badRequest("'apnsToken' is required: the device token the app got from APNs (hex or base64), or the token tokens/create returned; "
                + "for a browser, send 'webPushSubscription' instead")
        }
        let text = given.trimmingCharacters(in: .whitespaces)
        if text.count.isMultiple(of: 2), text.allSatisfy(\.isHexDigit) {
            guard (64...200).contains(text.count) else { throw .badRequest("an APNs device token is 32 to 100 bytes (64 to 200 hex digits); this one has \(text.count / 2)") }
            return PushDevice(address: .apns(token: text.lowercased(), environment: apnsEnvironment), user: user)
        }
        guard let bytes = Data(base64Encoded: text) else {
            throw .badRequest("'apnsToken' is neither hex (as iOS gives a device token) nor base64 (as CloudKit JS sends it)")
        }
        // The web courier's own token (tokens/create answered it): nothing to register.
        if bytes.starts(with: Array("wc_".utf8)) { return nil }
        guard (32...100).contains(bytes.count) else { throw .badRequest("an APNs device token is 32 to 100 bytes; this one has \(bytes.count)") }
        return PushDevice(address: .apns(token: bytes.map { String(format: "%02x", $0) }.joined(), environment: apnsEnvironment), user: user)
    }

    /// A browser's `PushSubscription`: an https endpoint and its keys (base64url: a P-256 public
    /// key, 65 bytes uncompressed, and a 16-byte authentication secret).
    static func webPush(_ json: JSON) throws(StratusError) -> PushDevice.Address {
        let hint = "give the browser's PushSubscription as JSON: {\"endpoint\": \"https://…\", \"keys\": {\"p256dh\": …, \"auth\": …}}"
        guard let endpoint = json["endpoint"]?.stringValue, endpoint.utf8.count <= 2_048, let url = URL(string: endpoint),
              url.scheme == "https", let host = url.host, !host.isEmpty, !endpoint.contains(where: \.isWhitespace) else {
            throw .badRequest("'webPushSubscription.endpoint' must be the push service's https URL (at most 2048 characters); \(hint)")
        }
        guard let p256dh = json["keys"]?["p256dh"]?.stringValue, let key = base64URL(p256dh), key.count == 65, key.first == 4 else {
            throw .badRequest("'webPushSubscription.keys.p256dh' must be the browser's P-256 public key (65 bytes, base64url); \(hint)")
        }
        guard let auth = json["keys"]?["auth"]?.stringValue, let secret = base64URL(auth), secret.count == 16 else {
            throw .badRequest("'webPushSubscription.keys.auth' must be the browser's 16-byte authentication secret (base64url); \(hint)")
        }
        return .webPush(endpoint: endpoint, p256dh: p256dh, auth: auth)
    }

    /// Base64url (padded or not, or plain base64) decoded.
    static func base64URL(_ text: String) -> Data? {
        var plain = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        plain += String(repeating: "=", count: (4 - plain.count % 4) % 4)
        return Data(base64Encoded: plain)
    }

    /// A device as a user's export shows it (never the Web Push authentication secret).
    static func json(_ device: PushDevice) -> JSON {
        switch device.address {
        case .apns(let token, let environment):
            ["kind": "apns", "apnsToken": .string(token), "apnsEnvironment": .string(environment.rawValue), "registeredAt": ManagementJSON.iso(device.registeredAt)]
        case .webPush(let endpoint, _, _):
            ["kind": "webPush", "endpoint": .string(endpoint), "registeredAt": ManagementJSON.iso(device.registeredAt)]
        }
    }
}
