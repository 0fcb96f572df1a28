import Crypto
import Foundation
import HTTPTypes
import StratusCore

/// A server-to-server request's signature (CKWS §2.2): three headers naming the key, the date
/// and an ECDSA P-256 / SHA-256 signature (DER, base64) over `date:base64(sha256(body)):path`.
///
/// Choices where CloudKit is silent: the date must be UTC in exactly the form
/// `2026-11-24T10:00:00Z` (no fractional seconds, no offset); it may differ from the server's
/// clock by 10 minutes at most either way; the path may be signed with its query string (what
/// the request target is) or without it (what OpenCloudKit signs): both are accepted.
struct RequestSignature {
    static let keyIDHeader = HTTPField.Name("X-Apple-CloudKit-Request-KeyID")!
    static let dateHeader = HTTPField.Name("X-Apple-CloudKit-Request-ISO8601Date")!
    static let signatureHeader = HTTPField.Name("X-Apple-CloudKit-Request-SignatureV1")!
    /// How far a request's date may be from the server's clock, either way.
    static let allowedSkew: Int64 = 600

    var keyID: String
    /// The date header as sent (it is part of the signed message).
    var dateText: String
    /// The date, seconds since 1970.
    var date: Int64
    /// The DER signature.
    var signature: P256.Signing.ECDSASignature

    /// Whether `headers` ask for server-to-server authentication (any of its headers is present).
    static func isPresent(in headers: HTTPFields) -> Bool {
        headers[keyIDHeader] != nil || headers[dateHeader] != nil || headers[signatureHeader] != nil
    }

    /// The signature headers of a request, checked for form; `AUTHENTICATION_FAILED` naming
    /// what is wrong otherwise.
    init(headers: HTTPFields) throws(StratusError) {
        guard let keyID = headers[Self.keyIDHeader], !keyID.isEmpty else {
            throw StratusError(.authenticationFailed, "a signed request needs the X-Apple-CloudKit-Request-KeyID header (the key ID 'stratus key add' printed)")
        }
        guard keyID.utf8.count == 64, keyID.utf8.allSatisfy({ $0.isHexDigit }) else {
            throw StratusError(.authenticationFailed, "the X-Apple-CloudKit-Request-KeyID is not a key ID: 64 hexadecimal digits, as 'stratus key add' printed")
        }
        guard let dateText = headers[Self.dateHeader] else {
            throw StratusError(.authenticationFailed, "a signed request needs the X-Apple-CloudKit-Request-ISO8601Date header, like 2026-11-24T10:00:00Z")
        }
        guard let date = Self.parseDate(dateText) else {
            throw StratusError(.authenticationFailed, "the X-Apple-CloudKit-Request-ISO8601Date must be UTC ISO 8601 without fractional seconds, like 2026-11-24T10:00:00Z")
        }
        guard let signatureText = headers[Self.signatureHeader] else {
            let other = headers.first { $0.name.canonicalName.hasPrefix("x-apple-cloudkit-request-signature") }
            throw StratusError(.authenticationFailed, other.map { "unsupported signature version \($0.name.rawName): send X-Apple-CloudKit-Request-SignatureV1" }
                                                        ?? "a signed request needs the X-Apple-CloudKit-Request-SignatureV1 header")
        }
        guard signatureText.utf8.count <= 200, let der = Data(base64Encoded: signatureText),
              let signature = try? P256.Signing.ECDSASignature(derRepresentation: der) else {
            throw StratusError(.authenticationFailed, "the X-Apple-CloudKit-Request-SignatureV1 is not a base64 DER-encoded ECDSA P-256 signature")
        }
        self.keyID = keyID.lowercased()
        self.dateText = dateText
        self.date = date
        self.signature = signature
    }

    /// `2026-11-24T10:00:00Z` as seconds since 1970; `nil` for any other form.
    static func parseDate(_ text: String) -> Int64? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
              let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
              (1...12).contains(month), hour < 24, minute < 60, second < 60 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        guard components.isValidDate(in: calendar), let date = calendar.date(from: components) else { return nil }
        return Int64(date.timeIntervalSince1970)
    }

    /// Refuses a date more than `allowedSkew` seconds from `now` (seconds since 1970) either way.
    func checkDate(now: Double) throws(StratusError) {
        let skew = Double(date) - now
        guard abs(skew) <= Double(Self.allowedSkew) else {
            let seconds = Int(abs(skew).rounded())
            throw StratusError(.authenticationFailed, "the request's date is \(seconds) seconds \(skew < 0 ? "behind" : "ahead of") the server's clock; "
                + "signed requests are accepted within 10 minutes of it: sign each request as it is sent, and check the client's clock")
        }
    }

    /// `base64(sha256(body))`.
    static func bodyHash(_ body: some DataProtocol) -> String {
        Data(SHA256.hash(data: Data(body))).base64EncodedString()
    }

    /// The messages a client may have signed for the request target `target` (path and query):
    /// with the query string, and without it.
    func messages(bodyHash: String, target: String) -> [String] {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? target
        let withQuery = "\(dateText):\(bodyHash):\(target)"
        return path == target ? [withQuery] : [withQuery, "\(dateText):\(bodyHash):\(path)"]
    }

    /// The message among `messages` the signature is valid for under `key`, if any.
    func verifiedMessage(_ messages: [String], key: P256.Signing.PublicKey) -> String? {
        messages.first { Self.verify(signature, message: Data($0.utf8), key: key) }
    }

    /// What the replay guard records of a verified request: the signature itself, with its `s`
    /// made the lower of `s` and `n − s` (`(r, s)` and `(r, n − s)` are both valid signatures of
    /// one message, so a resent request could otherwise pass as new with `s` flipped).
    ///
    /// Not the signed message: CloudKit JS and MistKit date requests to the second, so two equal
    /// requests in one second (a poll, a retry, two parallel lookups) sign the same message, each
    /// with a signature of its own (ECDSA signing is randomized). Those are new requests; only a
    /// signature received before is a replay.
    var replayDigest: Data {
        let raw = Array(signature.rawRepresentation)
        var r = Array(raw[0..<32])
        var s = Array(raw[32..<64])
        if Self.isGreater(s, Self.halfOrder) { s = Self.subtract(Self.order, s) }
        r += s
        return Data(SHA256.hash(data: r))
    }

    /// The order n of P-256's group, big-endian, and n / 2 (rounded down).
    static let order: [UInt8] = [0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                 0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51]
    static let halfOrder: [UInt8] = {
        var half = [UInt8](repeating: 0, count: 32)
        var carry: UInt8 = 0
        for index in 0..<32 {
            half[index] = (order[index] >> 1) | (carry << 7)
            carry = order[index] & 1
        }
        return half
    }()

    /// Whether big-endian `a` > `b` (equal lengths).
    static func isGreater(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        for (x, y) in zip(a, b) where x != y { return x > y }
        return false
    }

    /// Big-endian `a − b` (equal lengths, `a` ≥ `b`).
    static func subtract(_ a: [UInt8], _ b: [UInt8]) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: a.count)
        var borrow = 0
        for index in stride(from: a.count - 1, through: 0, by: -1) {
            var value = Int(a[index]) - Int(b[index]) - borrow
            borrow = value < 0 ? 1 : 0
            if value < 0 { value += 256 }
            result[index] = UInt8(value)
        }
        return result
    }

    /// ECDSA P-256 / SHA-256 verification (swift-crypto; the Wycheproof vectors test it).
    static func verify(_ signature: P256.Signing.ECDSASignature, message: Data, key: P256.Signing.PublicKey) -> Bool {
        key.isValidSignature(signature, for: message)
    }
}

extension UInt8 {
    var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
