@testable import StratusServer
import StratusCore
import Testing

/// The record dictionary the server writes (`Wire/RecordJSON`).
@Suite struct RecordWireTests {
    /// The direct writer of the read paths produces exactly what the dictionary path does.
    @Test func storedRecordsRenderLikeDecodedOnes() throws {
        let fields: [String: FieldValue] = [
            "title": .string("q\"uote\n"), "n": .int64(-3), "tags": .list(.string, [.string("a"), .string("b")]),
        ]
        var decoded = Record(recordName: "r\\1", recordType: "Note", changeSeq: 12345, fields: fields,
                             createdAt: 1, createdBy: "_c", modifiedAt: 2, modifiedBy: "_m\u{1}")
        var stored = decoded
        stored.fields = [:]
        stored.encodedFields = Record.encodeFields(fields)
        decoded.encodedFields = nil
        for zoneID in [nil, JSON.object(["zoneName": "z", "ownerRecordName": "_o"])] {
            let rendering = RecordRendering(zoneID: zoneID)
            guard case .raw(let bytes) = stored.wireJSON(rendering) else {
                Issue.record("a stored record should take the direct path")
                continue
            }
            #expect(String(decoding: bytes, as: UTF8.self) == JSONWriter.string(decoded.wireJSON(rendering)))
        }
    }

    /// The read paths splice stored fields into a record's bytes (`wireBytes`); with the sharing
    /// keys present or not, they must be the bytes the general rendering writes.
    @Test(arguments: [(nil, nil, nil), ("parent \"1\"", nil, nil), (nil, "share-1", "0NEa3AEPXwK71VM4gHFnvh2kw"), ("p", "s", "g")] as [(String?, String?, String?)])
    func recordBytesMatchTheGeneralRendering(parent: String?, share: String?, shortGUID: String?) {
        let fields: [String: FieldValue] = ["title": .string("t"), "rank": .int64(3)]
        let record = Record(recordName: "r\"1", recordType: "Note", changeSeq: 1234, fields: fields, createdAt: 5, createdBy: "_a",
                            modifiedAt: 6, modifiedBy: "_b", parent: parent, shareName: share, shortGUID: shortGUID)
        var stored = record
        stored.encodedFields = Record.encodeFields(fields)
        for zoneID in [nil, ["zoneName": "Z"] as JSON] {
            let general = JSONWriter.bytes(record.wireJSON(RecordRendering(zoneID: zoneID)))
            #expect(JSONWriter.bytes(stored.wireJSON(RecordRendering(zoneID: zoneID))) == general,
                    "\(String(decoding: JSONWriter.bytes(stored.wireJSON(RecordRendering(zoneID: zoneID))), as: UTF8.self)) against \(String(decoding: general, as: UTF8.self))")
        }
    }
}
