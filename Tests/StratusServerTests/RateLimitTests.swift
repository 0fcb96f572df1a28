import Foundation
@testable import StratusTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import StratusCore
import StratusStore
import Testing

/// Rate limits (issue 25): per container, per user and per API token and client address, counted
/// in operations, shared by every server process on the database.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct RateLimitTests {
    /// POSTs and returns status, body and the Retry-After header.
    static func post(_ url: String, _ body: String) async throws -> (status: Int, json: JSON, retryAfter: String?) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as? HTTPURLResponse
        return (http?.statusCode ?? 0, (try? JSONParser.parse(Array(data))) ?? .null, http?.value(forHTTPHeaderField: "Retry-After"))
    }


    @Test func operationsCountAgainstTheContainersAndTheUsersLimits() async throws {
        try await Harness.run(live: true, poolSize: 8) { harness in
            let alice = try await harness.container().signedUp()
            let bob = try await Session(harness: harness, container: alice.container, environment: .development, apiToken: alice.apiToken).signedUp()
            let other = try await harness.container().signedUp()
            let base = "http://127.0.0.1:\(harness.client.port ?? 0)"
            #expect(try await harness.admin(.patch, "containers/\(alice.container)/quota",
                                            json: ["environment": "development", "requestsPerSecond": 30, "userRequestsPerSecond": 20]).status == 200)
            func modify(_ session: Session, _ count: Int, prefix: String) async throws -> (status: Int, json: JSON, retryAfter: String?) {
                let operations = (0..<count).map { JSONWriter.string(op("create", "\(prefix)-\($0)")) }.joined(separator: ",")
                return try await Self.post(base + session.path("private", "records/modify"), #"{"operations":[\#(operations)]}"#)
            }

            // Windows are whole seconds; the test holds one still, so how fast it runs does not matter.
            var window = Int64(Date().timeIntervalSince1970)
            harness.app.rateLimiter.holdWindow(window)
            // A batch counts its operations: 15 + 5 fill Alice's 20 per second; one more is throttled.
            let first = try await modify(alice, 15, prefix: "a")
            let second = try await modify(alice, 5, prefix: "b")
            let third = try await modify(alice, 1, prefix: "c")
            #expect(first.status == 200 && second.status == 200, "\(first.json) \(second.json)")
            #expect(third.status == 429 && third.json["serverErrorCode"] == "THROTTLED" && third.json["retryAfter"] == 1 && third.retryAfter == "1",
                    "\(third)")
            #expect(third.json["reason"]?.stringValue?.contains("your user's limit") == true, "\(third.json)")
            // Bob has his own 20, but only 10 are left of the container's 30; another container is untouched.
            let bobs = try await modify(bob, 10, prefix: "d")
            let bobsMore = try await modify(bob, 1, prefix: "e")
            let elsewhere = try await modify(other, 25, prefix: "f")
            #expect(bobs.status == 200, "\(bobs.json)")
            #expect(bobsMore.status == 429 && bobsMore.json["reason"]?.stringValue?.contains("this container's limit") == true, "\(bobsMore.json)")
            #expect(elsewhere.status == 200, "\(elsewhere.json)")

            // The next second admits again.
            window += 1
            harness.app.rateLimiter.holdWindow(window)
            #expect(try await modify(alice, 1, prefix: "g").status == 200)

            // Calls without a user are limited per API token and client address, at the user rate.
            window += 1
            harness.app.rateLimiter.holdWindow(window)
            var statuses: [Int] = []
            for index in 0..<25 {
                statuses.append(try await Self.post(base + "/database/1/\(alice.container)/development/public/records/lookup?ckAPIToken=\(alice.apiToken)",
                                                    #"{"records":[{"recordName":"r\#(index)"}]}"#).status)
            }
            #expect(statuses.filter { $0 == 200 }.count == 20 && statuses.filter { $0 == 429 }.count == 5, "\(statuses)")

            // What was throttled is in the usage report (counts reach the database about once a second).
            var usage = try await harness.admin(.get, "containers/\(alice.container)/usage?environment=development")
            for _ in 0..<40 where usage.json["requests"]?["lastMinute"]?["throttled"] != 7 {
                try await Task.sleep(for: .milliseconds(250))
                usage = try await harness.admin(.get, "containers/\(alice.container)/usage?environment=development")
            }
            guard case .int(let throttled)? = usage.json["requests"]?["lastMinute"]?["throttled"],
                  case .int(let requests)? = usage.json["requests"]?["lastMinute"]?["requests"] else {
                Issue.record("no request counts: \(usage.json)")
                return
            }
            #expect(throttled == 1 + 1 + 5 && requests >= 15 + 5 + 10 + 1 + 20, "\(usage.json)")
        }
    }

    /// Two `stratus serve` processes on one database: a container offered 5× its limit gets
    /// about its limit (THROTTLED with a retry hint for the rest), and another container's
    /// requests keep succeeding. The rates and latencies are printed, not asserted on time.
    @Test func twoServerProcessesShareOneLimit() async throws {
        try await withServeProcesses(2, adminToken: "rates-admin", name: "stratus-rates") { servers in
            let admin = ["Authorization": "Bearer rates-admin"]
            func tenant(_ name: String) async throws -> (token: String, user: String) {
                try await serveTenant(servers[0], adminToken: "rates-admin", container: name)
            }
            let limited = try await tenant("iCloud.com.example.Limited")
            let bystander = try await tenant("iCloud.com.example.Bystander")
            let limit = 40
            let patched = try await Self.patch(servers[1] + "/management/1/containers/iCloud.com.example.Limited/quota",
                                               #"{"environment":"development","requestsPerSecond":\#(limit)}"#, headers: admin)
            #expect(patched == 200)

            let hosts = servers
            @Sendable func load(_ container: String, _ credentials: (token: String, user: String), workers: Int, every: Duration, seconds: Int) async throws -> [Outcome] {
                try await Self.load(hosts, container, credentials, workers: workers, every: every, seconds: seconds)
            }
            func p99(_ outcomes: [Outcome]) -> Duration {
                let sorted = outcomes.map(\.latency).sorted()
                return sorted.isEmpty ? .zero : sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
            }

            // The bystander alone, then beside the limited container offered 5× its limit (200/s).
            let alone = try await load("iCloud.com.example.Bystander", bystander, workers: 4, every: .milliseconds(100), seconds: 3)
            async let limitedOutcomes = load("iCloud.com.example.Limited", limited, workers: 10, every: .milliseconds(50), seconds: 6)
            async let besideOutcomes = load("iCloud.com.example.Bystander", bystander, workers: 4, every: .milliseconds(100), seconds: 6)
            let (flood, beside) = try await (limitedOutcomes, besideOutcomes)

            // Whole seconds only: the first and last are partial.
            let seconds = Set(flood.map(\.second)).sorted().dropFirst().dropLast()
            let accepted = flood.filter { seconds.contains($0.second) && $0.status == 200 }.count
            let offered = flood.filter { seconds.contains($0.second) }.count
            let rate = Double(accepted) / Double(max(1, seconds.count))
            let throttled = flood.filter { $0.status == 429 }
            let wrong = flood.filter { $0.status != 200 && $0.status != 429 }
            print("RATE two processes: limit \(limit)/s, offered \(Double(offered) / Double(max(1, seconds.count)))/s, accepted \(rate)/s over \(seconds.count) s; bystander p99 alone \(p99(alone)), beside the flood \(p99(beside)); bystander errors \(beside.filter { $0.status != 200 }.count)/\(beside.count)")
            #expect(wrong.isEmpty, "\(wrong.prefix(3))")
            #expect(throttled.allSatisfy { $0.code == "THROTTLED" && $0.retryAfter == "1" })
            #expect(rate >= Double(limit) * 0.8 && rate <= Double(limit) * 1.2, "accepted \(rate)/s against a limit of \(limit)/s")
            #expect(beside.allSatisfy { $0.status == 200 } && alone.allSatisfy { $0.status == 200 }, "the bystander was refused")
        }
    }

    struct Outcome: Sendable {
        var second: Int64
        var status: Int
        var code: String?
        var retryAfter: String?
        var latency: Duration
    }

    /// `workers` clients, each sending one lookup every `every`, alternating between the servers, for `seconds`.
    static func load(_ servers: [String], _ container: String, _ credentials: (token: String, user: String), workers: Int, every: Duration,
                     seconds: Int) async throws -> [Outcome] {
        let end = ContinuousClock.now + .seconds(seconds)
        return try await withThrowingTaskGroup(of: [Outcome].self) { group in
            for worker in 0..<workers {
                group.addTask {
                    var outcomes: [Outcome] = []
                    var next = ContinuousClock.now
                    var turn = worker
                    while next < end {
                        let server = servers[turn % servers.count]
                        turn += 1
                        let started = ContinuousClock.now
                        let answer = try await Self.post(server + "/database/1/\(container)/development/private/records/lookup?ckAPIToken=\(credentials.token)&ckWebAuthToken=\(credentials.user)",
                                                         #"{"records":[{"recordName":"r\#(worker)"}]}"#)
                        outcomes.append(Outcome(second: Int64(Date().timeIntervalSince1970), status: answer.status,
                                                code: answer.json["serverErrorCode"]?.stringValue, retryAfter: answer.retryAfter,
                                                latency: ContinuousClock.now - started))
                        next += every
                        if next > ContinuousClock.now { try await Task.sleep(until: next) }
                    }
                    return outcomes
                }
            }
            var all: [Outcome] = []
            for try await outcomes in group { all += outcomes }
            return all
        }
    }

    static func patch(_ url: String, _ body: String, headers: [String: String]) async throws -> Int {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "PATCH"
        request.httpBody = Data(body.utf8)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (_, response) = try await URLSession.shared.data(for: request)
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }
}
