import StratusCore

/// The request decoders a records call goes through: `Query.parse` (a `records/query` query, or
/// a subscription's) against a schema with a field of every type, then the query evaluated in
/// memory against records of every type (`QueryMatch`, what query subscriptions fire on), and
/// `ModifyRequest.decode` with the field values it decodes (`records/modify`). Nothing may crash;
/// a query that parses must evaluate.
enum QueryTarget {
    static let schema: Schema = {
        do {
            return try SchemaLanguage.parse("""
                DEFINE SCHEMA
                    RECORD TYPE Note (
                        title STRING QUERYABLE SORTABLE SEARCHABLE,
                        count INT64 QUERYABLE SORTABLE,
                        ratio DOUBLE QUERYABLE SORTABLE,
                        at TIMESTAMP QUERYABLE SORTABLE,
                        tags LIST<STRING> QUERYABLE SEARCHABLE,
                        numbers LIST<INT64> QUERYABLE SORTABLE,
                        place LOCATION QUERYABLE SORTABLE,
                        places LIST<LOCATION> QUERYABLE,
                        owner REFERENCE QUERYABLE,
                        data BYTES,
                        file ASSET,
                        plain STRING
                    );
                """)
        } catch {
            FuzzFailure.fail("the query target's schema does not parse: \(error)")
        }
    }()

    /// Records with values of every type, decoded as a records/modify request decodes them.
    static let records: [Record] = {
        let bodies = [
            #"{"title": {"value": "Groceries and more"}, "count": {"value": 3}, "ratio": {"value": 0.5}, "at": {"value": 1700000000000, "type": "TIMESTAMP"}, "tags": {"value": ["a", "b"]}, "numbers": {"value": [1, 2, 3]}, "place": {"value": {"latitude": 52.5, "longitude": 13.4}}, "places": {"value": [{"latitude": 0, "longitude": 0}]}, "owner": {"value": {"recordName": "other", "action": "NONE"}}}"#,
            #"{"title": {"value": ""}, "count": {"value": -9223372036854775808}, "ratio": {"value": -1e300}, "tags": {"value": []}, "plain": {"value": "x"}}"#,
            #"{}"#,
        ]
        return bodies.enumerated().map { index, text in
            var fields: [String: FieldValue] = [:]
            guard let members = (try? JSONParser.parse(text))?.objectValue else { FuzzFailure.fail("a record of the query target does not parse") }
            for (name, value) in members {
                guard let decoded = try? FieldValue.decode(value, field: name, knownType: schema.field(name, of: "Note")?.type) else {
                    FuzzFailure.fail("field \(name) of the query target's record \(index) does not decode")
                }
                fields[name] = decoded
            }
            return Record(recordName: "r\(index)", recordType: "Note", fields: fields, createdAt: 1_700_000_000_000, createdBy: "_a", modifiedAt: 1_700_000_000_000)
        }
    }()

    static func run(_ bytes: [UInt8]) {
        guard let json = try? JSONParser.parse(bytes) else { return }
        for candidate in [json["query"], json].compactMap({ $0 }) {
            guard let query = try? Query.parse(candidate, schema: schema) else { continue }
            for record in records { _ = query.matches(record) }
        }
        if let request = try? ModifyRequest.decode(json, newRecordName: { "new-record" }) {
            _ = request.operations.count
        }
        for operation in json["operations"]?.arrayValue ?? [] {
            for (name, value) in operation["record"]?["fields"]?.objectValue ?? [:] {
                _ = try? FieldValue.decode(value, field: name, knownType: schema.field(name, of: "Note")?.type)
            }
        }
    }
}
