/// Where ``JSONWriter`` puts its bytes: an array, or ``JSONByteCount`` when only the length is
/// wanted, so that measuring and writing follow one set of encoding rules.
public protocol JSONOutput {
    mutating func append(_ byte: UInt8)
    mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8
}

extension Array: JSONOutput where Element == UInt8 {}

/// Counts the bytes ``JSONWriter`` would write, without storing them.
public struct JSONByteCount: JSONOutput {
    public private(set) var count = 0

    public init() {}

    public mutating func append(_ byte: UInt8) { count += 1 }

    public mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        count += bytes.withContiguousStorageIfAvailable { $0.count } ?? bytes.reduce(0) { total, _ in total + 1 }
    }
}

/// Writes into memory sized beforehand with ``JSONByteCount`` (see ``JSONWriter/write(_:exactly:into:)``).
struct JSONFixedOutput: JSONOutput {
    let memory: UnsafeMutableRawBufferPointer
    var count = 0

    mutating func append(_ byte: UInt8) {
        memory[count] = byte
        count += 1
    }

    mutating func append<S: Sequence>(contentsOf bytes: S) where S.Element == UInt8 {
        let copied = bytes.withContiguousStorageIfAvailable { source -> Int in
            let target = UnsafeMutableRawBufferPointer(rebasing: memory[count..<(count + source.count)])
            target.copyMemory(from: UnsafeRawBufferPointer(source))
            return source.count
        }
        if let copied {
            count += copied
        } else {
            for byte in bytes { append(byte) }
        }
    }
}

/// Serialises ``JSON`` values compactly, with object keys in sorted order so that equal values
/// always produce equal bytes.
public enum JSONWriter {
    /// The UTF-8 bytes of `value`.
    public static func bytes(_ value: JSON) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    /// The number of bytes ``write(_:into:)`` writes for `value`.
    public static func byteCount(_ value: JSON) -> Int {
        var counter = JSONByteCount()
        write(value, into: &counter)
        return counter.count
    }

    /// Writes `value` into `memory`, which must hold exactly ``byteCount(_:)`` bytes, the count
    /// passed as `size`. Large responses are written once into memory of their final size: writing
    /// into an array that grew by doubling, then copying it into the response buffer, cost copies
    /// and page faults on fresh memory that dominated encoding on large change-feed pages.
    public static func write(_ value: JSON, exactly size: Int, into memory: UnsafeMutableRawBufferPointer) {
        precondition(memory.count == size, "the memory must have the size byteCount(_:) measured")
        var out = JSONFixedOutput(memory: memory)
        write(value, into: &out)
        precondition(out.count == size, "JSONWriter wrote \(out.count) bytes where it counted \(size)")
    }

    /// The text of `value`.
    public static func string(_ value: JSON) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    /// Appends the encoding of `value` to `out`.
    @inlinable
    public static func write<Out: JSONOutput>(_ value: JSON, into out: inout Out) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .int(let number): writeInteger(number, into: &out)
        case .double(let number): writeDouble(number, into: &out)
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (offset, element) in elements.enumerated() {
                if offset > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .raw(let bytes):
            out.append(contentsOf: bytes)
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (offset, key) in members.keys.sorted().enumerated() {
                if offset > 0 { out.append(UInt8(ascii: ",")) }
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(members[key]!, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// Writes `number` in base `radix` with lowercase digits: the text of `String(number, radix:)`,
    /// without making a String (every record in a response carries two timestamps and a tag).
    @inlinable
    public static func writeInteger<Out: JSONOutput>(_ number: Int64, radix: Int = 10, into out: inout Out) {
        precondition(radix >= 2 && radix <= 36, "radix must be in 2...36")
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 65) { digits in
            let base = UInt64(radix)
            var magnitude = number.magnitude
            var start = digits.count
            repeat {
                let digit = UInt8(magnitude % base)
                magnitude /= base
                start -= 1
                digits[start] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
            } while magnitude > 0
            if number < 0 {
                start -= 1
                digits[start] = UInt8(ascii: "-")
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    /// Writes a finite double in its shortest round-trip form (`1.0` stays distinguishable from `1`).
    public static func writeDouble<Out: JSONOutput>(_ number: Double, into out: inout Out) {
        guard number.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        var text = "\(number)"
        if !text.contains(".") && !text.contains("e") && !text.contains("E") { text += ".0" }
        out.append(contentsOf: text.utf8)
    }

    /// Writes `text` as a JSON string literal. Runs of bytes that need no escape are copied whole;
    /// the scan for the next byte to escape reads eight bytes at a time (stored records carry
    /// kilobyte strings that are counted and written on every write).
    @inlinable
    public static func writeString<Out: JSONOutput>(_ text: String, into out: inout Out) {
        out.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var runStart = 0
            var index = 0
            while true {
                index = nextEscape(in: bytes, from: index)
                guard index < bytes.count else { break }
                if runStart < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
                writeEscape(bytes[index], into: &out)
                index += 1
                runStart = index
            }
            if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<bytes.count])) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The offset of the first byte at or after `start` that JSON must escape (a control byte,
    /// `"` or `\\`), or `bytes.count`.
    @inlinable
    static func nextEscape(in bytes: UnsafeBufferPointer<UInt8>, from start: Int) -> Int {
        var index = start
        if let base = UnsafeRawPointer(bytes.baseAddress) {
            let ones: UInt64 = 0x0101_0101_0101_0101
            let highs: UInt64 = 0x8080_8080_8080_8080
            while index + 8 <= bytes.count {
                let word = UInt64(littleEndian: base.loadUnaligned(fromByteOffset: index, as: UInt64.self))
                // A lane's high bit is set when its byte is below 0x20, or equals '"' or '\\' (zero
                // after the XOR). A borrow can also set it in a lane above a true match, never
                // without one: a flagged word holds a byte to escape, which the byte loop finds.
                let quotes = word ^ (ones &* 0x22)
                let backslashes = word ^ (ones &* 0x5C)
                let control = (word &- (ones &* 0x20)) & ~word
                let quote = (quotes &- ones) & ~quotes
                let backslash = (backslashes &- ones) & ~backslashes
                if (control | quote | backslash) & highs != 0 { break }
                index += 8
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return index }
            index += 1
        }
        return index
    }

    @inlinable
    static func writeEscape<Out: JSONOutput>(_ byte: UInt8, into out: inout Out) {
        out.append(0x5C)
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): out.append(byte)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        default:
            let hex = Array("0123456789abcdef".utf8)
            out.append(contentsOf: [UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
        }
    }
}
