import Foundation
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Concurrent single-record creates in zones written before share one statement
/// (`SharedCreate`, `Prepared.CreateRecords`): records of several users, zones and containers in
/// one transaction. Each request must still be answered as if alone: its record in its own zone,
/// with its own index entries, its zone's change position moved, its container's and owner's
/// usage counted; a name that exists, a second create of one name, a deleted zone, a quota
/// reached and a value too large to index each answered as without sharing, and the others written.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SharedCreateTests {
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
}
