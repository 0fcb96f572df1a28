import Crypto
import Foundation
import StratusCore

/// Seals small JSON payloads into opaque, tamper-evident, URL-safe strings (HMAC-SHA-256 with a
/// server secret), for sync tokens, continuation markers and web auth tokens. Each purpose has its
/// own key, so a token minted for one use is rejected by every other.
public struct TokenSealer: Sendable {
    let secretBytes: [UInt8]
    /// Made once: every sync token a notification or a change feed answers is sealed with it.
    /// (Never mutated after init, so reading it from any thread is safe; CryptoKit does not mark it Sendable.)
    nonisolated(unsafe) let secret: SymmetricKey

    public init(secret: [UInt8]) {
        self.secretBytes = secret
        self.secret = SymmetricKey(data: secret)
    }

    /// The key sync tokens are sealed with: derived from the server secret, and sealing nothing
    /// else, so `stratus container export` can hand it to the server a container moves to (sync
    /// tokens carry change positions, not rights: each is checked against the caller's own
    /// database) without handing over the secret that seals sessions.
    public static func syncKey(from secret: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array("stratus sync-token key v1".utf8), using: SymmetricKey(data: secret)))
    }

    /// `base64url(payload) + "." + base64url(mac)`.
    public func seal(_ payload: JSON, purpose: String) -> String {
        let body = JSONWriter.bytes(payload)
        return Self.base64url(body) + "." + signature(body, purpose: purpose)
    }

    /// The payload of a token sealed for `purpose`, or `nil` when it is malformed, forged or for another purpose.
    public func open(_ token: String, purpose: String) -> JSON? {
        guard token.utf8.count <= 4096 else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = Self.decode(String(parts[0])), isSignature(String(parts[1]), of: body, purpose: purpose) else { return nil }
        return try? JSONParser.parse(body)
    }

    /// The MAC of `body` for `purpose`, base64url: what a token carries after its payload, or what
    /// vouches for a payload sent in the open beside it.
    func signature(_ body: [UInt8], purpose: String) -> String {
        Self.base64url(Array(HMAC<SHA256>.authenticationCode(for: Array(purpose.utf8) + [0] + body, using: secret)))
    }

    /// Whether `signature` is `body`'s for `purpose` (compared in constant time).
    func isSignature(_ signature: String, of body: [UInt8], purpose: String) -> Bool {
        guard let mac = Self.decode(signature) else { return false }
        return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: Array(purpose.utf8) + [0] + body, using: secret)
    }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    static let reverse: [Int8] = {
        var table = [Int8](repeating: -1, count: 256)
        for (index, byte) in alphabet.enumerated() { table[Int(byte)] = Int8(index) }
        return table
    }()

    /// Unpadded base64url (RFC 4648 §5).
    static func base64url(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index + 2 < bytes.count {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
            // Appended one by one: an array literal per three bytes made sealing a token cost more
            // than its HMAC.
            out.append(alphabet[Int(value >> 18 & 63)])
            out.append(alphabet[Int(value >> 12 & 63)])
            out.append(alphabet[Int(value >> 6 & 63)])
            out.append(alphabet[Int(value & 63)])
            index += 3
        }
        let rest = bytes.count - index
        if rest == 1 {
            let value = UInt32(bytes[index]) << 16
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)]]
        } else if rest == 2 {
            let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
            out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], alphabet[Int(value >> 6 & 63)]]
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes unpadded base64url; `nil` for any other character or an impossible length.
    static func decode(_ text: String) -> [UInt8]? {
        let input = Array(text.utf8)
        guard input.count % 4 != 1 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(input.count * 3 / 4)
        var buffer: UInt32 = 0
        var bits = 0
        for byte in input {
            let value = reverse[Int(byte)]
            guard value >= 0 else { return nil }
            buffer = buffer << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                out.append(UInt8(buffer >> UInt32(bits) & 0xFF))
            }
        }
        return out
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
        prefix + base64url(randomBytes(32))
    }

    /// A new API token in CloudKit's own form: 64 lowercase hexadecimal characters (256 bits),
    /// which clients such as MistKit check before sending anything.
    public static func randomAPIToken() -> String {
        let digits = Array("0123456789abcdef".utf8)
        return String(decoding: randomBytes(32).flatMap { [digits[Int($0 >> 4)], digits[Int($0 & 15)]] }, as: UTF8.self)
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }
}
