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
        #expect(value.wireByteCount == JSONWriter.bytes(value.wireJSON()).count, "\(value)")
    }
}
