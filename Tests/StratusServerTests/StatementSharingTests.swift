import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// Concurrent `records/lookup`s share one statement, and so do concurrent `records/query`s of one
/// shape (`StatementSharing`). Each request must still get exactly its own answer: its container,
/// environment, database, owner and zone, its names or filter values, its page, its missing zone.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct StatementSharingTests {
    struct Target: Sendable {
        var session: Session
        var database: String
        var zone: String?
        /// Written into every record's title, so an answer from anyone else's records shows.
        var tag: String
    }

    struct Case: Sendable {
        var target: Target
        var zone: String?
        var names: [String]
    }

    /// Sends every case at once while holding the pool's only connection, and lets go once all
    /// of them are in the sharing queue (in the statements waiting for the connection, one per
    /// slot of `sharing`, each normally its first request alone, or queued behind them). Answers
    /// in the order of `cases`.
    static func sendAllAtOnce<Item: Sendable, Request, Answer>(
        _ cases: [Item], holding database: Database, sharing: StatementSharing<Request, Answer>,
        send: @escaping @Sendable (Item) async throws -> (status: Int, json: JSON)
    ) async throws -> [(Int, JSON)] {
        let statistics = { sharing.statistics }
        let (held, holding) = AsyncStream.makeStream(of: Void.self)
        let (release, releasing) = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            try await database.withConnection { _ in
                holding.yield()
                for await _ in release { break }
            }
        }
        for await _ in held { break }
        let answers = try await withThrowingTaskGroup(of: (Int, Int, JSON).self) { group in
            for (index, item) in cases.enumerated() {
                group.addTask {
                    let answer = try await send(item)
                    return (index, answer.status, answer.json)
                }
            }
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                let now = statistics()
                if now.serving + now.queued == cases.count { break }
                try await Task.sleep(for: .milliseconds(5))
            }
            let waiting = statistics()
            #expect(waiting.running == min(sharing.maximumStatements, cases.count) && waiting.serving + waiting.queued == cases.count, "\(waiting)")
            releasing.yield()
            var answers = [(Int, JSON)](repeating: (0, .null), count: cases.count)
            for try await (index, status, json) in group { answers[index] = (status, json) }
            return answers
        }
        try await holder.value
        return answers
    }

    @Test func concurrentLookupsShareAStatementAndEachGetsItsOwnAnswer() async throws {
        // One pooled connection, which the test holds: the first lookup waits for it as its
        // statement's runner, and every other lookup queues behind it, so the statement that runs
        // next serves all of them at once.
        try await Harness.run(poolSize: 1) { harness in
            let first = try await harness.container()
            let alice = try await first.signedUp(), bob = try await first.signedUp()
            let carol = try await harness.container().signedUp()
            var targets: [Target] = []
            for (tag, session) in [("alice", alice), ("bob", bob), ("carol", carol)] {
                let zone = try await session.post("private", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
                #expect(zone.status == 200)
                targets.append(Target(session: session, database: "private", zone: nil, tag: "\(tag)-private"))
                targets.append(Target(session: session, database: "private", zone: "Z", tag: "\(tag)-Z"))
            }
            targets.append(Target(session: alice, database: "public", zone: nil, tag: "first-public"))
            targets.append(Target(session: carol, database: "public", zone: nil, tag: "second-public"))
            // The same record names everywhere; r-3 is deleted, so only its tombstone is stored.
            for target in targets {
                let written = try await target.session.modify(target.database, zone: target.zone, (0..<4).map {
                    op("create", "r-\($0)", fields: ["title": ["value": .string("\(target.tag)-r-\($0)")]])
                })
                #expect(written.status == 200, "\(written.json)")
                let deleted = try await target.session.modify(target.database, zone: target.zone, [op("forceDelete", "r-3", type: nil)])
                #expect(deleted.json.record(0)?["deleted"] == true, "\(deleted.json)")
            }

            var cases: [Case] = []
            for target in targets {
                cases.append(Case(target: target, zone: target.zone, names: ["r-0"]))
                cases.append(Case(target: target, zone: target.zone, names: ["r-2", "r-3", "missing", "r-1", "r-2"]))
                cases.append(Case(target: target, zone: target.zone, names: []))
            }
            for target in targets where target.database == "private" && target.zone == nil {
                cases.append(Case(target: target, zone: "Nowhere", names: ["r-0"]))
            }
            let send: @Sendable (Case) async throws -> (status: Int, json: JSON) = { item in
                var body: [String: JSON] = ["records": .array(item.names.map { ["recordName": .string($0)] })]
                if let zone = item.zone { body["zoneID"] = ["zoneName": .string(zone)] }
                return try await item.target.session.post(item.target.database, "records/lookup", .object(body))
            }
            // Once each, unshared, so tokens are cached and the only database work left is the lookup.
            for item in cases { _ = try await send(item) }

            let lookups = harness.app.records.lookups
            let before = lookups.statistics
            let answers = try await Self.sendAllAtOnce(cases, holding: harness.database, sharing: lookups, send: send)

            let after = lookups.statistics
            #expect(after.requests - before.requests == cases.count)
            // Unshared, that would be one statement per request.
            // (With more than one slot, one more per further slot: see the query test.)
            #expect(after.statements - before.statements <= 2 * lookups.maximumStatements - 1 + 1, "the waiting statements, then one for all the queued: \(after)")
            #expect(after.running == 0 && after.serving == 0 && after.queued == 0)

            for (item, answer) in zip(cases, answers) {
                let (status, json) = answer
                if item.zone == "Nowhere" {
                    #expect(status == 404 && json.errorCode == "ZONE_NOT_FOUND", "\(item.target.tag): \(json)")
                    continue
                }
                #expect(status == 200, "\(item.target.tag) \(item.names): \(json)")
                let records = json["records"]?.arrayValue ?? []
                #expect(records.count == item.names.count, "\(item.target.tag) \(item.names): \(json)")
                for (name, record) in zip(item.names, records) {
                    #expect(record["recordName"]?.stringValue == name)
                    if name == "r-3" || name == "missing" {
                        #expect(record.errorCode == "NOT_FOUND", "\(item.target.tag) \(name): \(record)")
                    } else {
                        #expect(record["fields"]?["title"]?["value"]?.stringValue == "\(item.target.tag)-\(name)", "\(item.target.tag) \(name): \(record)")
                    }
                }
            }
        }
    }

    /// With one pool, one sharing serves both event loops: the test holds the pool's connection
    /// so that every query queues, and counts the statements. With a pool per loop (8
    /// connections), each loop's queries share among themselves; the queries go out together,
    /// unheld, and every answer must still be its own.
    @Test(arguments: [1, 8])
    func concurrentQueriesOfOneShapeShareAStatementAndEachGetsItsOwnAnswer(poolSize: Int) async throws {
        try await Harness.run(poolSize: poolSize) { harness in
            let first = try await harness.container()
            let alice = try await first.signedUp(), bob = try await first.signedUp()
            let carol = try await harness.container().signedUp()
            let sessions = [("alice", alice), ("bob", bob), ("carol", carol)]
            // The same names, titles and ranks everywhere; only `owner` tells whose a record is.
            for (tag, session) in sessions {
                let written = try await session.modify("private", (0..<12).map {
                    op("create", "r-\($0)", type: "N", fields: ["title": ["value": .string("t\($0 % 3)")], "rank": ["value": .int(Int64(($0 * 7) % 12))],
                                                           "owner": ["value": .string(tag)]])
                })
                #expect(written.status == 200, "\(written.json)")
            }
            struct Case: Sendable {
                var tag: String
                var session: Session
                var body: JSON
            }
            var cases: [Case] = []
            for (tag, session) in sessions {
                for title in ["t0", "t1", "t2", "none"] {
                    cases.append(Case(tag: tag, session: session, body: ["query": ["recordType": "N", "filterBy": [
                        ["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": .string(title)]]]]]))
                }
                let sorted: JSON = ["query": ["recordType": "N", "sortBy": [["fieldName": "rank"]]], "resultsLimit": 5]
                cases.append(Case(tag: tag, session: session, body: sorted))
                // The second page of the same query: a keyset-paged shape of its own.
                let page = try await session.post("private", "records/query", sorted)
                guard let marker = page.json["continuationMarker"]?.stringValue else {
                    Issue.record("no continuation marker: \(page.json)")
                    return
                }
                var next = sorted.objectValue!
                next["continuationMarker"] = .string(marker)
                cases.append(Case(tag: tag, session: session, body: .object(next)))
                var missing = cases[cases.count - 6].body.objectValue!
                missing["zoneID"] = ["zoneName": "Nowhere"]
                cases.append(Case(tag: tag, session: session, body: .object(missing)))
            }
            let send: @Sendable (Case) async throws -> (status: Int, json: JSON) = { item in
                try await item.session.post("private", "records/query", item.body)
            }
            // Each alone first (one request at a time shares nothing): the answers to match.
            var expected: [(Int, JSON)] = []
            for item in cases { expected.append(try await send(item)) }

            let sharings = harness.app.records.queriesByLoop.values
            #expect(sharings.count == harness.database.pools.values.count, "one query sharing per pool")
            let before = sharings.map(\.statistics)
            let answers: [(Int, JSON)]
            if poolSize == 1 {
                answers = try await Self.sendAllAtOnce(cases, holding: harness.database, sharing: sharings[0], send: send)
                let after = sharings[0].statistics
                // The waiting statements (one per slot), then three shapes (equality, sorted,
                // sorted after a marker). With two slots, two finishing statements can each wake a
                // queued request of one shape before either has run; the second then finds its
                // shape taken by the first and runs alone: one statement more per further slot.
                // Unshared, that would be one statement per request.
                #expect(after.statements - before[0].statements <= 2 * sharings[0].maximumStatements - 1 + 3, "\(after)")
            } else {
                answers = try await withThrowingTaskGroup(of: (Int, Int, JSON).self) { group in
                    for (index, item) in cases.enumerated() {
                        group.addTask { let answer = try await send(item); return (index, answer.status, answer.json) }
                    }
                    var answers = [(Int, JSON)](repeating: (0, .null), count: cases.count)
                    for try await (index, status, json) in group { answers[index] = (status, json) }
                    return answers
                }
            }
            let served = zip(sharings, before).map { $0.statistics.requests - $1.requests }.reduce(0, +)
            #expect(served == cases.count, "every query went through a sharing")

            for (index, item) in cases.enumerated() {
                let (status, json) = answers[index]
                let (expectedStatus, expectedJSON) = expected[index]
                #expect(status == expectedStatus, "\(item.tag) \(item.body): \(json)")
                if item.body["zoneID"] != nil {
                    #expect(status == 404 && json.errorCode == "ZONE_NOT_FOUND", "\(item.tag): \(json)")
                    continue
                }
                let records = json["records"]?.arrayValue ?? []
                let names = records.map { $0["recordName"]?.stringValue ?? "?" }
                #expect(records == (expectedJSON["records"]?.arrayValue ?? []),
                        "\(item.tag) \(item.body): \(names) against \((expectedJSON["records"]?.arrayValue ?? []).map { $0["recordName"]?.stringValue ?? "?" })")
                #expect((json["continuationMarker"] == nil) == (expectedJSON["continuationMarker"] == nil))
                for record in records {
                    #expect(record["fields"]?["owner"]?["value"]?.stringValue == item.tag, "\(item.tag) got \(record)")
                }
                if item.body["query"]?["filterBy"] != nil, let title = item.body["query"]?["filterBy"]?.arrayValue?.first?["fieldValue"]?["value"]?.stringValue {
                    #expect(records.count == (title == "none" ? 0 : 4), "\(item.tag) \(title): \(records.count)")
                } else {
                    #expect(records.count == 5, "\(item.tag): \(records.count)")
                }
            }
        }
    }

    /// A statement stalled on the database side must not hold everyone queued behind it: once one
    /// has been executing for the sharing's patience, arriving requests start statements of their
    /// own. Here the stall is a table lock the test holds.
    @Test func requestsDoNotQueueBehindAStalledStatement() async throws {
        try await Harness.run(poolSize: 4) { harness in
            let session = try await harness.container().signedUp()
            let written = try await session.modify("private", (0..<3).map { op("create", "r-\($0)", fields: ["title": ["value": .string("t\($0)")]]) })
            #expect(written.status == 200)
            let lookup: @Sendable (Int) async throws -> (status: Int, json: JSON) = { index in
                try await session.post("private", "records/lookup", ["records": [["recordName": .string("r-\(index)")]]])
            }
            _ = try await lookup(0)  // tokens cached: the lookup is the only database work left

            let lookups = harness.app.records.lookups
            let before = lookups.statistics
            let (locked, locking) = AsyncStream.makeStream(of: Void.self)
            let (release, releasing) = AsyncStream.makeStream(of: Void.self)
            let holder = Task {
                try await harness.database.transaction { connection in
                    try await connection.query("LOCK TABLE records IN ACCESS EXCLUSIVE MODE", logger: TestCluster.logger)
                    locking.yield()
                    for await _ in release { break }
                }
            }
            for await _ in locked { break }
            func waitFor(_ condition: (StatementSharing<LookupRequest, [Record]?>.Statistics) -> Bool) async throws {
                let deadline = ContinuousClock.now + .seconds(20)
                while ContinuousClock.now < deadline, !condition(lookups.statistics) { try await Task.sleep(for: .milliseconds(5)) }
            }
            let answers = try await withThrowingTaskGroup(of: (Int, Int, JSON).self) { group in
                group.addTask { let answer = try await lookup(0); return (0, answer.status, answer.json) }
                try await waitFor { $0.running == 1 }
                // Longer than the patience (10 ms) on the lock.
                try await Task.sleep(for: .milliseconds(100))
                for index in 1...2 {
                    group.addTask { let answer = try await lookup(index); return (index, answer.status, answer.json) }
                }
                try await waitFor { $0.running == 3 }
                let stalled = lookups.statistics
                #expect(stalled.running == 3 && stalled.queued == 0, "each later request should run its own statement: \(stalled)")
                releasing.yield()
                var answers: [(Int, Int, JSON)] = []
                for try await answer in group { answers.append(answer) }
                return answers
            }
            try await holder.value
            #expect(lookups.statistics.statements - before.statements == 3)
            for (index, status, json) in answers {
                #expect(status == 200)
                #expect(json.record(0)?["fields"]?["title"]?["value"]?.stringValue == "t\(index)", "\(json)")
            }
        }
    }
}
