import Foundation
import StratusCore

/// Stops the run with a message libFuzzer prints beside the input that caused it.
enum FuzzFailure {
    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("stratus-fuzz: \(message)\n".utf8))
        fatalError(message)
    }
}

/// `JSONParser` against Foundation's `JSONSerialization` on the same bytes: the same documents
/// accepted and rejected, and the same values, except where Stratus's parser is stricter by
/// design (a byte-order mark, duplicate keys, nesting deeper than 64, integers outside 64 bits,
/// numbers too large for a Double, unpaired surrogate escapes). Whatever it accepts, `JSONWriter`
/// writes back to the same value.
enum JSONTarget {
    /// Reasons Stratus refuses a document that JSON's grammar allows.
    static let stricterByDesign = ["byte-order mark", "duplicate key", "deeper than", "signed 64-bit range", "too large for a 64-bit float",
                                   "unpaired UTF-16 surrogate"]

    static func run(_ bytes: [UInt8]) {
        let foundation = try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        let ours: JSON
        do {
            ours = try JSONParser.parse(bytes)
        } catch {
            if let foundation, !stricterByDesign.contains(where: { error.message.contains($0) }), foundationLeniency(bytes, error) == nil {
                FuzzFailure.fail("JSONParser refused what JSONSerialization read (\(error.message)): \(String(describing: foundation).prefix(200))")
            }
            return
        }
        checkNumber(bytes, ours)
        let written = JSONWriter.bytes(ours)
        guard let again = try? JSONParser.parse(written), again == ours else {
            FuzzFailure.fail("JSONWriter's text does not parse back to the same value: \(String(decoding: written.prefix(200), as: UTF8.self))")
        }
        guard let foundation else {
            FuzzFailure.fail("JSONParser read what JSONSerialization refused: \(String(decoding: written.prefix(200), as: UTF8.self))")
        }
        if let difference = difference(ours, foundation, at: "$") {
            FuzzFailure.fail("JSONParser and JSONSerialization read different values at \(difference)")
        }
    }

    /// Where `ours` and Foundation's value differ, or `nil`.
    static func difference(_ ours: JSON, _ theirs: Any, at path: String) -> String? {
        switch ours {
        case .null:
            return theirs is NSNull ? nil : "\(path): null against \(theirs)"
        case .bool(let value):
            guard let number = theirs as? NSNumber, isBoolean(number) else { return "\(path): \(value) against \(theirs)" }
            return number.boolValue == value ? nil : "\(path): \(value) against \(number)"
        case .int(let value):
            guard let number = theirs as? NSNumber, !isBoolean(number) else { return "\(path): \(value) against \(theirs)" }
            // Foundation reads integers near the 64-bit limits as (imprecise) Doubles.
            if isFloatingPoint(number) { return closeEnough(Double(value), number.doubleValue) ? nil : "\(path): \(value) against \(number.doubleValue)" }
            return number.int64Value == value ? nil : "\(path): \(value) against \(number)"
        case .double(let value):
            guard let number = theirs as? NSNumber, !isBoolean(number) else { return "\(path): \(value) against \(theirs)" }
            // Foundation's JSONSerialization on Linux does not round decimals correctly
            // (0.30000000000000004 reads as 0.3000000000000001, 1.7976931348623157e100 as
            // 1.7976931348623145e100): here it only vouches for the number, and `checkNumber`
            // holds Stratus's parser to the correctly rounded value.
            return closeEnough(value, number.doubleValue) ? nil : "\(path): \(value) against \(number.doubleValue)"
        case .string(let value):
            guard let text = theirs as? String else { return "\(path): a string against \(theirs)" }
            let same = value.unicodeScalars.elementsEqual(text.unicodeScalars) || asFoundationReads(value).elementsEqual(asFoundationReads(text))
            return same ? nil : "\(path): \(value.debugDescription) against \(text.debugDescription)"
        case .array(let items):
            guard let others = theirs as? [Any], others.count == items.count else { return "\(path): \(items.count) items against \(theirs)" }
            for (index, item) in items.enumerated() {
                if let found = difference(item, others[index], at: "\(path)[\(index)]") { return found }
            }
            return nil
        case .object(let members):
            // Keys that differ only in a U+FEFF Foundation drops are one key to it.
            guard let others = theirs as? [String: Any], others.count == Set(members.keys.map(asFoundationReads)).count else {
                return "\(path): \(members.count) members against \(theirs)"
            }
            for (key, value) in members {
                let dropped = asFoundationReads(key)
                guard let other = others[key] ?? others.first(where: { asFoundationReads($0.key) == dropped })?.value else {
                    return "\(path): key \(key.debugDescription) missing"
                }
                if let found = difference(value, other, at: "\(path).\(key)") { return found }
            }
            return nil
        case .raw(let bytes):
            guard let parsed = try? JSONParser.parse(bytes) else { return "\(path): raw JSON that does not parse" }
            return difference(parsed, theirs, at: path)
        }
    }

    /// Why Foundation's JSONSerialization (on Linux) reads a document RFC 8259 refuses, which
    /// Stratus's parser rightly refuses: `nil` when no such reason applies.
    /// - control characters other than tab, line feed and carriage return: it skips them around
    ///   values (`\0` `0` `\u{3}` reads as 0) and takes them raw inside strings;
    /// - a trailing comma (`[1,]`, `{"a":1,}`).
    static func foundationLeniency(_ bytes: [UInt8], _ refusal: JSONParser.Failure) -> String? {
        if bytes.contains(where: { $0 < 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }) { return "a control character" }
        if refusal.message.hasPrefix("trailing comma") { return "a trailing comma" }
        return nil
    }

    /// A document that is one number reads as Swift's correctly rounded `Double(String)` (or the
    /// exact `Int64`) reads it.
    static func checkNumber(_ bytes: [UInt8], _ ours: JSON) {
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty, text.unicodeScalars.allSatisfy({ "0123456789+-.eE".unicodeScalars.contains($0) }) else { return }
        switch ours {
        case .int(let value):
            if let exact = Int64(text), exact != value { FuzzFailure.fail("\(text) read as \(value)") }
        case .double(let value):
            if let exact = Double(text), exact.bitPattern != value.bitPattern, !(exact == 0 && value == 0) {
                FuzzFailure.fail("\(text) read as \(value), not \(exact)")
            }
        default:
            FuzzFailure.fail("\(text) read as \(ours)")
        }
    }

    /// A string's scalars without U+FEFF (zero-width no-break space), which Foundation's
    /// JSONSerialization (on Linux) drops from strings and keys where it follows a backslash
    /// escape, keeping the others in the same string, and Stratus's parser rightly keeps.
    static func asFoundationReads(_ text: String) -> [Unicode.Scalar] {
        text.unicodeScalars.filter { $0 != "\u{FEFF}" }
    }

    /// Within a billionth of each other (or both zero).
    static func closeEnough(_ a: Double, _ b: Double) -> Bool {
        a == b || abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    }

    /// Foundation gives `true` and `false` as its boolean NSNumber subclass (1 and 0 are plain NSNumbers).
    static func isBoolean(_ number: NSNumber) -> Bool {
        String(describing: type(of: number)).contains("Boolean")
    }

    static func isFloatingPoint(_ number: NSNumber) -> Bool {
        let type = String(cString: number.objCType)
        return type == "d" || type == "f"
    }
}
