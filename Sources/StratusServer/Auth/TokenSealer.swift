import Crypto
import Foundation
import StratusCore

/// Seals small JSON payloads into opaque, tamper-evident, URL-safe strings (HMAC-SHA-256 with a
/// server secret), for sync tokens, continuation markers and web auth tokens. Each purpose has its
/// own key, so a token minted for one use is rejected by every other.
public struct TokenSealer: Sendable {
    let secretBytes: [UInt8]
    var secret: SymmetricKey { SymmetricKey(data: secretBytes) }

    public init(secret: [UInt8]) {
        self.secretBytes = secret
    }

    /// `base64url(payload) + "." + base64url(mac)`.
    public func seal(_ payload: JSON, purpose: String) -> String {
        let body = JSONWriter.bytes(payload)
        let mac = HMAC<SHA256>.authenticationCode(for: Array(purpose.utf8) + [0] + body, using: secret)
        return Self.base64url(body) + "." + Self.base64url(Array(mac))
    }

    /// The payload of a token sealed for `purpose`, or `nil` when it is malformed, forged or for another purpose.
    public func open(_ token: String, purpose: String) -> JSON? {
        guard token.utf8.count <= 4096 else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = Self.decode(String(parts[0])), let mac = Self.decode(String(parts[1])) else { return nil }
        guard HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Array(purpose.utf8) + [0] + body, using: secret) else {
            return nil
        }
        return try? JSONParser.parse(body)
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: String) -> [UInt8]? {
        guard text.utf8.allSatisfy({ ($0 >= 48 && $0 <= 57) || ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || $0 == 45 || $0 == 95 }) else {
            return nil
        }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }

    /// SHA-256 of a secret such as an API token, for storage.
    public static func hash(_ secret: String) -> [UInt8] {
        Array(SHA256.hash(data: Data(secret.utf8)))
    }

    /// Compares two strings in time independent of where they differ.
    public static func constantTimeEquals(_ a: String, _ b: String) -> Bool {
        let x = Array(SHA256.hash(data: Data(a.utf8)))
        let y = Array(SHA256.hash(data: Data(b.utf8)))
        var difference: UInt8 = 0
        for index in 0..<x.count { difference |= x[index] ^ y[index] }
        return difference == 0
    }

    /// A new random secret token: `prefix` + 43 URL-safe characters (256 bits).
    public static func randomToken(prefix: String) -> String {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return prefix + base64url(bytes)
    }
}
