import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// `GET /metrics`: after a scripted set of requests through the server's HTTP channel, the
/// counters moved by exactly those requests; the text passes `promtool check metrics` (Debian's
/// prometheus package: `Deploy/test.sh` installs it); labels never name a container or user; the
/// route needs the metrics token, the admin token or a superuser.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct MetricsTests {
    static let token = "metrics-scrape-token-0123456789"

    /// The samples of an exposition, by series (name and labels as written).
    static func samples(_ text: String) -> [String: Double] {
        var out: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            out[String(line[..<space])] = value
        }
        return out
    }

    static func scrape(_ harness: Harness, token: String? = MetricsTests.token) async throws -> (status: Int, text: String) {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        let answer = try await harness.send(.get, "/metrics", headers: headers)
        return (answer.status, answer.json.stringValue ?? "\(answer.json)")
    }

    @Test func countersMoveByExactlyTheRequestsMade() async throws {
        try await Harness.run(live: true, server: { $0.metricsToken = Self.token }) { harness in
            let session = try await harness.container().signedUp()
            #expect(try await session.modify("private", [op("create", "n1", fields: ["title": ["value": "one"]])]).status == 200)
            // The request log's rows of the requests so far are written before the first scrape.
            await harness.app.requestLog.flush()
            let before = Self.samples(try await Self.scrape(harness).text)
            // The script: 3 lookups, 2 queries, 1 refused lookup (BAD_REQUEST), 1 unknown path.
            for name in ["a", "b", "c"] {
                #expect(try await session.post("private", "records/lookup", ["records": [["recordName": .string(name)]]]).status == 200)
            }
            for _ in 0..<2 {
                #expect(try await session.post("private", "records/query", ["query": ["recordType": "Note"]]).status == 200)
            }
            #expect(try await session.post("private", "records/lookup", ["records": "not a list"]).status == 400)
            #expect(try await harness.send(.get, "/no/such/path").status == 404)
            await harness.app.requestLog.flush()
            let scraped = try await Self.scrape(harness)
            #expect(scraped.status == 200, "\(scraped.text.prefix(300))")
            let after = Self.samples(scraped.text)
            func delta(_ series: String) -> Double { (after[series] ?? 0) - (before[series] ?? 0) }
            #expect(delta(#"stratus_requests_total{family="records/lookup",environment="development",status="2xx"}"#) == 3)
            #expect(delta(#"stratus_requests_total{family="records/lookup",environment="development",status="4xx"}"#) == 1)
            #expect(delta(#"stratus_requests_total{family="records/query",environment="development",status="2xx"}"#) == 2)
            #expect(delta(#"stratus_requests_total{family="other",environment="none",status="4xx"}"#) == 1)
            #expect(delta(#"stratus_request_duration_seconds_count{family="records/lookup"}"#) == 4)
            #expect(delta(#"stratus_request_duration_seconds_bucket{family="records/lookup",le="+Inf"}"#) == 4)
            #expect(delta(#"stratus_errors_total{code="BAD_REQUEST"}"#) == 1)
            #expect(delta(#"stratus_errors_total{code="NOT_FOUND"}"#) == 1)
            #expect(delta("stratus_database_leases_total") >= 5, "each data request leased a connection")
            // The six data requests reached the request log (the unknown path names no container).
            #expect(delta(#"stratus_request_log_rows_total{result="written"}"#) == 6 && after["stratus_request_log_pending_rows"] == 0)
            #expect(after[#"stratus_request_log_rows_total{result="dropped"}"#] == 0)
            #expect(after["stratus_database_connections_in_use"] != nil && after["stratus_database_connections_waiting"] == 0)
            // What is read at the scrape: the queue and index builds (none here), no replica.
            #expect(after["stratus_notification_queue_rows"] != nil && after["stratus_index_builds_running"] == 0, "\(scraped.text)")
            #expect(after[#"stratus_replica_reads_total{served_by="replica"}"#] == 0 && after[#"stratus_notifications_total{path="queued"}"#] != nil)
            // Bounded labels: no container, user or record name anywhere.
            for secret in [session.container, session.userRecordName ?? "_", "records/lookup?"] {
                #expect(!scraped.text.contains(secret), "the metrics name \(secret)")
            }
            // The exposition is valid Prometheus text.
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("stratus-metrics-\(UInt32.random(in: 0...UInt32.max)).txt").path
            try scraped.text.write(toFile: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(atPath: file) }
            let checked = try await Subprocess.runDetached(["/bin/sh", "-c", "promtool check metrics < '\(file)'"])
            #expect(checked.status == 0, "promtool check metrics (Deploy/test.sh installs Debian's prometheus package): \(checked.text)")
        }
    }

    /// (Through the router: the live test client sends one request at a time, and the poll waits.)
    @Test func notificationDeliveriesAreTimed() async throws {
        try await Harness.run(server: { $0.metricsToken = Self.token }) { harness in
            let alice = try await harness.container().signedUp()
            #expect(try await alice.modify("private", [op("create", "seed")]).status == 200)
            let made = try await alice.post("private", "subscriptions/modify", ["operations": [
                ["operationType": "create", "subscription": ["subscriptionID": "notes", "subscriptionType": "query", "query": ["recordType": "Note"],
                                                             "firesOn": ["create"]]]]])
            #expect(made.json["subscriptions"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(made.json)")
            let path = try await NotificationTests.courierPath(alice)
            let before = Self.samples(try await Self.scrape(harness).text)
            // One queued (no poll waits), then one handed to a waiting poll.
            #expect(try await alice.modify("private", [op("create", "n1")]).status == 200)
            #expect(try await NotificationTests.poll(harness, path, timeout: 5).status == 200)
            async let waiting = NotificationTests.poll(harness, path, timeout: 10)
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await alice.modify("private", [op("create", "n2")]).status == 200)
            let handed = try await waiting
            #expect(handed.status == 200, "\(handed)")
            let after = Self.samples(try await Self.scrape(harness).text)
            func delta(_ series: String) -> Double { (after[series] ?? 0) - (before[series] ?? 0) }
            #expect(delta("stratus_notification_delivery_seconds_count") == 2, "\(after.filter { $0.key.contains("delivery") })")
            #expect(delta(#"stratus_notification_delivery_seconds_bucket{le="+Inf"}"#) == 2)
            let seconds = delta("stratus_notification_delivery_seconds_sum")
            #expect(seconds >= 0 && seconds < 10, "\(seconds)")
        }
    }

    @Test func pathsFallInBoundedFamilies() {
        func family(_ path: String) -> String {
            let (family, environment) = Metrics.family(of: Substring(path))
            return Metrics.families[family] + " " + Metrics.environments[environment]
        }
        #expect(family("/database/1/iCloud.a.b/development/private/records/lookup") == "records/lookup development")
        #expect(family("/database/1/c/production/public/users/lookup/email") == "users/lookup production")
        #expect(family("/database/1/c/production/public/records/lookupx") == "database:other production")
        #expect(family("/database/1/c/staging/public/zones/list") == "zones/list none")
        #expect(family("/database/1/c/development") == "database:other development")
        #expect(family("/device/1/c/development/courier/wc_abc") == "courier development")
        #expect(family("/device/1/c/production/tokens/create") == "device production")
        #expect(family("/auth/1/c/development/signin") == "auth development")
        #expect(family("/management/1/containers/x") == "management none")
        #expect(family("/health") == "health none" && family("/metrics") == "metrics none" && family("/openapi.json") == "openapi none")
        #expect(family("/") == "other none" && family("") == "other none" && family("/é/🙂") == "other none")
    }

    @Test func theMetricsNeedTheirTokenTheAdminTokenOrASuperuser() async throws {
        try await Harness.run(live: true, server: { $0.metricsToken = Self.token }) { harness in
            let none = try await Self.scrape(harness, token: nil)
            #expect(none.status == 401 && none.text.contains("metrics token"), "\(none)")
            #expect(try await Self.scrape(harness, token: "wrong").status == 401)
            #expect(try await Self.scrape(harness, token: Harness.adminToken).status == 200)
            let member = try await harness.signedInOperator()
            #expect(try await Self.scrape(harness, token: member.credential).status == 403)
            let superuser = try await harness.signedInOperator(superuser: true)
            #expect(try await Self.scrape(harness, token: superuser.credential).status == 200)
        }
    }
}
