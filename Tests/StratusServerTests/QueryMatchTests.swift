import Foundation
import StratusCore
@testable import StratusTestSupport
import Testing

/// `Query.matches` decides in memory which records a query subscription fires on. It must agree
/// with `records/query` (the store's SQL on index entries) record for record: here, 300 records
/// with missing fields, lists, look-alike Unicode, prefixes and points, against every comparator.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct QueryMatchTests {
    @Test func inMemoryMatchingAgreesWithTheStoresQueries() async throws {
        try await Harness.run { harness in
            let user = try await harness.container().signedUp()
            var generator = SplitMix64(seed: 26)
            let words = ["apple", "Apple", "app", "é", "e\u{301}", "Zeta", "zeta", "beta", "", "b"]
            let sentences = ["the quick brown fox", "Déjà vu again", "quick thinking", "brown bread and butter", "nothing here"]
            var records: [Record] = []
            var operations: [JSON] = []
            for index in 0..<300 {
                var fields: [String: JSON] = [:]
                // The first record has every field, so the just-in-time schema types them all.
                let all = index == 0
                if all || Int.random(in: 0..<5, using: &generator) > 0 { fields["n"] = ["value": .int(Int64.random(in: -3...12, using: &generator)), "type": "INT64"] }
                if all || Bool.random(using: &generator) { fields["x"] = ["value": .double(Double(Int.random(in: -20...20, using: &generator)) / 4), "type": "DOUBLE"] }
                if all || Int.random(in: 0..<4, using: &generator) > 0 { fields["s"] = ["value": .string(words.randomElement(using: &generator)!), "type": "STRING"] }
                if all || Bool.random(using: &generator) {
                    let tags = ["a", "b", "c", "d"].filter { _ in Bool.random(using: &generator) }
                    fields["tags"] = ["value": .array(tags.map { .string($0) }), "type": "STRING_LIST"]
                }
                if all || Bool.random(using: &generator) { fields["text"] = ["value": .string(sentences.randomElement(using: &generator)!), "type": "STRING"] }
                if all || Bool.random(using: &generator) {
                    fields["place"] = ["value": ["latitude": .double(48.85 + Double.random(in: -0.05...0.05, using: &generator)),
                                                 "longitude": .double(2.35 + Double.random(in: -0.05...0.05, using: &generator))], "type": "LOCATION"]
                }
                let name = "r\(index)"
                operations.append(["operationType": "create", "record": ["recordName": .string(name), "recordType": "Item", "fields": .object(fields)]])
                var values: [String: FieldValue] = [:]
                for (field, json) in fields { values[field] = try FieldValue.decode(json, field: field, knownType: nil) }
                records.append(Record(recordName: name, recordType: "Item", fields: values, createdBy: UserID(user.userRecordName!), modifiedBy: UserID(user.userRecordName!)))
            }
            for start in stride(from: 0, to: operations.count, by: 100) {
                let saved = try await user.modify("private", Array(operations[start..<start + 100]))
                #expect(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            }
            var schema = Schema()
            schema.recordTypes["Item"] = records[0].fields.mapValues { FieldSchema.justInTime($0.type) }

            func filter(_ field: String, _ comparator: String, _ value: JSON, system: Bool = false) -> JSON {
                [system ? "systemFieldName" : "fieldName": .string(field), "comparator": .string(comparator), "fieldValue": ["value": value]]
            }
            var filters: [JSON] = []
            for comparator in ["EQUALS", "NOT_EQUALS", "LESS_THAN", "LESS_THAN_OR_EQUALS", "GREATER_THAN", "GREATER_THAN_OR_EQUALS"] {
                filters.append(filter("n", comparator, 4))
                filters.append(filter("x", comparator, .double(0.5)))
                filters.append(filter("s", comparator, "apple"))
                filters.append(filter("s", comparator, "é"))
            }
            for comparator in ["IN", "NOT_IN"] {
                filters.append(filter("n", comparator, [1, 2, 12]))
                filters.append(filter("s", comparator, ["Apple", "e\u{301}", ""]))
            }
            for comparator in ["BEGINS_WITH", "NOT_BEGINS_WITH"] {
                filters.append(filter("s", comparator, "app"))
                filters.append(filter("s", comparator, "e"))
            }
            for comparator in ["LIST_CONTAINS", "NOT_LIST_CONTAINS", "LIST_MEMBER_BEGINS_WITH", "NOT_LIST_MEMBER_BEGINS_WITH"] {
                filters.append(filter("tags", comparator, "b"))
            }
            for comparator in ["LIST_CONTAINS_ANY", "NOT_LIST_CONTAINS_ANY", "LIST_CONTAINS_ALL", "NOT_LIST_CONTAINS_ALL"] {
                filters.append(filter("tags", comparator, ["a", "c"]))
            }
            filters.append(filter("text", "CONTAINS_ALL_TOKENS", "quick BROWN"))
            filters.append(filter("text", "CONTAINS_ANY_TOKENS", "deja bread"))
            filters.append(["fieldName": "place", "comparator": "NEAR", "fieldValue": ["value": ["latitude": 48.85, "longitude": 2.35]], "distance": 3_000])
            filters.append(filter("recordName", "GREATER_THAN", "r25", system: true))
            filters.append(filter("recordName", "NOT_IN", ["r1", "r2", "r3"], system: true))
            filters.append(filter("createdUserRecordName", "EQUALS", .string(user.userRecordName!), system: true))

            // Each filter alone, then 60 random pairs.
            var queries: [[JSON]] = filters.map { [$0] }
            for _ in 0..<60 { queries.append([filters.randomElement(using: &generator)!, filters.randomElement(using: &generator)!]) }
            var disagreements: [String] = []
            var matched = 0
            for filterBy in queries {
                let queryJSON: JSON = ["recordType": "Item", "filterBy": .array(filterBy)]
                var served: Set<String> = []
                var marker: JSON?
                repeat {
                    var body: [String: JSON] = ["query": queryJSON, "resultsLimit": 200]
                    if let marker { body["continuationMarker"] = marker }
                    let page = try await user.post("private", "records/query", .object(body))
                    try #require(page.status == 200, "\(JSONWriter.string(queryJSON)): \(page.json)")
                    for record in page.json["records"]?.arrayValue ?? [] { served.insert(record["recordName"]?.stringValue ?? "") }
                    marker = page.json["continuationMarker"]
                } while marker != nil
                let query = try Query.parse(queryJSON, schema: schema)
                let decided = Set(records.filter(query.matches).map(\.recordName))
                matched += decided.count
                if decided != served {
                    disagreements.append("\(JSONWriter.string(.array(filterBy))): only in memory \(decided.subtracting(served).sorted().prefix(5)), only served \(served.subtracting(decided).sorted().prefix(5))")
                }
            }
            print("QueryMatchTests: \(queries.count) queries over \(records.count) records, \(matched) matches, \(disagreements.count) disagreements")
            #expect(disagreements.isEmpty, "\(disagreements.joined(separator: "\n"))")
            #expect(matched > 1_000, "the queries should match many records")
        }
    }
}
