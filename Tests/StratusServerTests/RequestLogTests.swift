import Foundation
import HTTPTypes
import PostgresNIO
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// The request log: every data-API request of a container is logged once, with the id its answer
/// carried (`X-Request-ID`, and an error's `uuid`), through a live server; the log keeps the newest
/// `logRequests` rows under a flood; `stratus logs` reads and follows it.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct RequestLogTests {
    static let requestID = HTTPField.Name("X-Request-ID")!

    /// `(status, json)` of a data request sent with `id` as its X-Request-ID.
    static func send(_ session: Session, _ operation: String, _ body: JSON, database: String = "private", id: String) async throws -> (status: Int, json: JSON) {
        try await session.harness.send(.post, session.path(database, operation), json: body, headers: [requestID: id])
    }

    static func logs(_ harness: Harness, _ container: String, _ query: String = "") async throws -> [JSON] {
        let answer = try await harness.admin(.get, "containers/\(container)/logs?limit=1000" + query)
        #expect(answer.status == 200, "logs: \(answer.json)")
        return answer.json["entries"]?.arrayValue ?? []
    }

    @Test func eachRequestOfAScriptedRunIsLoggedOnceWithItsIDAndFiltersFindIt() async throws {
        try await Harness.run(live: true) { harness in
            let port = try #require(harness.client.port)
            let session = try await harness.container().signedUp()
            let other = try await harness.container().signedUp()
            let user = try #require(session.userRecordName)
            let run = "run-\(UInt32.random(in: 0...UInt32.max))"
            let saved = try await Self.send(session, "records/modify", ["operations": [op("create", "n1", fields: ["title": ["value": "a"]])]], id: "\(run)-1")
            #expect(saved.status == 200, "\(saved.json)")
            let looked = try await Self.send(session, "records/lookup", ["records": [["recordName": "n1"]]], id: "\(run)-2")
            #expect(looked.status == 200)
            let zones = try await session.harness.send(.get, session.path("public", "zones/list"), headers: [Self.requestID: "\(run)-3"])
            #expect(zones.status == 200)
            // A bad body and a bad token: answered with errors, logged with their codes.
            let bad = try await Self.send(session, "records/modify", ["operations": "not a list"], id: "\(run)-4")
            #expect(bad.status == 400 && bad.json["uuid"]?.stringValue == "\(run)-4", "\(bad.json)")
            let denied = try await harness.send(.post, "/database/1/\(session.container)/development/public/records/lookup?ckAPIToken=wrong",
                                                json: ["records": [["recordName": "n1"]]], headers: [Self.requestID: "\(run)-5"])
            #expect(denied.status == 401 && denied.json["serverErrorCode"] == "AUTHENTICATION_FAILED")
            // Another container's request, and one to no container: not in this log.
            _ = try await Self.send(other, "records/lookup", ["records": [["recordName": "n1"]]], id: "\(run)-other")
            _ = try await harness.send(.post, "/database/1/iCloud.com.example.Nowhere/development/public/records/lookup?ckAPIToken=x",
                                       json: ["records": []], headers: [Self.requestID: "\(run)-nowhere"])
            // No id sent: the one made for it is the header's, the error's uuid and the log's.
            let raw = try await RequestIDTests.exchange(port, RequestIDTests.lookup(session.container, id: nil))
            let made = try #require(raw.headers["x-request-id"])
            #expect(raw.json["uuid"]?.stringValue == made)

            let entries = try await Self.logs(harness, session.container)
            let ids = entries.compactMap { $0["requestID"]?.stringValue }
            for expected in (1...5).map({ "\(run)-\($0)" }) + [made] {
                #expect(ids.filter { $0 == expected }.count == 1, "\(expected) is logged \(ids.filter { $0 == expected }.count) times: \(ids)")
            }
            #expect(!ids.contains("\(run)-other") && !ids.contains("\(run)-nowhere"), "\(ids)")
            #expect(try await Self.logs(harness, other.container).contains { $0["requestID"]?.stringValue == "\(run)-other" })
            func entry(_ id: String) -> JSON? { entries.first { $0["requestID"]?.stringValue == id } }
            let create = try #require(entry("\(run)-1"))
            #expect(create["operation"] == "records/modify" && create["status"] == 200 && create["database"] == "private"
                    && create["userRecordName"]?.stringValue == user && create["serverErrorCode"] == .null && create["clientAddress"] == "127.0.0.1",
                    "\(create)")
            #expect(Self.milliseconds(create["durationMs"]) > 0, "\(create)")
            #expect(entry("\(run)-2")?["operation"] == "records/lookup" && entry("\(run)-3")?["operation"] == "zones/list"
                    && entry("\(run)-3")?["database"] == "public")
            #expect(entry("\(run)-4")?["status"] == 400 && entry("\(run)-4")?["serverErrorCode"] == "BAD_REQUEST")
            // A failure keeps the reason its error dictionary gave; a success has none.
            #expect(entry("\(run)-4")?["reason"] == bad.json["reason"] && bad.json["reason"]?.stringValue?.isEmpty == false, "\(String(describing: entry("\(run)-4")))")
            #expect(entry("\(run)-5")?["reason"] == denied.json["reason"] && create["reason"] == .null)
            #expect(entry("\(run)-5")?["status"] == 401 && entry("\(run)-5")?["serverErrorCode"] == "AUTHENTICATION_FAILED"
                    && entry("\(run)-5")?["userRecordName"] == .null)
            // Newest first, numbered in order.
            let numbers = entries.compactMap { $0["seq"]?.intValue }
            #expect(numbers == numbers.sorted(by: >) && Set(numbers).count == numbers.count, "\(numbers)")

            // Filters: errors, one operation, one user (by email too), after a row (oldest first).
            let errors = try await Self.logs(harness, session.container, "&status=4xx").compactMap { $0["requestID"]?.stringValue }
            #expect(Set(errors) == ["\(run)-4", "\(run)-5", made], "\(errors)")
            #expect(try await Self.logs(harness, session.container, "&status=401").compactMap { $0["requestID"]?.stringValue } == [made, "\(run)-5"])
            let modifies = try await Self.logs(harness, session.container, "&operation=records/modify").compactMap { $0["requestID"]?.stringValue }
            #expect(Set(modifies) == ["\(run)-1", "\(run)-4"], "\(modifies)")
            let mine = try await Self.logs(harness, session.container, "&user=\(user)").compactMap { $0["requestID"]?.stringValue }
            #expect(Set(mine) == ["\(run)-1", "\(run)-2", "\(run)-3", "\(run)-4"], "\(mine)")
            let first = try #require(entry("\(run)-1")?["seq"]?.intValue)
            let after = try await Self.logs(harness, session.container, "&after=\(first)").compactMap { $0["seq"]?.intValue }
            #expect(after == numbers.filter { $0 > first }.sorted(), "\(after)")
            // By request id, by text (in the reason, any case), in a time range.
            #expect(try await Self.logs(harness, session.container, "&requestID=\(run)-2").compactMap { $0["requestID"]?.stringValue } == ["\(run)-2"])
            let word = try #require(bad.json["reason"]?.stringValue?.split(separator: " ").max { $0.count < $1.count }.map { String($0).uppercased() })
            let found = try await Self.logs(harness, session.container, "&q=\(ConsolePath.segment(word))").compactMap { $0["requestID"]?.stringValue }
            #expect(found.contains("\(run)-4") && !found.contains("\(run)-2"), "\(word): \(found)")
            // (Times are written to the millisecond, rounded: a bound 2 ms before the first request's is before it.)
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            let createdAt = try #require(create["at"]?.stringValue.flatMap { formatter.date(from: $0) })
            let bound = ConsolePath.segment(formatter.string(from: createdAt.addingTimeInterval(-0.002)))
            let ours = Set((1...5).map { "\(run)-\($0)" })
            let until = try await Self.logs(harness, session.container, "&until=\(bound)").compactMap { $0["requestID"]?.stringValue }
            #expect(ours.isDisjoint(with: until), "\(until)")
            let window = try await Self.logs(harness, session.container, "&since=\(bound)&until=2999-01-01T00:00:00Z").compactMap { $0["requestID"]?.stringValue }
            #expect(ours.isSubset(of: window) && Set(window).isDisjoint(with: until), "\(window)")
            for bad in ["until=soon", "since=2026-11-29T10:00:00Z&until=2026-11-29T09:00:00Z", "requestID=a%20b", "q="] {
                #expect(try await harness.admin(.get, "containers/\(session.container)/logs?\(bad)").status == 400, "\(bad)")
            }
            #expect(try await harness.admin(.get, "containers/\(session.container)/logs?status=banana").status == 400)
            #expect(try await harness.admin(.get, "containers/\(session.container)/logs?since=yesterday").status == 400)
            #expect(try await harness.admin(.get, "containers/\(session.container)/logs?environment=staging").status == 400)

            // Telemetry: the same requests, by operation and in the hour's buckets.
            let telemetry = try await harness.admin(.get, "containers/\(session.container)/telemetry?period=hour")
            #expect(telemetry.status == 200, "\(telemetry.json)")
            let operations = telemetry.json["operations"]?.arrayValue ?? []
            let modify = operations.first { $0["operation"] == "records/modify" }
            #expect(modify?["requests"] == 2 && modify?["errors"] == 1, "\(operations)")
            let counted = (telemetry.json["buckets"]?.arrayValue ?? []).reduce(Int64(0)) { $0 + ($1["requests"]?.intValue ?? 0) }
            #expect(counted == Int64(entries.count), "buckets count \(counted) of \(entries.count)")
            #expect(try await harness.admin(.get, "containers/\(session.container)/telemetry?period=week").status == 400)

            // Erasing the user leaves their requests in the log without their name or address.
            let erased = try await harness.admin(.post, "containers/\(session.container)/users/\(user)/erase", json: ["confirm": .string(user)])
            #expect(erased.status == 200, "\(erased.json)")
            let forgotten = try await Self.logs(harness, session.container)
            #expect(forgotten.count == entries.count && !forgotten.contains { $0["userRecordName"]?.stringValue == user }, "\(forgotten)")
            let created = forgotten.first { $0["requestID"]?.stringValue == "\(run)-1" }
            #expect(created?["userRecordName"] == .null && created?["clientAddress"] == .null && created?["status"] == 200, "\(String(describing: created))")
            #expect(forgotten.first { $0["requestID"]?.stringValue == "\(run)-5" }?["clientAddress"] == "127.0.0.1")
        }
    }

    static func milliseconds(_ value: JSON?) -> Double {
        switch value {
        case .double(let number)?: number
        case .int(let number)?: Double(number)
        default: -1
        }
    }

    @Test func theLogKeepsTheNewestRowsUnderAFloodAndNoneWhenOff() async throws {
        try await Harness.run(live: true) { harness in
            let session = try await harness.container().signedUp()
            let limited = try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "logRequests": 40])
            #expect(limited.status == 200 && limited.json["limits"]?["logRequests"] == 40, "\(limited.json)")
            #expect(try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["logRequests": -1]).status == 400)
            // 8 clients, 300 requests, while the writer writes every second.
            try await withThrowingTaskGroup(of: Void.self) { group in
                for client in 0..<8 {
                    group.addTask {
                        for number in 0..<38 {
                            let answer = try await Self.send(session, "records/lookup", ["records": [["recordName": "x"]]], id: "flood-\(client)-\(number)")
                            #expect(answer.status == 200)
                        }
                    }
                }
                try await group.waitForAll()
            }
            let entries = try await Self.logs(harness, session.container)
            let numbers = entries.compactMap { $0["seq"]?.intValue }
            #expect(entries.count == 40, "kept \(entries.count)")
            // The newest: the 40 highest numbers of the 304 written (sign-up is not a data request).
            #expect(numbers.first == 304 && numbers.last == 265, "\(numbers.first ?? 0)…\(numbers.last ?? 0)")
            // Stored: batches of about a second; none whose requests are all past the newest 40 stays.
            let stored = try await harness.database.withConnection { connection in
                var counts: (Int64, Int64)?
                for try await row in try await connection.query("""
                    SELECT count(*) FILTER (WHERE last_seq <= 264), coalesce(sum(cardinality(at)), 0)::int8 FROM request_log
                    """, logger: TestCluster.logger) {
                    counts = try row.decode((Int64, Int64).self)
                }
                return counts
            }
            #expect(stored?.0 == 0 && (stored?.1 ?? 0) >= 40 && (stored?.1 ?? 0) < 304, "\(String(describing: stored))")

            // Off: nothing is kept.
            _ = try await harness.admin(.patch, "containers/\(session.container)/quota", json: ["environment": "development", "logRequests": 0])
            for number in 0..<5 {
                _ = try await Self.send(session, "records/lookup", ["records": [["recordName": "x"]]], id: "off-\(number)")
            }
            let after = try await Self.logs(harness, session.container)
            #expect(after.isEmpty, "\(after)")
        }
    }

    /// Trimming the log reads the batches it deletes and at most one more, however many are kept:
    /// with 300 one-request batches kept, the write's DELETE examines at most one of them (it read
    /// all 300 when it was bounded by `last_seq` alone, on every write).
    @Test(.disabled(if: TestCluster.citusPorts != nil, "a Citus coordinator cannot EXPLAIN ANALYZE an INSERT … SELECT; trimming itself is checked there by the flood test"))
    func trimmingReadsOnlyTheBatchesItDeletes() async throws {
        try await Harness.run { harness in
            let admin = AdminStore(database: harness.database, logger: TestCluster.logger)
            let containerID = ContainerID(Int64.random(in: 1_000_000...2_000_000_000))
            func entry(_ number: Int) -> RequestLogEntry {
                RequestLogEntry(containerID: containerID, environment: .development, at: Date(), database: .private, operation: "records/lookup",
                                status: 200, errorCode: nil, durationMicroseconds: 5, userRecordName: nil, requestID: "trim-\(number)", clientAddress: nil)
            }
            for number in 0..<300 {
                try await admin.metering.writeRequestLog([entry(number)], groups: [(indices: [0], keep: 1_000)])
            }
            // A log of many containers, with statistics, as a running server's is (autovacuum
            // analyzes a growing table). On a table of a few pages PostgreSQL rightly reads it
            // whole, bound or no bound; on a large one, the bound decides what is read.
            try await harness.database.withConnection { connection in
                try await connection.statement("""
                    INSERT INTO request_log (container_id, environment, first_seq, last_seq, first_at, last_at, at, database, operation, status,
                                             error_code, duration_us, user_record_name, request_id, client_address)
                    SELECT -c, 1, s, s, now(), now(), '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'
                    FROM generate_series(1, 200) c, generate_series(1, 100) s
                    """, logger: TestCluster.logger)
                try await connection.statement("ANALYZE request_log", logger: TestCluster.logger)
            }
            // The service's statement, run the way it is prepared, once with nothing past the limit and
            // once with the oldest 100 past it; rolled back.
            func examined(keep: Int) async throws -> (deleted: Int64, examined: Int64, plan: String) {
                try await harness.database.withConnection { connection in
                    try await connection.statement("BEGIN", logger: TestCluster.logger)
                    try await connection.statement(PostgresQuery(unsafeSQL: "PREPARE trim_probe AS \(WriteRequestLog.sql)"), logger: TestCluster.logger)
                    let rows = try await connection.statement(PostgresQuery(unsafeSQL: """
                        EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE trim_probe(\(containerID), 1, 1, 1, \(keep), now(), now(), ARRAY[now()], ARRAY[2::int2],
                            ARRAY['records/lookup'], ARRAY[200::int2], ARRAY[''], ARRAY[5], ARRAY[''], ARRAY['trim-probe'], ARRAY[''], ARRAY[''])
                        """), logger: TestCluster.logger)
                    try await connection.statement("ROLLBACK", logger: TestCluster.logger)
                    try await connection.statement("DEALLOCATE trim_probe", logger: TestCluster.logger)
                    let text = try rows[0].decode(String.self)
                    let plan = try JSONParser.parse(Array(text.utf8))
                    // The DELETE's scan of request_log: the rows it kept (deleted) and the rows it read and passed over.
                    func scan(_ node: JSON) -> JSON? {
                        if node["Relation Name"] == "request_log", node["Node Type"]?.stringValue?.hasSuffix("Scan") == true { return node }
                        for child in node["Plans"]?.arrayValue ?? [] { if let found = scan(child) { return found } }
                        return nil
                    }
                    let found = try #require(plan.arrayValue?.first?["Plan"].flatMap(scan), "no scan of request_log in \(plan)")
                    let kept = found["Actual Rows"]?.intValue ?? -1
                    return (kept, kept + (found["Rows Removed by Filter"]?.intValue ?? 0) + (found["Rows Removed by Index Recheck"]?.intValue ?? 0), text)
                }
            }
            let none = try await examined(keep: 1_000)
            #expect(none.deleted == 0 && none.examined <= 1, "nothing past the limit, yet \(none.examined) of 300 batches read: \(none.plan)")
            // The next number is 301: with 201 kept, batches 1…100 are past the limit.
            let some = try await examined(keep: 201)
            #expect(some.deleted == 100 && some.examined <= 101, "\(some.deleted) deleted, \(some.examined) read: \(some.plan)")
        }
    }

    @Test func theCommandPrintsFiltersAndFollowsTheLog() async throws {
        try await Harness.run(live: true) { harness in
            let port = try #require(harness.client.port)
            let server = "http://127.0.0.1:\(port)"
            let session = try await harness.container().signedUp()
            _ = try await Self.send(session, "records/lookup", ["records": [["recordName": "x"]]], id: "cli-ok")
            _ = try await Self.send(session, "records/modify", ["operations": 7], id: "cli-bad")
            var environment = ProcessInfo.processInfo.environment
            environment["STRATUS_ADMIN_TOKEN"] = Harness.adminToken
            environment["STRATUS_SERVER"] = server
            let printed = try await Subprocess.runDetached([Programs.binary, "logs", "--container", session.container, "--status", "4xx"], environment: environment)
            #expect(printed.status == 0, "\(printed.text)")
            let lines = printed.text.split(separator: "\n")
            #expect(lines.first?.hasPrefix("AT\t") == true && lines.count == 2, "\(printed.text)")
            #expect(lines.last?.contains("cli-bad") == true && lines.last?.contains("records/modify\t400 BAD_REQUEST") == true, "\(printed.text)")
            // The failure's reason ends its line; --request-id and --text find it.
            let bad = try #require(lines.last.map(String.init))
            #expect(bad.split(separator: "\t").last?.contains("'operations'") == true, "\(bad)")
            for filter in [["--request-id", "cli-bad"], ["--text", "OPERATIONS", "--until", "2999-01-01T00:00:00Z"]] {
                let found = try await Subprocess.runDetached([Programs.binary, "logs", "--container", session.container] + filter, environment: environment)
                #expect(found.status == 0 && found.text.split(separator: "\n").dropFirst().map(String.init) == [bad], "\(filter): \(found.text)")
            }
            let json = try await Subprocess.runDetached([Programs.binary, "logs", "--container", session.container, "--since", "5m", "--json"],
                                                        environment: environment)
            let ids = (try JSONParser.parse(Array(json.text.utf8))["entries"]?.arrayValue ?? []).compactMap { $0["requestID"]?.stringValue }
            #expect(Set(ids) == ["cli-ok", "cli-bad"], "\(json.text) \(json.status)")
            let refused = try await Subprocess.runDetached([Programs.binary, "logs", "--container", session.container, "--since", "soon"], environment: environment)
            #expect(refused.status != 0 && refused.text.contains("--since"), "\(refused.text)")

            // --follow prints what comes after it started.
            let folder = try Programs.scratchFolder("logs-follow")
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let output = folder + "/follow.txt"
            let pid = try Subprocess.spawn([Programs.binary, "logs", "--container", session.container, "--follow", "--operation", "records/lookup"],
                                           outputPath: output, environment: environment)
            defer { kill(pid, SIGKILL) }
            var text = ""
            for attempt in 0..<100 {
                if attempt % 10 == 0 { _ = try await Self.send(session, "records/lookup", ["records": [["recordName": "y"]]], id: "cli-followed-\(attempt)") }
                try await Task.sleep(for: .milliseconds(100))
                text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
                if text.contains("cli-followed-") { break }
            }
            #expect(text.contains("cli-ok") && text.contains("cli-followed-") && !text.contains("cli-bad"), "\(text)")
        }
    }
}
