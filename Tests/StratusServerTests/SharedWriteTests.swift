import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Synchronization
import Testing

/// Concurrent single-record creates in zones written before share one statement
/// (`SharedWrite`, `Prepared.CreateRecords`): records of several users, zones and containers in
/// one transaction. Each request must still be answered as if alone: its record in its own zone,
/// with its own index entries, its zone's change position moved, its container's and owner's
/// usage counted; a name that exists, a second create of one name, a deleted zone, a quota
/// reached and a value too large to index each answered as without sharing, and the others written.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SharedWriteTests {
    struct Case: Sendable {
        var tag: String
        var session: Session
        var zone: String
        var name: String
    }

    @Test func concurrentCreatesShareAStatementAndEachIsAnsweredAsAlone() async throws {
        try await Harness.run(poolSize: 1) { harness in
            let first = try await harness.container()
            let alice = try await first.signedUp(), bob = try await first.signedUp()
            let carol = try await harness.container().signedUp()
            let dave = try await harness.container().signedUp()
            let users = [("alice", alice), ("bob", bob), ("carol", carol), ("dave", dave)]
            for (tag, session) in users {
                for zone in ["Z", "Gone"] {
                    let made = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": .string(zone)]]]]])
                    #expect(made.status == 200, "\(made.json)")
                    // The first create reads the zone and remembers it, and adds the fields to the
                    // schema: the next ones may share.
                    let written = try await session.modify("private", zone: zone, [op("create", "\(tag)-\(zone)-first", fields: [
                        "title": ["value": "first"], "rank": ["value": 0],
                    ])])
                    #expect(written.json.record(0)?["recordChangeTag"] != nil, "\(written.json)")
                }
            }
            // Alice's zone "Gone" is deleted, still remembered; Dave's container is at its record quota.
            #expect(try await alice.post("private", "zones/modify", ["operations": [["operationType": "delete", "zone": ["zoneID": ["zoneName": "Gone"]]]]]).status == 200)
            #expect(try await harness.admin(.patch, "containers/\(dave.container)/quota", json: ["environment": "development", "maxRecords": 2]).status == 200)

            var cases: [Case] = []
            for (tag, session) in users.prefix(3) {
                for index in 0..<3 { cases.append(Case(tag: tag, session: session, zone: "Z", name: "\(tag)-\(index)")) }
            }
            cases.append(Case(tag: "alice", session: alice, zone: "Z", name: "twice"))
            cases.append(Case(tag: "alice", session: alice, zone: "Z", name: "twice"))
            cases.append(Case(tag: "alice", session: alice, zone: "Z", name: "alice-Z-first"))
            cases.append(Case(tag: "alice", session: alice, zone: "Gone", name: "alice-gone"))
            let send: @Sendable (Case) async throws -> (status: Int, json: JSON) = { item in
                try await item.session.modify("private", zone: item.zone, [op("create", item.name, fields: [
                    "title": ["value": .string("\(item.tag)-title")], "rank": ["value": .int(Int64(item.name.utf8.count))],
                ])])
            }
            // Each database's feed position before: the creates must move their zone past it.
            var tokens: [String: String] = [:]
            for (tag, session) in users.prefix(3) {
                tokens[tag] = try await session.post("private", "changes/database", [:]).json["syncToken"]?.stringValue
            }
            let creates = harness.app.records.creates
            let before = creates.statistics
            let answers = try await StatementSharingTests.sendAllAtOnce(cases, holding: harness.database, sharing: creates, send: send)
            let after = creates.statistics
            #expect(after.requests - before.requests == cases.count, "\(before) → \(after)")
            // Unshared, one statement each; the ones that decide alone go to the transaction.
            #expect(after.statements - before.statements <= 2 * creates.maximumStatements, "the waiting statements, then one for all the queued: \(after)")

            var twice: [String] = []
            for (item, (status, json)) in zip(cases, answers) {
                #expect(status == (item.name == "alice-gone" ? 404 : 200), "\(item.name): \(json)")
                let record = json.record(0)
                switch item.name {
                case "twice":
                    twice.append(record?.errorCode ?? "saved")
                case "alice-Z-first":
                    #expect(record?.errorCode == "EXISTS", "\(json)")
                case "alice-gone":
                    #expect((json.errorCode ?? record?.errorCode) == "ZONE_NOT_FOUND", "\(json)")
                default:
                    #expect(record?["recordName"]?.stringValue == item.name && record?["recordChangeTag"] != nil, "\(item.name): \(json)")
                    #expect(record?["fields"]?["title"]?["value"]?.stringValue == "\(item.tag)-title", "\(item.name): \(json)")
                }
            }
            #expect(twice.sorted() == ["EXISTS", "saved"], "\(twice)")
            // Written together: one transaction for all but the first statement's.
            let written = cases.map(\.name).filter { !["alice-Z-first", "alice-gone"].contains($0) }
            let transactions = try await harness.database.withConnection { connection in
                try await connection.statement("SELECT count(DISTINCT change_xid) FROM records WHERE record_name = ANY(\(written))",
                                               logger: TestCluster.logger)[0].decode(Int64.self)
            }
            #expect(transactions <= creates.maximumStatements + 1, "\(transactions) transactions for \(written.count) creates")

            // Past a quota the whole statement rolls back, and each create decides alone. (Dave's
            // first create since his quota changed reads the new limits.)
            #expect(try await send(Case(tag: "dave", session: dave, zone: "Z", name: "dave-over")).json.record(0)?.errorCode == "QUOTA_EXCEEDED")
            let overQuota = [Case(tag: "dave", session: dave, zone: "Z", name: "dave-over"), Case(tag: "bob", session: bob, zone: "Z", name: "bob-3"),
                             Case(tag: "carol", session: carol, zone: "Z", name: "carol-3"), Case(tag: "dave", session: dave, zone: "Z", name: "dave-over-2")]
            let refused = try await StatementSharingTests.sendAllAtOnce(overQuota, holding: harness.database, sharing: creates, send: send)
            for (item, (status, json)) in zip(overQuota, refused) {
                #expect(status == 200, "\(item.name): \(json)")
                if item.tag == "dave" {
                    #expect(json.record(0)?.errorCode == "QUOTA_EXCEEDED", "\(item.name): \(json)")
                } else {
                    #expect(json.record(0)?["recordChangeTag"] != nil, "\(item.name): \(json)")
                }
            }

            // Each user's records are in their own zone, found by their own index entries, and
            // listed by the zone's change feed; nobody else's are.
            for (tag, session) in users.prefix(3) {
                var expected = (0..<(tag == "alice" ? 3 : 4)).map { "\(tag)-\($0)" }
                if tag == "alice" { expected.append("twice") }
                let found = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                    ["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": .string("\(tag)-title")]]]]])
                #expect(Set(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []) == Set(expected), "\(tag): \(found.json)")
                let ranked = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                    ["fieldName": "rank", "comparator": "EQUALS", "fieldValue": ["value": .int(Int64("\(tag)-0".utf8.count))]]]]])
                #expect(Set(ranked.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []) == Set(expected.filter { $0 != "twice" }),
                        "\(tag): \(ranked.json)")
                let feed = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Z"]]]])
                let changed = feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                #expect(Set(changed) == Set(expected + ["\(tag)-Z-first"]), "\(tag): \(feed.json)")
                // The zone's own change position moved: the database feed lists it (only it) since.
                let token = try #require(tokens[tag])
                let zones = try await session.post("private", "changes/database", ["syncToken": .string(token)])
                #expect(zones.json["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } == ["Z"], "\(tag): \(zones.json)")
            }
            // A value too large to index (about 2,700 bytes after compression) fails the whole
            // statement: each create decides alone, that one is refused and the others land.
            let noise = String((0..<12_000).map { _ in "abcdefghijklmnopqrstuvwxyz0123456789".randomElement()! })
            let tooLarge: [(Session, String, String)] = [(bob, "bob-large", noise), (bob, "bob-4", "fine"), (carol, "carol-4", "fine")]
            let large = try await StatementSharingTests.sendAllAtOnce(tooLarge, holding: harness.database, sharing: creates) { item in
                try await item.0.modify("private", zone: "Z", [op("create", item.1, fields: ["title": ["value": .string(item.2)]])])
            }
            #expect(large[0].0 == 400 && large[0].1.errorCode == "BAD_REQUEST"
                    && large[0].1["reason"]?.stringValue?.contains("too large to index") == true, "\(large[0].1)")
            for (status, json) in large.dropFirst() {
                #expect(status == 200 && json.record(0)?["recordChangeTag"] != nil, "\(json)")
            }

            // Nothing landed in the deleted zone, nor past Dave's quota. (The harness checks the
            // usage counters against the records stored when the test ends.)
            let strays = try await harness.database.withConnection { connection in
                try await connection.statement("SELECT count(*) FROM records WHERE record_name IN ('alice-gone', 'dave-over', 'dave-over-2', 'bob-large')",
                                               logger: TestCluster.logger)[0].decode(Int64.self)
            }
            #expect(strays == 0)
        }
    }

    /// Concurrent single-record updates of records just read share statements
    /// (`Prepared.UpdateRecords`): each is answered as if alone, with its own record, index
    /// entries, feed position and usage; a stale change tag, and a second update of one record
    /// racing the first, are each a CONFLICT, and the others are written.
    @Test func concurrentUpdatesShareAStatementAndEachIsAnsweredAsAlone() async throws {
        try await Harness.run(poolSize: 1) { harness in
            let first = try await harness.container()
            let alice = try await first.signedUp(), bob = try await first.signedUp()
            let carol = try await harness.container().signedUp()
            let users = [("alice", alice), ("bob", bob), ("carol", carol)]
            var tags: [String: String] = [:]
            for (tag, session) in users {
                #expect(try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]]).status == 200)
                for index in 0..<3 {
                    let name = "\(tag)-\(index)"
                    let made = try await session.modify("private", zone: "Z", [op("create", name, fields: [
                        "title": ["value": "old"], "rank": ["value": 0], "notes": ["value": .string(String(repeating: "n", count: 100 * index))],
                    ])])
                    tags[name] = try #require(made.json.record(0)?["recordChangeTag"]?.stringValue, "\(made.json)")
                }
            }
            // Bob's bob-0 changes once more: the tag read above is stale.
            let stale = try #require(tags["bob-0"])
            let moved = try await bob.modify("private", zone: "Z", [op("update", "bob-0", tag: stale, fields: ["title": ["value": "old"], "rank": ["value": 0]])])
            tags["bob-0"] = try #require(moved.json.record(0)?["recordChangeTag"]?.stringValue, "\(moved.json)")
            var tokens: [String: String] = [:]
            for (tag, session) in users {
                tokens[tag] = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Z"]]]]).json["zones"]?.arrayValue?.first?["syncToken"]?.stringValue
            }

            struct Case: Sendable {
                var session: Session
                var name: String
                var tag: String
                var title: String
            }
            var cases: [Case] = []
            for (tag, session) in users {
                for index in 0..<3 {
                    let name = "\(tag)-\(index)"
                    // Sizes change both ways: the usage counters take the difference.
                    cases.append(Case(session: session, name: name, tag: tags[name]!, title: "\(tag)-new-" + String(repeating: "x", count: 150 * (2 - index))))
                }
            }
            cases.append(Case(session: alice, name: "alice-0", tag: tags["alice-0"]!, title: "alice-racing"))
            cases.append(Case(session: bob, name: "bob-0", tag: stale, title: "bob-stale"))

            // Each update, read and planned, waits at the hook until all have come; then the test
            // holds the pool's only connection and lets them go: the first update's statement waits
            // for it and the others queue behind, to go in the next statement together.
            let updates = harness.app.records.updates
            let before = updates.statistics
            let sharing = cases.count - 1  // the stale one is refused by its read
            let gate = HookGate()
            harness.app.records.testHooks.beforeOptimisticWrite = { _ in await gate.pass() }
            defer { harness.app.records.testHooks.beforeOptimisticWrite = nil }
            let (held, holding) = AsyncStream.makeStream(of: Void.self)
            let (release, releasing) = AsyncStream.makeStream(of: Void.self)
            let answers = try await withThrowingTaskGroup(of: (Int, Int, JSON).self) { group in
                for (index, item) in cases.enumerated() {
                    group.addTask {
                        let answer = try await item.session.modify("private", zone: "Z", [op("update", item.name, tag: item.tag, fields: [
                            "title": ["value": .string(item.title)], "rank": ["value": .int(Int64(item.title.utf8.count))],
                        ])])
                        return (index, answer.status, answer.json)
                    }
                }
                try await gate.waitUntilArrived(sharing, within: .seconds(60))
                group.addTask {
                    try await harness.database.withConnection { _ in
                        holding.yield()
                        for await _ in release { break }
                    }
                    return (-1, 0, .null)
                }
                for await _ in held { break }
                await gate.open()
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline, updates.statistics.serving + updates.statistics.queued < sharing {
                    try await Task.sleep(for: .milliseconds(5))
                }
                let waiting = updates.statistics
                #expect(waiting.serving + waiting.queued == sharing, "\(waiting)")
                releasing.yield()
                var answers = [(Int, JSON)](repeating: (0, .null), count: cases.count)
                for try await (index, status, json) in group where index >= 0 { answers[index] = (status, json) }
                return answers
            }
            let after = updates.statistics
            #expect(after.requests - before.requests == sharing, "\(before) → \(after)")

            var racing: [String] = []
            for (item, (status, json)) in zip(cases, answers) {
                #expect(status == 200, "\(item.name): \(json)")
                let record = json.record(0)
                if item.name == "alice-0" {
                    racing.append(record?.errorCode ?? (record?["fields"]?["title"]?["value"]?.stringValue ?? "?"))
                } else if item.title == "bob-stale" {
                    #expect(record?.errorCode == "CONFLICT", "\(json)")
                } else {
                    #expect(record?["fields"]?["title"]?["value"]?.stringValue == item.title && record?["recordChangeTag"] != nil, "\(item.name): \(json)")
                }
            }
            #expect(racing.sorted() == ["CONFLICT", racing.first { $0 != "CONFLICT" } ?? "none"].sorted() && racing.contains("CONFLICT"), "\(racing)")
            // Shared: the written updates came from at most one transaction per waiting statement, plus one.
            let names = cases.filter { $0.title != "bob-stale" && $0.title != "alice-racing" }.map(\.name)
            let transactions = try await harness.database.withConnection { connection in
                try await connection.statement("SELECT count(DISTINCT change_xid) FROM records WHERE record_name = ANY(\(names))",
                                               logger: TestCluster.logger)[0].decode(Int64.self)
            }
            #expect(transactions <= updates.maximumStatements + 1, "\(transactions) transactions for \(names.count) updates")

            for (tag, session) in users {
                let expected = Set((0..<3).map { "\(tag)-\($0)" })
                // Found by their new index entries, not by the old ones.
                let old = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                    ["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "old"]]]]])
                #expect(old.json["records"]?.arrayValue?.isEmpty == true, "\(tag): \(old.json)")
                let ranked = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                    ["fieldName": "rank", "comparator": "GREATER_THAN", "fieldValue": ["value": 0]]]]])
                let found = ranked.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                #expect(Set(found) == expected && found.count == 3, "\(tag): \(ranked.json)")
                // The zone feed since the token before lists each updated record once.
                let token = try #require(tokens[tag])
                let feed = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Z"], "syncToken": .string(token)]]])
                let changed = feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                #expect(Set(changed) == expected && changed.count == 3, "\(tag): \(feed.json)")
            }
            // (The harness checks the usage counters against the records stored when the test ends.)
        }
    }

    /// Saves that name every field their record keeps go to `ReplaceRecords` unread, sharing one
    /// statement; each is answered as if alone. Those the stored record turns out not to fit (a
    /// field left unnamed, a stale tag, another type) are written nothing there and decided after
    /// reading the record, as before: merged, CONFLICT, BAD_REQUEST.
    @Test func savesNamingEveryFieldAreWrittenUnreadInOneStatement() async throws {
        try await Harness.run(poolSize: 1) { harness in
            let session = try await harness.container().signedUp()
            #expect(try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]]).status == 200)
            func fields(_ title: String, rank: Int64, notes: String?) -> [String: JSON] {
                var fields: [String: JSON] = ["title": ["value": .string(title)], "rank": ["value": .int(rank)]]
                if let notes { fields["notes"] = ["value": .string(notes)] }
                return fields
            }
            var made: [String: JSON] = [:]
            // "same" keeps its title: that index entry stays the row it was, only rank's is replaced.
            let same = "same-\(UInt32.random(in: 0...UInt32.max))"
            for name in ["force", "tagged", "replaced", "removed", "partial", "stale", "retyped", same] {
                let answer = try await session.modify("private", zone: "Z", [op("create", name, fields: fields("old", rank: 0, notes: String(repeating: "n", count: 300)))])
                made[name] = try #require(answer.json.record(0), "\(answer.json)")
            }
            // The type "retyped" is saved as, known to the schema: a save adding to it is not written unread.
            #expect(try await session.modify("private", zone: "Z", [op("create", "other", type: "Other", fields: fields("other", rank: 0, notes: "x"))]).status == 200)
            func tag(_ name: String) -> String? { made[name]?["recordChangeTag"]?.stringValue }
            // A save read first makes the zone's id known; and "stale" changes once more.
            let moved = try await session.modify("private", zone: "Z", [op("update", "stale", tag: tag("stale"), fields: ["rank": ["value": 1]])])
            #expect(moved.json.record(0)?["fields"]?["notes"] != nil, "\(moved.json)")
            let token = try #require(try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Z"]]]])
                .json["zones"]?.arrayValue?.first?["syncToken"]?.stringValue)

            let operations: [(String, JSON)] = [
                ("force", op("forceUpdate", "force", fields: fields("force-new", rank: 11, notes: "shorter"))),
                ("tagged", op("update", "tagged", tag: tag("tagged"), fields: fields("tagged-new", rank: 12, notes: String(repeating: "m", count: 900)))),
                ("replaced", op("replace", "replaced", tag: tag("replaced"), fields: fields("replaced-new", rank: 13, notes: nil))),
                ("removed", op("forceUpdate", "removed", fields: fields("removed-new", rank: 14, notes: nil).merging(["notes": ["value": .null]]) { a, _ in a })),
                ("partial", op("forceUpdate", "partial", fields: ["title": ["value": "partial-new"], "rank": ["value": 15]])),
                ("stale", op("update", "stale", tag: tag("stale"), fields: fields("stale-new", rank: 16, notes: "x"))),
                ("retyped", op("forceUpdate", "retyped", type: "Other", fields: fields("retyped-new", rank: 17, notes: "x"))),
                (same, op("forceUpdate", same, fields: fields("old", rank: 18, notes: String(repeating: "n", count: 300)))),
            ]
            func entries() async throws -> [String: (row: String, value: String)] {
                try await harness.database.withConnection { connection in
                    var found: [String: (String, String)] = [:]
                    for try await row in try await connection.query("""
                        SELECT field, xmin::text || '/' || ctid::text, coalesce(v_text, v_int::text) FROM index_entries WHERE record_name = \(same)
                        """, logger: TestCluster.logger) {
                        let (field, version, value) = try row.decode((String, String, String).self)
                        found[field] = (version, value)
                    }
                    return found
                }
            }
            let entriesBefore = try await entries()
            // Each save, planned, waits at the hook until all have come; then the test holds the
            // pool's only connection and lets them go, to queue for one statement together.
            let replaces = harness.app.records.replaces
            let before = replaces.statistics
            let gate = HookGate()
            harness.app.records.testHooks.beforeUnreadWrite = { _ in await gate.pass() }
            defer { harness.app.records.testHooks.beforeUnreadWrite = nil }
            let (held, holding) = AsyncStream.makeStream(of: Void.self)
            let (release, releasing) = AsyncStream.makeStream(of: Void.self)
            let answers = try await withThrowingTaskGroup(of: (String, JSON).self) { group -> [String: JSON] in
                for (name, operation) in operations {
                    group.addTask { (name, try await session.modify("private", zone: "Z", [operation]).json.record(0) ?? .null) }
                }
                // (Bounded: a save that does not come this way fails the test rather than hanging it.)
                try await gate.waitUntilArrived(operations.count, within: .seconds(60))
                group.addTask {
                    try await harness.database.withConnection { _ in
                        holding.yield()
                        for await _ in release { break }
                    }
                    return ("", .null)
                }
                for await _ in held { break }
                await gate.open()
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline, replaces.statistics.serving + replaces.statistics.queued < operations.count {
                    try await Task.sleep(for: .milliseconds(5))
                }
                #expect(replaces.statistics.serving + replaces.statistics.queued == operations.count, "\(replaces.statistics)")
                releasing.yield()
                var answers: [String: JSON] = [:]
                for try await (name, record) in group where !name.isEmpty { answers[name] = record }
                return answers
            }
            let after = replaces.statistics
            #expect(after.requests - before.requests == operations.count, "\(before) → \(after)")
            #expect(after.statements - before.statements <= replaces.maximumStatements + 1, "\(before) → \(after)")

            func field(_ record: JSON?, _ name: String) -> JSON? { record?["fields"]?[name]?["value"] }
            for name in ["force", "tagged", "replaced", "removed"] {
                let record = answers[name]
                #expect(field(record, "title")?.stringValue == "\(name)-new" && record?["recordChangeTag"]?.stringValue != tag(name), "\(name): \(record ?? .null)")
                // What the stored record kept: when and by whom it was created.
                #expect(record?["created"] == made[name]?["created"] && record?["created"] != nil, "\(name): \(record ?? .null)")
            }
            #expect(field(answers["force"], "notes")?.stringValue == "shorter")
            #expect(field(answers["replaced"], "notes") == nil && field(answers["removed"], "notes") == nil)
            // Not naming notes: merged with the stored record after reading it.
            #expect(field(answers["partial"], "notes")?.stringValue == String(repeating: "n", count: 300), "\(answers["partial"] ?? .null)")
            #expect(answers["stale"]?.errorCode == "CONFLICT", "\(answers["stale"] ?? .null)")
            #expect(answers["retyped"]?.errorCode == "BAD_REQUEST", "\(answers["retyped"] ?? .null)")
            // A tag no change can have ("-1": the statement's "no tag to check") is a CONFLICT that writes nothing.
            let forged = try await session.modify("private", zone: "Z", [op("update", "stale", tag: "-1", fields: fields("forged", rank: 19, notes: "x"))])
            #expect(forged.json.record(0)?.errorCode == "CONFLICT", "\(forged.json)")

            // As stored: looked up, found by the new index entries and not by the old, each listed once by the feed.
            let written = ["force", "tagged", "replaced", "removed", "partial"]
            let lookup = try await session.post("private", "records/lookup", ["zoneID": ["zoneName": "Z"], "records": .array(written.map { ["recordName": .string($0)] })])
            for (index, name) in written.enumerated() {
                let record = lookup.json["records"]?.arrayValue?[index]
                #expect(field(record, "title")?.stringValue == "\(name)-new" && field(record, "notes") == field(answers[name], "notes"), "\(name): \(lookup.json)")
            }
            let old = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                ["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "old"]]]]])
            #expect(Set(old.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []) == ["stale", "retyped", same], "\(old.json)")
            let entriesAfter = try await entries()
            // (The schema made just in time indexes every field, and the words of text fields.)
            #expect(Set(entriesAfter.keys) == Set(entriesBefore.keys) && entriesAfter["title"]?.value == "old" && entriesAfter["rank"]?.value == "18",
                    "\(entriesAfter)")
            for (field, entry) in entriesAfter {
                #expect((entry.row == entriesBefore[field]?.row) == (field != "rank"), "\(field): before \(entriesBefore), after \(entriesAfter)")
            }
            let ranked = try await session.post("private", "records/query", ["zoneID": ["zoneName": "Z"], "query": ["recordType": "Note", "filterBy": [
                ["fieldName": "rank", "comparator": "GREATER_THAN", "fieldValue": ["value": 10]]]]])
            let found = ranked.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
            #expect(Set(found) == Set(written + [same]) && found.count == written.count + 1, "\(ranked.json)")
            let feed = try await session.post("private", "changes/zone", ["zones": [["zoneID": ["zoneName": "Z"], "syncToken": .string(token)]]])
            let changed = feed.json["zones"]?.arrayValue?.first?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
            #expect(Set(changed) == Set(written + [same]) && changed.count == written.count + 1, "\(feed.json)")
            // (The harness checks the usage counters against the records stored when the test ends.)
        }
    }
}
