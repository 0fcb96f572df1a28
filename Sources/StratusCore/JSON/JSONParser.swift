/// A strict JSON parser (RFC 8259) with limits suited to an internet-facing service.
///
/// Rejected, each with a line and column: trailing commas, comments, single quotes,
/// `NaN`/`Infinity`, a byte-order mark, trailing data after the document, duplicate object
/// keys, nesting deeper than ``maximumDepth``, integers outside the signed 64-bit range,
/// numbers that overflow a `Double`, invalid UTF-8 and unpaired UTF-16 surrogate escapes.
public struct JSONParser {
    /// Deepest nesting of arrays and objects accepted.
    public static let maximumDepth = 64

    /// A parse failure with its position (1-based line and column, counted in bytes).
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var message: String
        public var line: Int
        public var column: Int
        public var description: String { "invalid JSON at line \(line), column \(column): \(message)" }
    }

    // The document's bytes, borrowed for the length of `parse` (no bounds checks or reference
    // counting on each read, as an array would have).
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// Members of the objects being parsed, innermost last. Each object is built from its slice
    /// once complete, at its final size: inserting members one by one into an empty dictionary
    /// re-hashed it at every doubling, a cost that showed in profiles of large modifies.
    private var members: [(key: String, value: JSON, keyStart: Int)] = []

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    /// Parses one JSON document that must fill all of `bytes` (surrounding white space allowed).
    public static func parse(_ bytes: [UInt8]) throws(Failure) -> JSON {
        let result: Result<JSON, Failure> = bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(Failure) -> JSON in try parse(buffer) }
        }
        return try result.get()
    }

    /// Parses one JSON document that must fill all of `bytes`, read in place (a request body's
    /// buffer, without copying it into an array first).
    public static func parse(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> JSON {
        try parse(bytes.assumingMemoryBound(to: UInt8.self))
    }

    private static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(Failure) -> JSON {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        if parser.index >= bytes.count { throw parser.failure("the body is empty; expected a JSON object") }
        if bytes.count >= 3, bytes[0] == 0xEF, bytes[1] == 0xBB, bytes[2] == 0xBF {
            throw parser.failure("a byte-order mark is not allowed")
        }
        let value = try parser.parseValue()
        parser.skipWhitespace()
        if parser.index < bytes.count { throw parser.failure("unexpected data after the end of the JSON document") }
        return value
    }

    /// Parses a UTF-8 string.
    public static func parse(_ text: String) throws(Failure) -> JSON {
        try parse(Array(text.utf8))
    }

    private func failure(_ message: String, at position: Int? = nil) -> Failure {
        let end = min(position ?? index, bytes.count)
        var line = 1
        var column = 1
        var i = 0
        while i < end {
            if bytes[i] == UInt8(ascii: "\n") {
                line += 1
                column = 1
            } else {
                column += 1
            }
            i += 1
        }
        return Failure(message: message, line: line, column: column)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func parseValue() throws(Failure) -> JSON {
        skipWhitespace()
        guard index < bytes.count else { throw failure("unexpected end of input; expected a value") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case UInt8(ascii: "'"): throw failure("strings must use double quotes")
        case UInt8(ascii: "/"): throw failure("comments are not allowed in JSON")
        case UInt8(ascii: "N"), UInt8(ascii: "I"): throw failure("NaN and Infinity are not JSON numbers")
        default: throw failure("unexpected character; expected a value")
        }
    }

    private mutating func expectLiteral(_ word: String) throws(Failure) {
        let start = index
        let expected = Array(word.utf8)
        guard index + expected.count <= bytes.count else { throw failure("unexpected end of input", at: start) }
        for offset in 0..<expected.count where bytes[index + offset] != expected[offset] {
            throw failure("unexpected character; expected a value", at: start)
        }
        index += expected.count
    }

    private mutating func enter() throws(Failure) {
        depth += 1
        if depth > Self.maximumDepth {
            throw failure("nesting is deeper than \(Self.maximumDepth) levels")
        }
    }

    private mutating func parseObject() throws(Failure) -> JSON {
        try enter()
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object([:])
        }
        // One scratch list for every object of the document: reserved once, not grown member by member.
        if members.capacity == 0 { members.reserveCapacity(16) }
        let base = members.count
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end of input inside an object") }
            if bytes[index] == UInt8(ascii: "}") { throw failure("trailing comma before '}'") }
            guard bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a double-quoted key") }
            let keyStart = index
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':' after a key") }
            index += 1
            let value = try parseValue()
            members.append((key, value, keyStart))
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end of input inside an object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                depth -= 1
                var object = [String: JSON](minimumCapacity: members.count - base)
                for member in members[base...] where object.updateValue(member.value, forKey: member.key) != nil {
                    throw failure("duplicate key \"\(member.key.prefix(64))\"", at: member.keyStart)
                }
                members.removeSubrange(base...)
                return .object(object)
            }
            throw failure("expected ',' or '}'")
        }
    }

    private mutating func parseArray() throws(Failure) -> JSON {
        try enter()
        index += 1
        var elements: [JSON] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { throw failure("trailing comma before ']'") }
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw failure("unexpected end of input inside an array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                depth -= 1
                return .array(elements)
            }
            throw failure("expected ',' or ']'")
        }
    }

    private mutating func parseString() throws(Failure) -> String {
        let start = index
        index += 1
        // Fast path: no escapes, so the string is the bytes between the quotes (one allocation,
        // none for short strings, instead of a byte array and then a string).
        var end = index
        var highBits: UInt8 = 0
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") {
                let run = UnsafeBufferPointer(rebasing: bytes[index..<end])
                // ASCII needs no validation; anything else must be well-formed UTF-8.
                let text = highBits < 0x80 ? String(decoding: run, as: UTF8.self) : String(validating: run, as: UTF8.self)
                guard let text else { throw failure("string is not valid UTF-8", at: start) }
                index = end + 1
                return text
            }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { break }
            highBits |= byte
            end += 1
        }
        var utf8: [UInt8] = []
        var runStart = index
        while true {
            guard index < bytes.count else { throw failure("unterminated string", at: start) }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                utf8.append(contentsOf: bytes[runStart..<index])
                index += 1
                break
            }
            if byte < 0x20 { throw failure("control characters must be escaped in strings") }
            if byte == UInt8(ascii: "\\") {
                utf8.append(contentsOf: bytes[runStart..<index])
                index += 1
                guard index < bytes.count else { throw failure("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): utf8.append(0x22)
                case UInt8(ascii: "\\"): utf8.append(0x5C)
                case UInt8(ascii: "/"): utf8.append(0x2F)
                case UInt8(ascii: "b"): utf8.append(0x08)
                case UInt8(ascii: "f"): utf8.append(0x0C)
                case UInt8(ascii: "n"): utf8.append(0x0A)
                case UInt8(ascii: "r"): utf8.append(0x0D)
                case UInt8(ascii: "t"): utf8.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u")
                        else { throw failure("unpaired UTF-16 surrogate in \\u escape") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw failure("unpaired UTF-16 surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw failure("unpaired UTF-16 surrogate in \\u escape")
                    }
                    guard let unicode = Unicode.Scalar(scalar) else { throw failure("invalid \\u escape") }
                    utf8.append(contentsOf: Array(String(Character(unicode)).utf8))
                default:
                    throw failure("invalid escape sequence")
                }
                runStart = index
                continue
            }
            index += 1
        }
        guard let text = String(validating: utf8, as: UTF8.self) else {
            throw failure("string is not valid UTF-8", at: start)
        }
        return text
    }

    private mutating func parseHex4() throws(Failure) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("incomplete \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw failure("invalid hex digit in \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    private mutating func parseNumber() throws(Failure) -> JSON {
        let start = index
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw failure("invalid number", at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw failure("numbers may not have leading zeros", at: start) }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("invalid number: digits expected after '.'", at: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw failure("invalid number: digits expected in exponent", at: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if isInteger, index - start <= 18 {
            // Up to 18 digits (with the sign) cannot overflow: no text needed.
            var value: Int64 = 0
            for position in (bytes[start] == UInt8(ascii: "-") ? start + 1 : start)..<index {
                value = value * 10 + Int64(bytes[position] - UInt8(ascii: "0"))
            }
            if bytes[start] == UInt8(ascii: "-") {
                if value == 0 { return .double(-0.0) }
                value = -value
            }
            return .int(value)
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger {
            if text == "-0" { return .double(-0.0) }
            guard let value = Int64(text) else {
                throw failure("integer \(text.prefix(40)) is outside the signed 64-bit range", at: start)
            }
            return .int(value)
        }
        guard let value = Double(text), value.isFinite else {
            throw failure("number \(text.prefix(40)) is too large for a 64-bit float", at: start)
        }
        return .double(value)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
