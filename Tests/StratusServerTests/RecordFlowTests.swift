import Foundation
import StratusCore
@testable import StratusTestSupport
import Testing

/// The request sequence of a CloudKit JS app: text/plain bodies, ckAPIToken + ckWebAuthToken and
/// ckjs* query parameters, create → lookup → query with filter, sort and continuation → update with
/// change tags → delete, in the public and the private database.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct RecordFlowTests {
    @Test(arguments: ["public", "private"])
    func cloudKitJSFlow(database: String) async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            // create 7 notes
            var operations: [JSON] = []
            for index in 0..<7 {
                operations.append(op("create", "note-\(index)", fields: [
                    "title": ["value": .string("Note \(index)")],
                    "priority": ["value": .int(Int64(index % 3))],
                    "score": ["value": .double(Double(index) + 0.5), "type": "DOUBLE"],
                    "tags": ["value": ["home", .string("t\(index)")], "type": "STRING_LIST"],
                ]))
            }
            let created = try await session.modify(database, operations)
            #expect(created.status == 200)
            let tag0 = created.json.record(0)?["recordChangeTag"]?.stringValue
            #expect(tag0 != nil)
            #expect(created.json.record(6)?["fields"]?["score"] == ["type": "DOUBLE", "value": 6.5])

            // lookup, with a missing name in between
            let lookup = try await session.post(database, "records/lookup", ["records": [["recordName": "note-1"], ["recordName": "nope"], ["recordName": "note-2"]]])
            #expect(lookup.status == 200)
            #expect(lookup.json.record(0)?["fields"]?["title"]?["value"] == "Note 1")
            #expect(lookup.json.record(1)?.errorCode == "NOT_FOUND")
            #expect(lookup.json.record(1)?["uuid"]?.stringValue?.count == 36, "a per-record error carries an id: \(lookup.json)")
            #expect(lookup.json.record(1)?["recordName"] == "nope")
            #expect(lookup.json.record(2)?["recordName"] == "note-2")

            // query: priority >= 1, sorted by score descending, pages of 2 with continuation markers
            var names: [String] = []
            var marker: JSON?
            var pages = 0
            repeat {
                var body: [String: JSON] = [
                    "resultsLimit": 2,
                    "query": [
                        "recordType": "Note",
                        "filterBy": [["fieldName": "priority", "comparator": "GREATER_THAN_OR_EQUALS", "fieldValue": ["value": 1, "type": "INT64"]]],
                        "sortBy": [["fieldName": "score", "ascending": false]],
                    ],
                ]
                if let marker { body["continuationMarker"] = marker }
                let page = try await session.post(database, "records/query", .object(body))
                #expect(page.status == 200, "\(page.json)")
                names += page.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                marker = page.json["continuationMarker"]
                pages += 1
            } while marker != nil && pages < 10
            // priorities: 0,1,2,0,1,2,0 → indexes 1,2,4,5 ; by score desc → 5,4,2,1
            #expect(names == ["note-5", "note-4", "note-2", "note-1"])
            #expect(pages == 2)

            // range and sort on the same field (the sort key comes from the driving index entry), paged
            var ranged: [String] = []
            var rangeMarker: JSON?
            repeat {
                var body: [String: JSON] = ["resultsLimit": 2, "query": [
                    "recordType": "Note",
                    "filterBy": [["fieldName": "score", "comparator": "GREATER_THAN_OR_EQUALS", "fieldValue": ["value": 2.5]]],
                    "sortBy": [["fieldName": "score", "ascending": false]],
                ]]
                if let rangeMarker { body["continuationMarker"] = rangeMarker }
                let page = try await session.post(database, "records/query", .object(body))
                ranged += page.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                rangeMarker = page.json["continuationMarker"]
            } while rangeMarker != nil && ranged.count < 20
            #expect(ranged == ["note-6", "note-5", "note-4", "note-3", "note-2"])

            // LIST_CONTAINS, BEGINS_WITH, IN, NOT_EQUALS, system field filter
            func count(_ filter: JSON) async throws -> Int {
                let result = try await session.post(database, "records/query", ["query": ["recordType": "Note", "filterBy": [filter]]])
                #expect(result.status == 200, "\(result.json)")
                return result.json["records"]?.arrayValue?.count ?? -1
            }
            #expect(try await count(["fieldName": "tags", "comparator": "LIST_CONTAINS", "fieldValue": ["value": "t3"]]) == 1)
            #expect(try await count(["fieldName": "tags", "comparator": "LIST_CONTAINS", "fieldValue": ["value": "home"]]) == 7)
            #expect(try await count(["fieldName": "title", "comparator": "BEGINS_WITH", "fieldValue": ["value": "Note "]]) == 7)
            #expect(try await count(["fieldName": "priority", "comparator": "IN", "fieldValue": ["value": [0, 2], "type": "INT64_LIST"]]) == 5)
            #expect(try await count(["fieldName": "priority", "comparator": "NOT_IN", "fieldValue": ["value": [0, 2]]]) == 2)
            #expect(try await count(["fieldName": "priority", "comparator": "NOT_EQUALS", "fieldValue": ["value": 0]]) == 4)
            #expect(try await count(["fieldName": "score", "comparator": "LESS_THAN", "fieldValue": ["value": 2.0]]) == 2)
            #expect(try await count(["fieldName": "score", "comparator": "LESS_THAN_OR_EQUALS", "fieldValue": ["value": 2.5]]) == 3)
            #expect(try await count(["fieldName": "score", "comparator": "GREATER_THAN", "fieldValue": ["value": 5.5]]) == 1)
            #expect(try await count(["systemFieldName": "createdTimestamp", "comparator": "GREATER_THAN", "fieldValue": ["value": 0, "type": "TIMESTAMP"]]) == 7)
            #expect(try await count(["systemFieldName": "createdUserRecordName", "comparator": "EQUALS",
                                     "fieldValue": ["value": ["recordName": .string(session.userRecordName ?? "")], "type": "REFERENCE"]]) == 7)

            // update with the right tag, then a stale one
            let updated = try await session.modify(database, [op("update", "note-0", type: nil, tag: tag0, fields: ["title": ["value": "Renamed"]])])
            #expect(updated.json.record(0)?["fields"]?["title"]?["value"] == "Renamed")
            #expect(updated.json.record(0)?["fields"]?["priority"]?["value"] == 0, "update keeps unlisted fields")
            let newTag = updated.json.record(0)?["recordChangeTag"]?.stringValue
            #expect(newTag != tag0)
            // the update replaced the record's index entries: the old title no longer matches, the new one does
            func titled(_ title: String) async throws -> [String] {
                let found = try await session.post(database, "records/query", ["query": ["recordType": "Note", "filterBy": [
                    ["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": .string(title)]]]]])
                return (found.json["records"]?.arrayValue ?? []).compactMap { $0["recordName"]?.stringValue }
            }
            #expect(try await titled("Note 0") == [])
            #expect(try await titled("Renamed") == ["note-0"])
            #expect(try await titled("Note 1") == ["note-1"], "other records keep their entries")
            let stale = try await session.modify(database, [op("update", "note-0", type: nil, tag: tag0, fields: ["title": ["value": "Lost"]])])
            #expect(stale.status == 200)
            #expect(stale.json.record(0)?.errorCode == "CONFLICT")
            #expect(stale.json.record(0)?["serverRecord"]?["recordChangeTag"]?.stringValue == newTag)

            // replace drops unlisted fields
            let replaced = try await session.modify(database, [op("replace", "note-0", type: nil, tag: newTag, fields: ["title": ["value": "Only"]])])
            #expect(replaced.json.record(0)?["fields"]?.objectValue?.keys.sorted() == ["title"])

            // delete with tag, then it is gone
            let replacedTag = replaced.json.record(0)?["recordChangeTag"]?.stringValue
            let deleted = try await session.modify(database, [op("delete", "note-0", type: nil, tag: replacedTag)])
            #expect(deleted.json.record(0)?["deleted"] == true)
            let gone = try await session.post(database, "records/lookup", ["records": [["recordName": "note-0"]]])
            #expect(gone.json.record(0)?.errorCode == "NOT_FOUND")
            #expect(try await titled("Only") == [], "a deleted record leaves no index entries behind")
            // create over the tombstone works again; create of a live record is EXISTS
            let again = try await session.modify(database, [op("create", "note-0"), op("create", "note-1")])
            #expect(again.json.record(0)?["recordName"] == "note-0")
            #expect(again.json.record(1)?.errorCode == "EXISTS")
        }
    }

    @Test func forceOperationsAndDesiredKeys() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let upsert = try await session.modify("private", [op("forceUpdate", "a", fields: ["x": ["value": 1], "y": ["value": "keep"]])])
            #expect(upsert.json.record(0)?["recordChangeTag"] != nil)
            let merged = try await session.modify("private", [op("forceUpdate", "a", type: nil, fields: ["x": ["value": 2]])])
            #expect(merged.json.record(0)?["fields"]?["y"]?["value"] == "keep")
            let replaced = try await session.modify("private", [op("forceReplace", "a", type: nil, fields: ["x": ["value": 3]])])
            #expect(replaced.json.record(0)?["fields"]?["y"] == nil)
            let forceDeleteMissing = try await session.modify("private", [op("forceDelete", "never-existed", type: nil)])
            #expect(forceDeleteMissing.json.record(0)?["deleted"] == true)
            let updateMissing = try await session.modify("private", [op("update", "ghost", type: nil, tag: "1")])
            #expect(updateMissing.json.record(0)?.errorCode == "NOT_FOUND")

            let desired = try await session.post("private", "records/lookup", ["records": [["recordName": "a"]], "desiredKeys": ["nothing"], "numbersAsStrings": true])
            #expect(desired.json.record(0)?["fields"] == [:])
            let numbers = try await session.post("private", "records/lookup", ["records": [["recordName": "a"]], "numbersAsStrings": true])
            #expect(numbers.json.record(0)?["fields"]?["x"]?["value"] == "3")
        }
    }

    /// Change-feed pages write records straight from their stored columns (`wireRecord`); the
    /// other read paths go through `Record`. Both must send the same dictionary.
    @Test func changeFeedRecordsAreTheRecordsLookupsSend() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let fields: [String: JSON] = ["s": ["value": "héllo \"q\" \\ \n✓\u{1}"], "n": ["value": 42], "l": ["value": ["a", "b"]]]
            _ = try await session.modify("private", [op("create", "kept", fields: fields), op("create", "gone", fields: ["n": ["value": 1]])])
            _ = try await session.modify("private", [op("forceDelete", "gone", type: nil)])
            let lookup = try await session.post("private", "records/lookup", ["records": [["recordName": "kept"]]])
            let kept = try #require(lookup.json.record(0))
            #expect(kept["fields"]?["s"]?["value"] == "héllo \"q\" \\ \n✓\u{1}")

            let feed = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "_defaultZone"]]]])
            let records = try #require(feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue)
            #expect(records.count == 2)
            #expect(records.first { $0["recordName"] == "kept" } == kept)
            let tombstone = try #require(records.first { $0["recordName"] == "gone" })
            #expect(tombstone["deleted"] == true)
            let tombstoneKeys = Set(tombstone.objectValue.map { Array($0.keys) } ?? [])
            #expect(tombstoneKeys.isSubset(of: ["recordName", "recordType", "deleted"]), "\(tombstone)")

            // Fields left out or restyled take the general path, and still match lookups.
            let options: [String: JSON] = ["desiredKeys": ["n"], "numbersAsStrings": true]
            var zone: [String: JSON] = ["zoneID": ["zoneName": "_defaultZone"]]
            for (key, value) in options { zone[key] = value }
            let styled = try await session.post("private", "changes/zone", ["zones": [.object(zone)]])
            var lookupBody: [String: JSON] = ["records": [["recordName": "kept"]]]
            for (key, value) in options { lookupBody[key] = value }
            let styledLookup = try await session.post("private", "records/lookup", .object(lookupBody))
            let styledKept = try #require(styled.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.first { $0["recordName"] == "kept" })
            #expect(styledKept["fields"] == ["n": ["value": "42", "type": "INT64"]])
            #expect(styledKept == styledLookup.json.record(0))
        }
    }

    @Test func everyFieldTypeRoundTrips() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let fields: [String: JSON] = [
                "s": ["value": "héllo \"quoted\" \n✓", "type": "STRING"],
                "i": ["value": .int(Int64.max), "type": "INT64"],
                "neg": ["value": .int(Int64.min), "type": "INT64"],
                "d": ["value": 0.1, "type": "DOUBLE"],
                "whole": ["value": 2.0, "type": "DOUBLE"],
                "t": ["value": 1735689600123, "type": "TIMESTAMP"],
                "b": ["value": "AAEC/w==", "type": "BYTES"],
                "r": ["value": ["recordName": "target", "action": "NONE"], "type": "REFERENCE"],
                "l": ["value": ["latitude": 52.5, "longitude": 13.4, "altitude": 34.0], "type": "LOCATION"],
                "sl": ["value": ["a", "b"], "type": "STRING_LIST"],
                "il": ["value": [1, -2], "type": "INT64_LIST"],
                "dl": ["value": [1.5, 2.25], "type": "DOUBLE_LIST"],
                "tl": ["value": [1, 2], "type": "TIMESTAMP_LIST"],
                "bl": ["value": ["AA=="], "type": "BYTES_LIST"],
                "rl": ["value": [["recordName": "x", "action": "NONE"]], "type": "REFERENCE_LIST"],
                "ll": ["value": [["latitude": 1.0, "longitude": 2.0]], "type": "LOCATION_LIST"],
                "empty": ["value": [], "type": "STRING_LIST"],
            ]
            let saved = try await session.modify("private", [op("create", "all", type: "Everything", fields: fields)])
            #expect(saved.status == 200)
            let lookup = try await session.post("private", "records/lookup", ["records": [["recordName": "all"]]])
            let back = lookup.json.record(0)?["fields"]?.objectValue ?? [:]
            for (name, value) in fields {
                #expect(back[name] == value, "field \(name): sent \(value), got \(String(describing: back[name]))")
            }
            // a value of another type than the known field type is BAD_REQUEST naming the field
            let wrong = try await session.modify("private", [op("create", "w", type: "Everything", fields: ["i": ["value": "text"]])])
            #expect(wrong.json.record(0)?.errorCode == "BAD_REQUEST")
            #expect(wrong.json.record(0)?["reason"]?.stringValue?.contains("'i'") == true)
            let declared = try await session.modify("private", [op("create", "w2", type: "Everything", fields: ["s": ["value": 5, "type": "INT64"]])])
            #expect(declared.json.record(0)?.errorCode == "BAD_REQUEST")
        }
    }
}
