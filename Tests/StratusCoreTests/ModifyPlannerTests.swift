import StratusCore
import Testing

@Suite struct ModifyPlannerTests {
    func request(_ ops: JSON, atomic: Bool = true) throws -> ModifyRequest {
        try ModifyRequest.decode(["operations": ops, "atomic": .bool(atomic)], newRecordName: { "generated" })
    }

    func plan(_ request: ModifyRequest, current: [String: Record] = [:], schema: Schema = Schema(), allow: Bool = true) -> ModifyPlanner.BatchPlan {
        ModifyPlanner.plan(request, current: current, schema: schema, allowSchemaChanges: allow, caller: "_u", now: 1000)
    }

    func error(_ outcome: Result<PlannedWrite, StratusError>) -> String? {
        if case .failure(let error) = outcome { return error.code.name }
        return nil
    }

    let existing = Record(recordName: "a", recordType: "Note", changeSeq: 36, fields: ["x": .int64(1)], createdAt: 1, createdBy: "_c", modifiedAt: 1, modifiedBy: "_c")

    @Test func createsAndInfersSchema() throws {
        let result = plan(try request([["operationType": "create", "record": ["recordType": "Note", "fields": ["t": ["value": "x"], "n": ["value": 1.5]]]]]))
        guard case .success(.save(let record, let isNew)) = result.outcomes[0] else { Issue.record("not saved"); return }
        #expect(isNew)
        #expect(record.recordName == "generated")
        #expect(record.fields == ["t": .string("x"), "n": .double(1.5)])
        #expect(Set(result.schemaAdditions.compactMap(\.field)) == ["t", "n"])
        #expect(result.schema.field("n", of: "Note")?.type == FieldType(.double))
    }

    @Test func productionRefusesUnknownTypesAndFields() throws {
        let unknownType = plan(try request([["operationType": "create", "record": ["recordName": "a", "recordType": "Note"]]]), allow: false)
        #expect(error(unknownType.outcomes[0]) == "BAD_REQUEST")
        let schema = Schema(recordTypes: ["Note": ["x": FieldSchema(type: FieldType(.int64))]])
        let unknownField = plan(try request([["operationType": "create", "record": ["recordName": "a", "recordType": "Note", "fields": ["y": ["value": 1]]]]]),
                                schema: schema, allow: false)
        #expect(error(unknownField.outcomes[0]) == "BAD_REQUEST")
        let known = plan(try request([["operationType": "create", "record": ["recordName": "a", "recordType": "Note", "fields": ["x": ["value": 1]]]]]),
                         schema: schema, allow: false)
        #expect(error(known.outcomes[0]) == nil)
        #expect(known.schemaAdditions.isEmpty)
    }

    @Test func changeTagsDecideConflicts() throws {
        let stale = plan(try request([["operationType": "update", "record": ["recordName": "a", "recordChangeTag": "z", "fields": ["x": ["value": 2]]]]]),
                         current: ["a": existing])
        #expect(error(stale.outcomes[0]) == "CONFLICT")
        if case .failure(let conflict) = stale.outcomes[0] { #expect(conflict.serverRecord?.changeTag == "10") }
        let fresh = plan(try request([["operationType": "update", "record": ["recordName": "a", "recordChangeTag": "10", "fields": ["x": ["value": 2]]]]]),
                         current: ["a": existing])
        guard case .success(.save(let record, _)) = fresh.outcomes[0] else { Issue.record("not saved"); return }
        #expect(record.fields["x"] == .int64(2))
        #expect(record.createdBy == "_c")
        #expect(record.modifiedBy == "_u")
    }

    @Test func missingAndTombstonedRecords() throws {
        var tombstone = existing
        tombstone.deleted = true
        let ops: JSON = [
            ["operationType": "update", "record": ["recordName": "a", "recordChangeTag": "10"]],
            ["operationType": "delete", "record": ["recordName": "b", "recordChangeTag": "1"]],
            ["operationType": "forceDelete", "record": ["recordName": "c"]],
            ["operationType": "create", "record": ["recordName": "d", "recordType": "Note"]],
        ]
        let result = plan(try request(ops), current: ["a": tombstone, "d": tombstone])
        #expect(error(result.outcomes[0]) == "NOT_FOUND")
        #expect(error(result.outcomes[1]) == "NOT_FOUND")
        guard case .success(.alreadyAbsent) = result.outcomes[2] else { Issue.record("forceDelete of a missing record should succeed"); return }
        guard case .success(.save(_, let isNew)) = result.outcomes[3] else { Issue.record("create over a tombstone"); return }
        #expect(!isNew, "a tombstone row is revived, not inserted")
    }

    @Test func decodingRejectsBadShapes() {
        #expect(throws: StratusError.self) { try ModifyRequest.decode(["operations": []], newRecordName: { "x" }) }
        #expect(throws: StratusError.self) { try ModifyRequest.decode(["operationz": []], newRecordName: { "x" }) }
        #expect(throws: StratusError.self) {
            try ModifyRequest.decode(["operations": [["operationType": "explode", "record": ["recordName": "a"]]]], newRecordName: { "x" })
        }
        #expect(throws: StratusError.self) {
            try ModifyRequest.decode(["operations": [["operationType": "create", "record": ["recordName": 5, "recordType": "T"]]]], newRecordName: { "x" })
        }
        #expect(throws: StratusError.self) {
            try ModifyRequest.decode(["operations": [
                ["operationType": "forceDelete", "record": ["recordName": "a"]],
                ["operationType": "forceDelete", "record": ["recordName": "a"]],
            ]], newRecordName: { "x" })
        }
        let many = JSON.array(Array(repeating: ["operationType": "forceDelete", "record": ["recordName": "a"]], count: 201))
        #expect(throws: StratusError.self) { try ModifyRequest.decode(["operations": many], newRecordName: { "x" }) }
    }

    @Test func namesAreChecked() {
        #expect(throws: StratusError.self) { try Names.validateRecordName("a\u{202E}b") }
        #expect(throws: StratusError.self) { try Names.validateRecordName("a\u{0}b") }
        #expect(throws: StratusError.self) { try Names.validateRecordName(String(repeating: "x", count: 256)) }
        #expect(throws: StratusError.self) { try Names.validateRecordType("_secret") }
        #expect(throws: StratusError.self) { try Names.validateContainer("../etc") }
        #expect(throws: StratusError.self) { try Names.validateZone("a/b") }
        #expect(throws: Never.self) { try Names.validateRecordName("a';DROP TABLE x;--") }
        #expect(UserRecordName.isValid(UserRecordName.random()))
        #expect(!UserRecordName.isValid("_ABCDEF"))
    }
}
