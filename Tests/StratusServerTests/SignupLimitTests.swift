import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Sign-up limits (`signupsPerAddressPerHour`, `signupsPerHour`): floods from one client address
/// and from many (each a loopback address of its own, 127.0.0.x, as the server sees it) stop at
/// the limits with `THROTTLED` and create nothing more; past the limit a registered address is
/// answered exactly like a new one; `stratus usage` counts both.
///
/// Ten minutes, as every suite that runs test apps: the time limit counts the wait for a harness
/// slot (`HarnessSlots`), and with five these tests ran out of time in a slowed fresh-clone run
/// without having sent a request.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SignupLimitTests {
    /// One sign-up over its own connection from `address`.
    static func signUp(_ session: Session, port: Int, from address: String, email: String) async throws -> RawResponse {
        let body = JSONWriter.string(["emailAddress": .string(email), "password": "correct horse battery"])
        let connection = try await RawConnection(port: port, from: address)
        try await connection.send("""
            POST /auth/1/\(session.container)/\(session.environment.rawValue)/signup?ckAPIToken=\(session.apiToken) HTTP/1.1\r
            Host: x\r\nContent-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)
            """)
        let (responses, _) = try await connection.responses(count: 1)
        let response = try #require(responses.first, "no answer to a sign-up from \(address): \(connection.timeline)")
        TestSecrets.record(response.json["ckWebAuthToken"]?.stringValue)
        return response
    }

    /// Sign-ups `count` at once from `address`.
    static func flood(_ session: Session, port: Int, from address: String, count: Int, email: @escaping @Sendable (Int) -> String) async throws -> [RawResponse] {
        try await withThrowingTaskGroup(of: RawResponse.self) { group in
            for index in 0..<count {
                group.addTask { try await signUp(session, port: port, from: address, email: email(index)) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
    }

    static func users(_ harness: Harness, _ container: String) async throws -> Int {
        try await harness.admin(.get, "containers/\(container)/users?environment=development").json["users"]?.arrayValue?.count ?? -1
    }

    static func setLimits(_ harness: Harness, _ container: String, _ limits: JSON) async throws {
        var body = limits.objectValue ?? [:]
        body["environment"] = "development"
        let set = try await harness.admin(.patch, "containers/\(container)/quota", json: .object(body))
        #expect(set.status == 200, "\(set.json)")
    }

    @Test func aFloodFromOneAddressStopsAtItsLimitAndTellsNothingPastIt() async throws {
        try await Harness.run(live: true, poolSize: 8) { harness in
            let port = try #require(harness.client.port)
            let session = try await harness.container()
            // The default: 20 attempts an hour from one address.
            #expect(try await harness.admin(.get, "containers/\(session.container)/quota?environment=development").json["limits"]?["signupsPerAddressPerHour"] == 20)
            try await Self.setLimits(harness, session.container, ["signupsPerAddressPerHour": 5])
            let taken = try await Self.signUp(session, port: port, from: "127.0.0.2", email: "taken@example.com")
            #expect(taken.status == 200, "\(taken)")

            // Eight at once from one address, one of them for the registered address: five go
            // through (four accounts and EXISTS, in whatever order they come), three are refused.
            let flood = try await Self.flood(session, port: port, from: "127.0.0.3", count: 8) { $0 == 0 ? "taken@example.com" : "farm\($0)@example.com" }
            let admitted = flood.filter { $0.status != 429 }
            let throttled = flood.filter { $0.status == 429 }
            #expect(admitted.count == 5 && throttled.count == 3, "\(flood.map(\.status))")
            #expect(admitted.allSatisfy { $0.status == 200 || $0.json.errorCode == "EXISTS" }, "\(admitted)")
            for refusal in throttled {
                #expect(refusal.json.errorCode == "THROTTLED" && refusal.json["reason"]?.stringValue?.contains("too many sign-ups") == true, "\(refusal)")
                let wait = refusal.json["retryAfter"]?.intValue ?? 0
                #expect(wait > 3_000 && wait <= 3_600 && refusal.headers["retry-after"] == String(wait), "\(refusal)")
            }
            let accounts = admitted.filter { $0.status == 200 }.count
            #expect(try await Self.users(harness, session.container) == 1 + accounts, "a refused sign-up created an account")

            // Past the limit, the registered address and a new one get the same answer.
            let registered = try await Self.signUp(session, port: port, from: "127.0.0.3", email: "taken@example.com")
            let fresh = try await Self.signUp(session, port: port, from: "127.0.0.3", email: "never-seen@example.com")
            #expect(registered.status == 429 && fresh.status == 429, "\(registered) / \(fresh)")
            // (The reason names the seconds left in the hour, which a second's boundary between the two may change by one.)
            func withoutNumbers(_ reason: JSON?) -> String { (reason?.stringValue ?? "").filter { !$0.isNumber } }
            #expect(withoutNumbers(registered.json["reason"]) == withoutNumbers(fresh.json["reason"]) && registered.json.errorCode == fresh.json.errorCode,
                    "\(registered) / \(fresh)")
            #expect(abs((registered.json["retryAfter"]?.intValue ?? 0) - (fresh.json["retryAfter"]?.intValue ?? 0)) <= 1)
            #expect(try await Self.users(harness, session.container) == 1 + accounts)

            // Another address is not held back by this one.
            #expect(try await Self.signUp(session, port: port, from: "127.0.0.4", email: "neighbour@example.com").status == 200)

            // `stratus usage` counts what was let through (accounts and EXISTS answers) and what was refused.
            let usage = try await harness.admin(.get, "containers/\(session.container)/usage?environment=development").json
            #expect(usage["requests"]?["lastHour"]?["signups"] == 7 && usage["requests"]?["lastHour"]?["signupsThrottled"] == 5, "\(usage)")
        }
    }

    @Test func floodsFromManyAddressesStopAtTheEnvironmentsLimit() async throws {
        try await Harness.run(live: true, poolSize: 8) { harness in
            let port = try #require(harness.client.port)
            let session = try await harness.container()
            try await Self.setLimits(harness, session.container, ["signupsPerAddressPerHour": 2, "signupsPerHour": 6])
            // One address floods: two attempts count, and only those two count for the environment.
            let flood = try await Self.flood(session, port: port, from: "127.0.1.1", count: 10) { "flood\($0)@example.com" }
            #expect(flood.filter { $0.status == 200 }.count == 2 && flood.filter { $0.status == 429 }.count == 8, "\(flood.map(\.status))")
            // Five more addresses at once: four fit in what the environment has left.
            let many = try await withThrowingTaskGroup(of: RawResponse.self) { group in
                for index in 2...6 {
                    group.addTask { try await Self.signUp(session, port: port, from: "127.0.1.\(index)", email: "from\(index)@example.com") }
                }
                return try await group.reduce(into: [RawResponse]()) { $0.append($1) }
            }
            #expect(many.filter { $0.status == 200 }.count == 4 && many.filter { $0.status == 429 }.count == 1, "\(many.map(\.status))")
            #expect(many.first { $0.status == 429 }?.json.errorCode == "THROTTLED")
            #expect(try await Self.users(harness, session.container) == 6)
            // The limits are the environment's: production signs up as before.
            let production = try await harness.admin(.post, "containers/\(session.container)/tokens", json: ["environment": "production"])
            let productionSession = Session(harness: harness, container: session.container, environment: .production,
                                            apiToken: production.json["apiToken"]?.stringValue ?? "")
            #expect(try await Self.signUp(productionSession, port: port, from: "127.0.1.1", email: "production@example.com").status == 200)
            // Resetting a limit lets the environment go on at once, on every process.
            try await Self.setLimits(harness, session.container, ["signupsPerHour": .null])
            let later = try await Self.signUp(session, port: port, from: "127.0.1.7", email: "later@example.com")
            #expect(later.status == 200, "\(later.status) \(later.json)")
        }
    }
}
