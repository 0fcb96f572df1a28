import Foundation
import Synchronization

/// A container-environment: each container has separate data and schema in both.
public enum ContainerEnvironment: String, Sendable, CaseIterable, Hashable {
    case development
    case production

    /// The compact code stored in PostgreSQL.
    public var code: Int16 { self == .development ? 1 : 2 }

    /// Parses the lower-case URL segment; anything else (including `Production`) is rejected.
    public init(segment: String) throws(StratusError) {
        guard let value = ContainerEnvironment(rawValue: segment) else {
            throw .badRequest("unknown environment '\(segment.prefix(40))'; use 'development' or 'production'")
        }
        self = value
    }
}

/// The three databases of a container-environment.
public enum DatabaseScope: String, Sendable, Hashable {
    case `public`
    case `private`
    case shared

    /// The compact code stored in PostgreSQL (also CloudKit's notification `dbs` numbering).
    public var code: Int16 {
        switch self {
        case .public: return 1
        case .private: return 2
        case .shared: return 3
        }
    }

    public init(segment: String) throws(StratusError) {
        guard let value = DatabaseScope(rawValue: segment) else {
            throw .badRequest("unknown database '\(segment.prefix(40))'; use 'public', 'private' or 'shared'")
        }
        self = value
    }
}

/// Validation of the names clients choose. The rules are documented in README.md.
public enum Names {
    /// The default zone of every database.
    public static let defaultZone = "_defaultZone"

    /// Container identifiers: 1–128 characters of letters, digits, `.`, `-`, `_`, starting with a
    /// letter or digit (CloudKit's look: `iCloud.com.example.Notes`).
    public static func validateContainer(_ name: String) throws(StratusError) {
        guard !name.isEmpty, name.utf8.count <= 128, let first = name.unicodeScalars.first,
              isASCIIAlphanumeric(first),
              name.unicodeScalars.allSatisfy({ isASCIIAlphanumeric($0) || $0 == "." || $0 == "-" || $0 == "_" })
        else {
            throw .badRequest("invalid container identifier '\(printable(name))': use 1–128 letters, digits, '.', '-' or '_', starting with a letter or digit")
        }
    }

    /// Zone names: `_defaultZone`, or 1–255 letters, digits, `.`, `-`, `_` starting with a letter or digit.
    public static func validateZone(_ name: String) throws(StratusError) {
        if name == defaultZone { return }
        guard !name.isEmpty, name.utf8.count <= 255, let first = name.unicodeScalars.first, isASCIIAlphanumeric(first),
              name.unicodeScalars.allSatisfy({ isASCIIAlphanumeric($0) || $0 == "." || $0 == "-" || $0 == "_" })
        else {
            throw .badRequest("invalid zone name '\(printable(name))': use 1–255 letters, digits, '.', '-' or '_', starting with a letter or digit")
        }
    }

    /// Record names: 1–255 UTF-8 bytes of printable characters; no control characters, no
    /// invisible formatting characters (bidi overrides, zero-width), no NUL.
    public static func validateRecordName(_ name: String) throws(StratusError) {
        guard !name.isEmpty else { throw .badRequest("recordName must not be empty") }
        guard name.utf8.count <= 255 else {
            throw .badRequest("recordName '\(printable(name))' is longer than 255 bytes")
        }
        if name.isPrintableASCII { return }
        for scalar in name.unicodeScalars where !isPrintable(scalar) {
            throw .badRequest("recordName '\(printable(name))' contains a control or invisible character (U+\(String(scalar.value, radix: 16, uppercase: true)))")
        }
    }

    /// Record type names: a letter, then letters, digits or `_`, at most 255 (the schema language's
    /// identifiers); `cloudkit.share` and `Users` are system types.
    public static func validateRecordType(_ name: String) throws(StratusError) {
        guard isIdentifier(name) else {
            throw .badRequest("invalid recordType '\(printable(name))': use a letter followed by letters, digits or '_' (at most 255)")
        }
    }

    /// Field names: a letter, then letters, digits or `_`, at most 255.
    public static func validateFieldName(_ name: String) throws(StratusError) {
        guard isIdentifier(name) else {
            throw .badRequest("invalid field name '\(printable(name))': use a letter followed by letters, digits or '_' (at most 255); names starting with '_' are reserved")
        }
    }

    /// A letter then letters, digits or `_`, 1–255 bytes.
    public static func isIdentifier(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 255, let first = name.unicodeScalars.first, isASCIILetter(first) else { return false }
        return name.unicodeScalars.allSatisfy { isASCIIAlphanumeric($0) || $0 == "_" }
    }

    /// Whether `name` is 1 to `maximumBytes` bytes of printable characters (safe to store and to print).
    public static func isPrintableName(_ name: String, maximumBytes: Int) -> Bool {
        !name.isEmpty && name.utf8.count <= maximumBytes && (name.isPrintableASCII || name.unicodeScalars.allSatisfy(isPrintable))
    }

    /// Whether `scalar` may appear in a client-chosen name.
    public static func isPrintable(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.properties.generalCategory {
        case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator, .paragraphSeparator:
            return false
        default:
            return true
        }
    }

    /// `name` shortened and with invisible characters escaped, safe to put in an error reason.
    public static func printable(_ name: String) -> String {
        var out = ""
        for scalar in name.unicodeScalars.prefix(80) {
            if isPrintable(scalar) { out.unicodeScalars.append(scalar) } else { out += "\\u{\(String(scalar.value, radix: 16))}" }
        }
        if name.unicodeScalars.count > 80 { out += "…" }
        return out
    }

    static func isASCIILetter(_ scalar: Unicode.Scalar) -> Bool {
        (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z")
    }

    static func isASCIIAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
        isASCIILetter(scalar) || (scalar >= "0" && scalar <= "9")
    }
}

/// CloudKit-style user record names: `_` followed by 32 lowercase hex digits.
public enum UserRecordName {
    /// Whether `name` has the `_` + 32 lowercase hex form.
    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard bytes.count == 33, bytes[0] == UInt8(ascii: "_") else { return false }
        return bytes.dropFirst().allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 >= 97 && $0 <= 102) }
    }

    /// A new random user record name.
    public static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        var text = "_"
        for _ in 0..<32 { text += String(Int.random(in: 0..<16, using: &generator), radix: 16) }
        return text
    }
}

extension String {
    /// Whether the text holds U+0000 (scanned as contiguous UTF-8: field values run to a megabyte).
    var containsNUL: Bool {
        var text = self
        return text.withUTF8 { bytes in bytes.baseAddress.map { memchr($0, 0, bytes.count) != nil } ?? false }
    }

    /// Whether every character is printable ASCII (space to `~`): such names need no Unicode check.
    var isPrintableASCII: Bool {
        var text = self
        return text.withUTF8 { bytes in !bytes.contains { $0 < 0x20 || $0 > 0x7E } }
    }
}

/// Random (version 4) UUID strings drawn from the system's secure generator.
///
/// Foundation's `UUID()` on Linux opens, reads and closes `/dev/urandom` on every call: three
/// system calls and a file descriptor per response id, visible in a lookup's profile.
/// `SystemRandomNumberGenerator` reads from `getrandom(2)`
/// without a descriptor.
public enum RandomUUID {
    /// `xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx` in upper case (`UUID().uuidString`'s form) or lower case.
    public static func string(uppercase: Bool = false) -> String {
        var generator = SystemRandomNumberGenerator()
        return format(high: generator.next(), low: generator.next(), uppercase: uppercase)
    }

    /// An id unique to this process's run without a system call: a random 128-bit start drawn
    /// once, its low half counting up. For request ids, which must not repeat but need not be
    /// unguessable (never a secret: use `string()` for those).
    public static func sequential() -> String {
        let step = counter.add(1, ordering: .relaxed).newValue
        return format(high: start.high, low: start.low &+ step, uppercase: false)
    }

    private static let start: (high: UInt64, low: UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next(), generator.next())
    }()
    private static let counter = Atomic<UInt64>(0)

    /// The version-4 form of 128 bits.
    static func format(high bits: UInt64, low lowBits: UInt64, uppercase: Bool) -> String {
        let high = bits & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000
        let low = lowBits & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        let digits: StaticString = uppercase ? "0123456789ABCDEF" : "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { buffer in
            digits.withUTF8Buffer { hex in
                var position = 0
                func put(_ value: UInt64, nibbles: Int) {
                    var shift = (nibbles - 1) * 4
                    while shift >= 0 {
                        buffer[position] = hex[Int((value >> UInt64(shift)) & 0xF)]
                        position += 1
                        shift -= 4
                    }
                }
                func dash() {
                    buffer[position] = UInt8(ascii: "-")
                    position += 1
                }
                put(high >> 32, nibbles: 8); dash()
                put(high >> 16, nibbles: 4); dash()
                put(high, nibbles: 4); dash()
                put(low >> 48, nibbles: 4); dash()
                put(low, nibbles: 12)
            }
            return 36
        }
    }
}
