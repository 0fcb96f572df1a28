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

    /// The text of `value`.
    public static func string(_ value: JSON) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    /// Appends the encoding of `value` to `out`.
    public static func write(_ value: JSON, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .int(let number): out.append(contentsOf: String(number).utf8)
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

    /// Writes a finite double in its shortest round-trip form (`1.0` stays distinguishable from `1`).
    public static func writeDouble(_ number: Double, into out: inout [UInt8]) {
        guard number.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        var text = "\(number)"
        if !text.contains(".") && !text.contains("e") && !text.contains("E") { text += ".0" }
        out.append(contentsOf: text.utf8)
    }

    /// Writes `text` as a JSON string literal.
    public static func writeString(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [0x5C, 0x22])
            case UInt8(ascii: "\\"): out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            case 0x00..<0x20:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"), hex[Int(byte >> 4)], hex[Int(byte & 0xF)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
