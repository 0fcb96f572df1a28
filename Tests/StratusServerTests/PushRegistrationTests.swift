import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// `tokens/register` through HTTP: an APNs device token (hex as iOS gives it, base64 as
/// CloudKit JS sends it) or a Web Push subscription is stored for the signed-in user, once; the
/// user's export lists their devices; they are forgotten when the user's sessions all end; bad
/// input is a clear BAD_REQUEST.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct PushRegistrationTests {
    @Test func devicesAreRegisteredOnceListedAndForgottenWhenTheUserIsSignedOutEverywhere() async throws {
        try await Harness.run { harness in
            let alice = try await harness.container().signedUp("alice@example.com")
            let user = try #require(alice.userRecordName)
            func register(_ body: JSON, prefix: String = "/device/1") async throws -> (status: Int, json: JSON) {
                try await harness.send(.post, "\(prefix)/\(alice.container)/development/tokens/register?\(alice.query)", json: body)
            }
            func devices() async throws -> [JSON] {
                let exported = try await harness.admin(.get, "containers/\(alice.container)/users/\(user)/export")
                #expect(exported.status == 200, "\(exported.json)")
                return exported.json["environments"]?.arrayValue?.first { $0["environment"] == "development" }?["pushDevices"]?.arrayValue ?? []
            }
            let bytes = (0..<32).map { UInt8($0 * 7 % 256) }
            let hex = bytes.map { String(format: "%02X", $0) }.joined()
            // Hex as iOS gives it; again, and as base64 (the same bytes), on both routes: one device.
            #expect(try await register(["apnsToken": .string(hex), "apnsEnvironment": "production"]).status == 200)
            #expect(try await register(["apnsToken": .string(hex), "apnsEnvironment": "production"]).status == 200)
            let base64 = try await register(["apnsToken": .string(Data(bytes).base64EncodedString()), "apnsEnvironment": "production"], prefix: "/database/1")
            #expect(base64.status == 200 && base64.json["apnsEnvironment"] == "production", "\(base64.json)")
            var listed = try await devices()
            #expect(listed.count == 1 && listed.first?["apnsToken"] == .string(hex.lowercased()) && listed.first?["apnsEnvironment"] == "production", "\(listed)")
            // A browser's Web Push subscription.
            let p256dh = Data([4] + (1...64).map { UInt8($0) }).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let auth = "AAECAwQFBgcICQoLDA0ODw"
            let web = try await register(["apnsToken": "unused", "webPushSubscription": ["endpoint": "https://push.example.com/send/abc", "keys": ["p256dh": .string(p256dh), "auth": .string(auth)]]])
            #expect(web.status == 200 && web.json["webPushSubscription"]?["endpoint"] == "https://push.example.com/send/abc", "\(web.json)")
            listed = try await devices()
            #expect(listed.count == 2 && listed.contains { $0["kind"] == "webPush" && $0["endpoint"] == "https://push.example.com/send/abc" && $0["auth"] == nil }, "\(listed)")
            // The web courier's own token (what tokens/create answered) registers no device.
            let created = try await harness.send(.post, "/device/1/\(alice.container)/development/tokens/create?\(alice.query)", json: [:])
            #expect(try await register(["apnsToken": created.json["apnsToken"] ?? .null]).status == 200)
            #expect(try await devices().count == 2)
            // Bad input says what is wrong, and stores nothing.
            for (body, words) in [
                (["apnsToken": "abc"] as JSON, "neither hex"),
                (["apnsToken": .string(String(repeating: "ab", count: 8))], "64 to 200 hex digits"),
                (["apnsToken": .string(Data([1, 2, 3]).base64EncodedString())], "32 to 100 bytes"),
                (["webPushSubscription": ["endpoint": "http://push.example.com/x", "keys": ["p256dh": .string(p256dh), "auth": .string(auth)]]], "https URL"),
                (["webPushSubscription": ["endpoint": "https://push.example.com/x", "keys": ["p256dh": "AAAA", "auth": .string(auth)]]], "P-256 public key"),
                (["webPushSubscription": ["endpoint": "https://push.example.com/x", "keys": ["p256dh": .string(p256dh), "auth": "AAAA"]]], "16-byte"),
                (["webPushSubscription": "https://push.example.com/x"], "https URL"),
            ] as [(JSON, String)] {
                let refused = try await register(body)
                #expect(refused.status == 400 && refused.json.errorCode == "BAD_REQUEST" && refused.json["reason"]?.stringValue?.contains(words) == true,
                        "\(body): \(refused.json)")
            }
            #expect(try await devices().count == 2)
            // Disabled (every session ends): nothing of theirs is pushed to any device.
            #expect(try await harness.admin(.post, "containers/\(alice.container)/users/\(user)/disable").status == 200)
            #expect(try await devices().isEmpty)
        }
    }

    /// A web app gets its container's VAPID public key (for `pushManager.subscribe`): a P-256
    /// point, the same from both routes and every call, another container's another.
    @Test func aWebAppGetsItsContainersVAPIDKey() async throws {
        try await Harness.run { harness in
            let a = try await harness.container().signedUp()
            let b = try await harness.container().signedUp()
            func key(_ session: Session, prefix: String = "/device/1") async throws -> String? {
                let answer = try await harness.send(.get, "\(prefix)/\(session.container)/development/webpush/key?\(session.query)")
                #expect(answer.status == 200, "\(answer.json)")
                return answer.json["vapidPublicKey"]?.stringValue
            }
            let first = try #require(try await key(a))
            let point = try #require(PushRegistration.base64URL(first))
            #expect(point.count == 65 && point.first == 4 && !first.contains("=") && !first.contains("+"), "\(first)")
            let again = try await key(a, prefix: "/database/1")
            let third = try await key(a)
            let other = try await key(b)
            #expect(again == first && third == first && other != first)
            // The server's own derivation is a key pair whose public half is what was answered.
            let derived = VAPIDKeys(secret: Array(repeating: 7, count: 32))
            #expect(derived.publicKey(containerID: ContainerID(1)) == derived.publicKey(containerID: ContainerID(1))
                    && derived.publicKey(containerID: ContainerID(1)) != derived.publicKey(containerID: ContainerID(2)))
            // Without an API token: refused; without a signed-in user: asked to sign in.
            let anonymous = try await harness.send(.get, "/device/1/\(a.container)/development/webpush/key")
            #expect(anonymous.status == 401 || anonymous.status == 403, "\(anonymous.status) \(anonymous.json)")
            let unsigned = try await harness.send(.get, "/device/1/\(a.container)/development/webpush/key?ckAPIToken=\(a.apiToken)")
            #expect(unsigned.status == 421 && unsigned.json.errorCode == "AUTHENTICATION_REQUIRED", "\(unsigned.status) \(unsigned.json)")
        }
    }

    /// An idle server's push sender waits: it looks at the queue table about once a second for
    /// retries and pushes a dead process left, not in a loop (as it once did, hundreds of times a
    /// second, after its first wait ended its wake-up stream).
    /// (Not on Citus: there the coordinator's statistics showed no reads of the table, nor of its
    /// shard, while the server claimed from it.)
    @Test(.enabled(if: TestCluster.citusPorts == nil)) func anIdleServerLooksAtThePushQueueAboutOnceASecond() async throws {
        try await Harness.run { harness in
            func scans() async throws -> Int64 {
                try await harness.database.withConnection { connection in
                    let rows = try await connection.rows("""
                        SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'push_outbox'
                        """, logger: TestCluster.logger)
                    return try rows.first?.decode(Int64.self) ?? 0
                }
            }
            // Past the sender's first wait, then four seconds (statistics reach the view within a second).
            try await Task.sleep(for: .seconds(2))
            let before = try await scans()
            try await Task.sleep(for: .seconds(4))
            let after = try await scans()
            #expect(after - before >= 1 && after - before <= 12, "the push queue was read \(after - before) times in 4 idle seconds")
        }
    }
}
