import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Web auth tokens name sessions that end: by signing out, by a password change, by their idle
/// and absolute limits; and failed sign-ins are throttled. Over HTTP, against real PostgreSQL.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SessionTests {
    /// Calls `users/caller` until it answers `status` or `limit` passes; returns the last answer
    /// and how long it took.
    static func caller(_ session: Session, until status: Int, within limit: Duration) async throws -> (status: Int, json: JSON, waited: Duration) {
        let start = ContinuousClock.now
        while true {
            let answer = try await session.get("public", "users/caller")
            let waited = ContinuousClock.now - start
            if answer.status == status || waited > limit { return (answer.status, answer.json, waited) }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    @Test func signOutEndsTheTokenOnEveryServerProcess() async throws {
        try await Harness.run { harness in
            let user = try await harness.container().signedUp()
            try await harness.otherProcess { other in
                let elsewhere = user.on(other)
                // Both processes accept the token (and cache the session as live).
                #expect(try await user.get("public", "users/caller").status == 200)
                #expect(try await elsewhere.get("public", "users/caller").status == 200)
                let out = try await harness.send(.post, "/auth/1/\(user.container)/development/signout?\(user.query)")
                #expect(out.status == 200, "\(out.json)")
                let here = try await user.get("public", "users/caller")
                #expect(here.status == 401 && here.json.errorCode == "AUTHENTICATION_FAILED", "\(here.json)")
                #expect(here.json["reason"]?.stringValue?.contains("signed out") == true, "\(here.json)")
                // The other process learns of it through PostgreSQL, within milliseconds.
                let there = try await Self.caller(elsewhere, until: 401, within: .seconds(5))
                #expect(there.status == 401, "the other process still accepted the token after \(there.waited)")
                print("sign-out reached the other server process after \(there.waited)")
                // Signing out again is not an error; the token stays refused on data routes too.
                #expect(try await harness.send(.post, "/auth/1/\(user.container)/development/signout?\(user.query)").status == 200)
                #expect(try await user.post("private", "records/lookup", ["records": [["recordName": "x"]]]).status == 401)
            }
        }
    }

    @Test func passwordChangeEndsEverySessionOfTheUser() async throws {
        try await Harness.run { harness in
            let email = "pat\(UInt32.random(in: 0...UInt32.max))@example.com"
            let first = try await harness.container().signedUp(email, password: "first password")
            let second = try await first.signedIn(email, password: "first password")
            #expect(second.status == 200)
            #expect(try await first.get("public", "users/caller").status == 200)
            #expect(try await second.session.get("public", "users/caller").status == 200)

            let tooShort = try await harness.send(.post, "/auth/1/\(first.container)/development/password?\(first.query)",
                                                  json: ["password": "first password", "newPassword": "short"])
            #expect(tooShort.status == 400 && tooShort.json["reason"]?.stringValue?.contains("at least 8") == true, "\(tooShort.json)")
            let wrong = try await harness.send(.post, "/auth/1/\(first.container)/development/password?\(first.query)",
                                               json: ["password": "not the password", "newPassword": "second password"])
            #expect(wrong.status == 401, "\(wrong.json)")
            // Nothing changed by the refusals.
            #expect(try await second.session.get("public", "users/caller").status == 200)

            let changed = try await harness.send(.post, "/auth/1/\(first.container)/development/password?\(first.query)",
                                                 json: ["password": "first password", "newPassword": "second password"])
            #expect(changed.status == 200, "\(changed.json)")
            for old in [first, second.session] {
                let refused = try await old.get("public", "users/caller")
                #expect(refused.status == 401 && refused.json["reason"]?.stringValue?.contains("password changed") == true, "\(refused.json)")
            }
            var renewed = first
            renewed.webAuthToken = changed.json["ckWebAuthToken"]?.stringValue
            #expect(try await renewed.get("public", "users/caller").json["userRecordName"] == .string(first.userRecordName ?? ""))
            #expect(try await first.signedIn(email, password: "first password").status == 401)
            #expect(try await first.signedIn(email, password: "second password").status == 200)
        }
    }

    @Test func sessionsEndWhenIdleAndAtTheirLifetime() async throws {
        try await Harness.run(server: { $0.sessionIdleTimeout = .seconds(2) }) { harness in
            let user = try await harness.container().signedUp()
            #expect(try await user.get("public", "users/caller").status == 200)
            try await Task.sleep(for: .milliseconds(3500))
            let idle = try await user.get("public", "users/caller")
            #expect(idle.status == 401 && idle.json["reason"]?.stringValue?.contains("without use") == true, "\(idle.json)")
        }
        try await Harness.run(server: { $0.sessionLifetime = .seconds(2) }) { harness in
            let user = try await harness.container().signedUp()
            // Used all the time, it still ends at its lifetime.
            let kept = try await Self.caller(user, until: 401, within: .seconds(6))
            #expect(kept.status == 401 && kept.json["reason"]?.stringValue?.contains("expired") == true, "\(kept.json)")
            #expect(kept.waited >= .milliseconds(900), "ended after \(kept.waited)")
        }
    }

    @Test func tokensAreBoundToTheirContainerAndEnvironment() async throws {
        try await Harness.run { harness in
            let name = "iCloud.com.example.Bound\(UInt32.random(in: 0...UInt32.max))"
            let development = try await harness.container(name).signedUp()
            let production = try await harness.admin(.post, "containers/\(name)/tokens", json: ["environment": "production", "name": "prod"])
            var crossed = development
            crossed = Session(harness: harness, container: name, environment: .production,
                              apiToken: production.json["apiToken"]?.stringValue ?? "", webAuthToken: development.webAuthToken)
            let refused = try await crossed.get("public", "users/caller")
            #expect(refused.status == 401 && refused.json["reason"]?.stringValue?.contains("other environment") == true, "\(refused.json)")
            // A forged or truncated token is refused the same way, never a 500.
            for token in [String((development.webAuthToken ?? "").dropLast(3)), "garbage", "a.b"] {
                var forged = development
                forged.webAuthToken = token
                let answer = try await forged.get("public", "users/caller")
                #expect(answer.status == 401 && answer.json.errorCode == "AUTHENTICATION_FAILED", "\(answer.json)")
            }
        }
    }

    @Test func failedSignInsAreThrottledPerAccount() async throws {
        try await Harness.run { harness in
            let email = "sam\(UInt32.random(in: 0...UInt32.max))@example.com"
            let user = try await harness.container().signedUp(email, password: "right password")
            for _ in 0..<10 {
                #expect(try await user.signedIn(email, password: "wrong password").status == 401)
            }
            // Past the limit even the right password waits, with a retry hint.
            let throttled = try await harness.send(.post, "/auth/1/\(user.container)/development/signin?ckAPIToken=\(user.apiToken)",
                                                   json: ["emailAddress": .string(email), "password": "right password"])
            #expect(throttled.status == 429 && throttled.json.errorCode == "THROTTLED", "\(throttled.json)")
            if case .int(let wait)? = throttled.json["retryAfter"] {
                #expect(wait > 0 && wait <= 900)
            } else {
                Issue.record("THROTTLED without retryAfter: \(throttled.json)")
            }
            // Another account is not affected.
            let other = "kim\(UInt32.random(in: 0...UInt32.max))@example.com"
            _ = try await user.signedUp(other, password: "right password")
            #expect(try await user.signedIn(other, password: "right password").status == 200)
        }
    }
}
