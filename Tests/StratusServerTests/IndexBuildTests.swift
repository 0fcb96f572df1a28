import StratusCore
@testable import StratusTestSupport
import Testing

/// A production index build, run in small batches, walks every production zone: the public
/// zone, users' private default zones and a custom one, zones with none of the type's records,
/// and zones larger than a batch (so batches end and resume inside a zone), with records of
/// another type between. Every record of the type is then found through the new index.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct IndexBuildTests {
    @Test func aBuildInSmallBatchesReachesEveryRecordOfEveryZone() async throws {
        try await Harness.run { harness in
            let grants = "GRANT READ, CREATE, WRITE TO \"_icloud\""
            let plain = "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING, \(grants));\n  RECORD TYPE Other (title STRING, \(grants));\n"
            let first = try await harness.production(plain, prefix: "Build")
            let second = try await first.signedUp()
            let third = try await first.signedUp()
            // Names in no particular order, so that a zone's name order is not its creation order.
            func notes(_ prefix: String, _ count: Int) -> [JSON] {
                (0..<count).map { index in
                    op("create", "\(prefix)-\((index * 7) % count)-\(index % 3 == 0 ? "Z" : "a")", type: "Note", fields: ["title": ["value": "same"]])
                }
            }
            func others(_ count: Int) -> [JSON] {
                (0..<count).map { op("create", "o-\($0)", type: "Other", fields: ["title": ["value": "same"]]) }
            }
            var expected: [String: Set<String>] = [:]
            for (label, session, zone, records) in [
                ("first", first, nil as String?, notes("f", 11) + others(4)),
                ("second", second, nil, others(6)),
                ("third", third, nil, notes("t", 3)),
                ("third/Work", third, "Work", notes("w", 9) + others(2)),
            ] {
                if let zone {
                    let created = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(zone)]]]]])
                    #expect(created.status == 200, "\(created.json)")
                }
                let written = try await session.modify("private", zone: zone, records)
                #expect(written.status == 200 && written.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(written.json)")
                expected[label] = Set(records.compactMap { $0["record"]?["recordType"] == "Note" ? $0["record"]?["recordName"]?.stringValue : nil })
            }
            let publicNotes = notes("p", 5)
            let written = try await first.modify("public", publicNotes)
            #expect(written.status == 200, "\(written.json)")
            expected["public"] = Set(publicNotes.compactMap { $0["record"]?["recordName"]?.stringValue })
            let total = expected.values.map(\.count).reduce(0, +)
            #expect(total == 28)

            try await harness.deploy(plain.replacingOccurrences(of: "Note (title STRING", with: "Note (title STRING QUERYABLE"), to: first.container)
            var calls = 0
            var last: JSON = .null
            while calls < 40 {
                calls += 1
                last = try await harness.admin(.post, "containers/\(first.container)/schema/indexes/build", json: ["batch": 4]).json
                if last["done"] == true { break }
            }
            let build = last["builds"]?.arrayValue?.first { $0["recordType"] == "Note" }
            #expect(last["done"] == true, "not done after \(calls) calls: \(last)")
            #expect(build?["built"]?.intValue == Int64(total) && build?["total"]?.intValue == Int64(total), "\(last)")
            // Batches of 4 over 28 records: 7 full ones, then one that finds none left.
            #expect(calls == 8, "\(calls) calls")

            let query: [String: JSON] = ["query": ["recordType": "Note", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "same"]]]],
                                         "resultsLimit": 100]
            for (label, session, zone, database) in [("first", first, nil as String?, "private"), ("second", second, nil, "private"),
                                                      ("third", third, nil, "private"), ("third/Work", third, "Work", "private"),
                                                      ("public", first, nil, "public")] {
                var body = query
                if let zone { body["zoneID"] = ["zoneName": .string(zone)] }
                let found = try await session.post(database, "records/query", .object(body))
                let names = Set(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? [])
                #expect(found.status == 200 && names == expected[label], "\(label): \(found.json)")
            }
        }
    }

    /// A value stored while its field was not indexed can be too large to index (about 2,700
    /// bytes after compression). The build then stops with BAD_REQUEST naming the type, the field
    /// and the records' name range, and goes on once the value is shortened.
    @Test func aValueTooLargeToIndexStopsTheBuildWithAReasonUntilItIsShortened() async throws {
        try await Harness.run { harness in
            let plain = "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING, GRANT READ, CREATE, WRITE TO \"_icloud\");\n"
            let session = try await harness.production(plain, prefix: "Large")
            let noise = String((0..<12_000).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! })
            let written = try await session.modify("public", [op("create", "big", type: "Note", fields: ["title": ["value": .string(noise)]]),
                                                             op("create", "small", type: "Note", fields: ["title": ["value": "short"]])])
            #expect(written.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(written.json)")
            try await harness.deploy(plain.replacingOccurrences(of: "title STRING", with: "title STRING QUERYABLE"), to: session.container)
            let path = "containers/\(session.container)/schema/indexes/build"
            for _ in 0..<2 {
                let stuck = try await harness.admin(.post, path, json: ["batch": 10])
                let reason = stuck.json["reason"]?.stringValue ?? ""
                #expect(stuck.status == 400 && stuck.json.errorCode == "BAD_REQUEST", "\(stuck.json)")
                #expect(reason.contains("Note") && reason.contains("title") && reason.contains("too large to index") && reason.contains("big"), "\(reason)")
            }
            let shortened = try await session.modify("public", [op("forceUpdate", "big", type: "Note", fields: ["title": ["value": "short"]])])
            #expect(shortened.json.record(0)?.errorCode == nil, "\(shortened.json)")
            let built = try await harness.admin(.post, path, json: ["batch": 10])
            #expect(built.status == 200 && built.json["done"] == true, "\(built.json)")
            let found = try await session.post("public", "records/query", ["query": ["recordType": "Note",
                "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "short"]]]]])
            #expect(Set(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []) == ["big", "small"], "\(found.json)")
        }
    }
}
