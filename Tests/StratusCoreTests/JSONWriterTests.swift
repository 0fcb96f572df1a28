import StratusCore
import Testing

@Suite struct JSONWriterTests {
    /// The record size limit counts fields with `wireByteCount` instead of encoding them: it must
    /// agree with the encoding byte for byte, escapes and multi-byte characters included.
    @Test(arguments: [
        FieldValue.string("plain"),
        .string(""),
        .string("quote\" backslash\\ newline\n tab\t return\r bell\u{07} nul\u{00} é 日本 🚀"),
        .bytes("AAECAwQ="),
        .int64(-42),
        .int64(Int64.min),
        .timestamp(1_795_335_446_987),
        .double(1.5),
        .double(-0.0),
        .reference(Reference(recordName: "r\"1", zoneName: "z", ownerRecordName: "_owner", action: .deleteSelf)),
        .location(["latitude": 1.25, "longitude": -3.5, "timestamp": 1_700_000_000_000]),
        .list(.string, [.string("a"), .string("b\"c")]),
        .list(.int64, []),
    ])
    func wireByteCountMatchesTheEncoding(_ value: FieldValue) {
        let encoded = JSONWriter.bytes(value.wireJSON())
        #expect(value.wireByteCount == encoded.count, "\(value)")
        // Stored records are written by `writeWire`, which must give the very same bytes.
        var direct: [UInt8] = []
        value.writeWire(into: &direct)
        #expect(direct == encoded, "\(value)")
    }

    /// Responses are written once into memory of the size `byteCount` measured: the bytes must be
    /// those `bytes` gives, for every kind of value, and the count exact (or the write traps).
    @Test(arguments: [
        JSON.null, true, 0, -7, 1.5, "", "quote\" backslash\\ nul\u{00} é 🚀",
        .raw(Array(#"{"a":1}"#.utf8)),
        ["records": [.raw(Array(#"{"r":"x"}"#.utf8)), ["b": [1, 2.25, nil, "s\n"], "a": [:]]], "moreComing": false, "zoneID": ["zoneName": "z\"1"]],
    ] as [JSON])
    func exactSizeWritingMatchesTheWriter(_ value: JSON) {
        let expected = JSONWriter.bytes(value)
        let size = JSONWriter.byteCount(value)
        #expect(size == expected.count)
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 1)
        defer { memory.deallocate() }
        JSONWriter.write(value, exactly: size, into: memory)
        #expect(Array(memory) == expected)
    }

    /// Integers and change tags are written digit by digit: the text must be `String(n, radix:)`'s.
    @Test func integersAreWrittenAsTheirText() {
        let numbers: [Int64] = [0, 1, -1, 9, 10, 35, 36, -36, 1_795_335_446_987, Int64.max, Int64.min, Int64.min + 1]
        for number in numbers {
            for radix in [2, 10, 16, 36] {
                var written: [UInt8] = []
                JSONWriter.writeInteger(number, radix: radix, into: &written)
                #expect(String(decoding: written, as: UTF8.self) == String(number, radix: radix), "\(number) in base \(radix)")
            }
        }
    }

    /// `writeString` looks for bytes to escape eight at a time: every byte that needs an escape
    /// must be found wherever it sits in a word, also after multi-byte characters and next to
    /// bytes that are close to it in value (0x1F, 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F, 0x80…).
    @Test func escapesAreFoundAtEveryPositionOfAWord() throws {
        let neighbours: [UInt8] = [0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x00, 0x0A]
        let filler = Array("ab é 日 🚀 xyz 0123456789".utf8)
        for special in neighbours {
            for position in 0..<24 {
                var bytes = filler
                bytes.insert(special, at: position)
                let text = String(decoding: bytes, as: UTF8.self)
                var written: [UInt8] = []
                JSONWriter.writeString(text, into: &written)
                // The byte-by-byte rule: escape below 0x20, '"' and '\\'; copy every other byte.
                var expected: [UInt8] = [UInt8(ascii: "\"")]
                for byte in Array(text.utf8) {
                    switch byte {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"): expected += [0x5C, byte]
                    case 0x0A: expected += Array("\\n".utf8)
                    case 0x00: expected += Array("\\u0000".utf8)
                    case 0x1F: expected += Array("\\u001f".utf8)
                    default: expected.append(byte)
                    }
                }
                expected.append(UInt8(ascii: "\""))
                #expect(written == expected, "byte \(special) at \(position)")
                #expect(try JSONParser.parse(written) == .string(text))
            }
        }
    }

    /// `Record.encodeFields` writes the fields object directly; it must equal the generic writer's
    /// output (keys sorted), which the read paths splice into responses as is.
    @Test func encodedFieldsMatchTheGenericWriter() throws {
        let fields: [String: FieldValue] = [
            "title": .string("a \"title\""), "rank": .int64(7), "Zeta": .double(0.25), "é": .bytes("AA=="),
            "ref": .reference(Reference(recordName: "x", zoneName: nil, ownerRecordName: nil, action: .none)),
            "tags": .list(.string, [.string("a")]),
        ]
        let generic = JSONWriter.bytes(.object(fields.mapValues { $0.wireJSON() }))
        #expect(Record.encodeFields(fields) == generic)
        #expect(Record.encodeFields([:]) == Array("{}".utf8))
        #expect(try Record.decodeFields(Record.encodeFields(fields)) == fields)
    }
}
