import Foundation
import PostgresNIO
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The built `stratus` binary: `serve` with no database configured (embedded PostgreSQL, as
/// `Deploy/run.sh` runs it), the admin CLI against it, and the README's curl walk-through.
@Suite(.serialized, .timeLimit(.minutes(TestTime.minutes(10)))) struct EndToEndTests {
    @Test func serveWithEmbeddedPostgresCLIAndWalkthrough() async throws {
        let folder = try Programs.scratchFolder("stratus-e2e")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let port = Programs.freePort()
        let server = "http://127.0.0.1:\(port)"
        var environment = Programs.serveEnvironment(adminToken: "e2e-admin")
        environment["STRATUS_DATABASE_URL"] = nil
        let log = folder + "/serve.log"
        defer { TestOutput.keepServerLog(log, name: "serve") }
        // An installed copy of the binary, started from a folder with no Migrations/ anywhere
        // above it: it carries its migrations (and finds its data folder relative to there).
        try FileManager.default.createDirectory(atPath: folder + "/bin", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Programs.binary, toPath: folder + "/bin/stratus")
        let pid = try Subprocess.spawn(["/bin/sh", "-c", "cd \"$0\" && exec ./bin/stratus serve --port \"$1\" --data-dir state", folder, String(port)],
                                       outputPath: log, environment: environment)
        var stopped = false
        defer { if !stopped { Subprocess.killAndReap(pid) } }

        // /health answers once the embedded cluster is up and migrated
        let health = try await Programs.waitForHealth(server)
        let serveLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(health?.0 == 200, "server log: \(serveLog.suffix(2000))")
        #expect(health?.1.contains("\"status\":\"ok\"") == true)
        // The console comes with it, its page, style sheet and script compiled in.
        let console = await Programs.get(server + "/console/signin")
        #expect(console?.0 == 200 && console?.1.contains("autocomplete=\"current-password\"") == true, "\(String(describing: console))")
        #expect(await Programs.get(server + "/console/assets/console.js")?.1.contains("index-build") == true)
        #expect(await Programs.get(server + "/console/assets/console.css")?.0 == 200)

        // CLI verbs
        let create = try await Programs.cli(["container", "create", "iCloud.com.example.E2E"], server: server)
        #expect(create.status == 0, "\(create.text)")
        let again = try await Programs.cli(["container", "create", "iCloud.com.example.E2E"], server: server)
        #expect(again.status != 0)
        #expect(again.text.contains("EXISTS"))
        #expect(again.text.split(separator: "\n").count == 1, "one clear line: \(again.text)")
        let list = try await Programs.cli(["container", "list", "--json"], server: server)
        #expect(list.status == 0)
        #expect((try? JSONParser.parse(list.text))?["containers"]?.arrayValue?.first?["name"] == "iCloud.com.example.E2E")
        let token = try await Programs.cli(["token", "create", "--container", "iCloud.com.example.E2E", "--environment", "development", "--name", "web", "--json"], server: server)
        #expect(token.status == 0, "\(token.text)")
        let apiToken = (try? JSONParser.parse(token.text))?["apiToken"]?.stringValue ?? ""
        TestSecrets.record(apiToken)
        #expect(apiToken.utf8.count == 64 && apiToken.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "CloudKit's form: \(apiToken)")
        let tokens = try await Programs.cli(["token", "list", "--container", "iCloud.com.example.E2E", "--json"], server: server)
        #expect(!tokens.text.contains(apiToken), "listings never print the secret")
        let id = (try? JSONParser.parse(tokens.text))?["tokens"]?.arrayValue?.first?["id"]
        // Every container's tokens (no --container): a PostgreSQL type error once made this a 500.
        let everyToken = try await Programs.cli(["token", "list", "--json"], server: server)
        #expect(everyToken.status == 0, "\(everyToken.text)")
        #expect((try? JSONParser.parse(everyToken.text))?["tokens"]?.arrayValue?.first?["id"] == id, "\(everyToken.text)")
        let badEnvironment = try await Programs.cli(["token", "create", "--container", "iCloud.com.example.E2E", "--environment", "staging"], server: server)
        #expect(badEnvironment.status != 0)
        #expect(badEnvironment.text.contains("development"))
        let wrongAdmin = try await Programs.cli(["container", "list"], server: server, token: "wrong")
        #expect(wrongAdmin.status != 0)
        #expect(wrongAdmin.text.contains("AUTHENTICATION_FAILED"))
        let unreachable = try await Programs.cli(["container", "list"], server: "http://127.0.0.1:1")
        #expect(unreachable.status != 0)
        #expect(unreachable.text.contains("cannot reach"))
        let revoke = try await Programs.cli(["token", "revoke", "--container", "iCloud.com.example.E2E", id.map { JSONWriter.string($0) } ?? "0"], server: server)
        #expect(revoke.status == 0, "\(revoke.text)")
        let help = try await Programs.cli(["token", "create", "--help"], server: server)
        #expect(help.text.contains("--environment"))
        // A production token names its app's origins, or says --any-origin: warned about, and flagged in the list.
        let unnamed = try await Programs.cli(["token", "create", "--container", "iCloud.com.example.E2E", "--environment", "production"], server: server)
        #expect(unnamed.status != 0 && unnamed.text.contains("--allowed-origin") && unnamed.text.contains("--any-origin"), "\(unnamed.text)")
        let anyOrigin = try await Programs.cli(["token", "create", "--container", "iCloud.com.example.E2E", "--environment", "production", "--any-origin"],
                                           server: server)
        #expect(anyOrigin.status == 0 && anyOrigin.text.contains("warning: this production token may be used from any web page"), "\(anyOrigin.text)")
        TestSecrets.record(anyOrigin.text.split(separator: "\n").first { $0.count == 64 }.map(String.init))
        let flagged = try await Programs.cli(["token", "list", "--container", "iCloud.com.example.E2E"], server: server)
        #expect(flagged.text.contains("production\tweb") == false && flagged.text.contains("active\tany (!)")
                && flagged.text.contains("1 active production token(s) name no origins"), "\(flagged.text)")
        // Sign-up limits are set like the other limits, and usage counts sign-ups.
        let signupLimit = try await Programs.cli(["quota", "set", "--container", "iCloud.com.example.E2E", "--environment", "production",
                                              "--signups-per-address-per-hour", "3", "--signups-per-hour", "1_000"], server: server)
        #expect(signupLimit.status == 0 && signupLimit.text.contains("signupsPerAddressPerHour\t3\tset")
                && signupLimit.text.contains("signupsPerHour\t1000\tset") && signupLimit.text.contains("signupsPerAddressPerHour") , "\(signupLimit.text)")
        let usageTable = try await Programs.cli(["usage", "--container", "iCloud.com.example.E2E", "--environment", "production"], server: server)
        #expect(usageTable.status == 0 && usageTable.text.contains("SIGN-UPS\tSIGN-UPS THROTTLED"), "\(usageTable.text)")
        // The audit log names the credential the CLI used (here the admin token) and holds the token's creation and revocation.
        let audit = try await Programs.cli(["audit", "--container", "iCloud.com.example.E2E", "--json"], server: server)
        #expect(audit.status == 0, "\(audit.text)")
        let auditActions = ((try? JSONParser.parse(Array(audit.text.utf8)))?["entries"]?.arrayValue ?? []).compactMap { $0["action"]?.stringValue }
        #expect(auditActions == ["container.create", "token.create", "token.revoke", "token.create", "quota.set"], "\(audit.text)")
        #expect(audit.text.contains(#""actor":"admin token""#), "\(audit.text)")
        let badSince = try await Programs.cli(["audit", "--container", "iCloud.com.example.E2E", "--since", "yesterday"], server: server)
        #expect(badSince.status != 0 && badSince.text.contains("ISO 8601"), "\(badSince.text)")
        let users = try await Programs.cli(["user", "list", "--container", "iCloud.com.example.E2E"], server: server)
        #expect(users.status == 0 && users.text.contains("no users yet"), "\(users.text)")
        let unknownUser = try await Programs.cli(["user", "disable", "--container", "iCloud.com.example.E2E", "--user", "nobody@example.com"], server: server)
        #expect(unknownUser.status != 0 && unknownUser.text.contains("NOT_FOUND"), "\(unknownUser.text)")

        // The README walk-through, verbatim but for the port.
        let readme = try String(contentsOf: TestCluster.repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let section = readme.components(separatedBy: "## Walk-through with curl")[1]
        let blocks = section.components(separatedBy: "```sh\n").dropFirst().map { $0.components(separatedBy: "```")[0] }
        #expect(blocks.count >= 2)
        let script = "set -e\n" + blocks[1].replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)")
            .replacingOccurrences(of: "dev-admin-token", with: "e2e-admin")
        let walkthrough = try await Subprocess.runDetached(["/bin/bash", "-c", script], environment: environment)
        #expect(walkthrough.status == 0, "\(walkthrough.text)")
        #expect(walkthrough.text.contains("\"recordName\":\"note-1\""), "\(walkthrough.text)")
        #expect(walkthrough.text.contains("\"syncToken\""), "\(walkthrough.text)")
        #expect(!walkthrough.text.contains("serverErrorCode"), "\(walkthrough.text)")

        // Custom roles through the CLI: declared in the schema, given to a user who signed up.
        let roles = "iCloud.com.example.Roles"
        #expect(try await Programs.cli(["container", "create", roles], server: server).status == 0)
        let rolesToken = try await Programs.cli(["token", "create", "--container", roles, "--environment", "development", "--json"], server: server)
        let rolesAPIToken = (try? JSONParser.parse(rolesToken.text))?["apiToken"]?.stringValue ?? ""
        TestSecrets.record(rolesAPIToken)
        TestSecrets.record("correct horse")
        let (signUpStatus, signedUp) = try await Programs.post("\(server)/auth/1/\(roles)/development/signup?ckAPIToken=\(rolesAPIToken)",
                                                           #"{"emailAddress":"ed@example.com","password":"correct horse"}"#)
        #expect(signUpStatus == 200, "\(signedUp)")
        TestSecrets.record(signedUp["ckWebAuthToken"]?.stringValue)
        let schemaFile = folder + "/roles.ckdb"
        try "DEFINE SCHEMA\n  CREATE ROLE Editor;\n  RECORD TYPE Article (title STRING, GRANT READ, WRITE TO Editor);\n"
            .write(toFile: schemaFile, atomically: true, encoding: .utf8)
        #expect(try await Programs.cli(["schema", "import", "--container", roles, "--file", schemaFile, "--yes"], server: server).status == 0)
        let assign = try await Programs.cli(["role", "assign", "--container", roles, "--role", "Editor", "--user", "ed@example.com"], server: server)
        #expect(assign.status == 0 && assign.text.contains("now holds role Editor"), "\(assign.text)")
        // An email address in a path (percent-encoded by the CLI) names the user.
        let shown = try await Programs.cli(["user", "show", "--container", roles, "--user", "ed@example.com"], server: server)
        #expect(shown.status == 0 && shown.text.contains("ed@example.com\tactive"), "\(shown.text)")
        let roleMembers = try await Programs.cli(["role", "members", "--container", roles, "--role", "Editor", "--json"], server: server)
        #expect((try? JSONParser.parse(roleMembers.text))?["members"]?.arrayValue?.first?["emailAddress"] == "ed@example.com", "\(roleMembers.text)")
        let roleList = try await Programs.cli(["role", "list", "--container", roles], server: server)
        #expect(roleList.status == 0 && roleList.text.contains("Editor\t1"), "\(roleList.text)")
        let unassign = try await Programs.cli(["role", "unassign", "--container", roles, "--role", "Editor", "--user", "ed@example.com"], server: server)
        #expect(unassign.status == 0 && unassign.text.contains("no longer holds role Editor"), "\(unassign.text)")
        let undeclared = try await Programs.cli(["role", "assign", "--container", roles, "--role", "Writer", "--user", "ed@example.com"], server: server)
        #expect(undeclared.status != 0 && undeclared.text.contains("no role 'Writer'"), "\(undeclared.text)")

        // Server-to-server keys through the CLI, and a signed request to the served binary.
        let signer = Signer()
        let keyFile = folder + "/pub.pem"
        try signer.publicKeyPEM.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let added = try await Programs.cli(["key", "add", "--container", roles, "--environment", "development", "--public-key-file", keyFile, "--json"], server: server)
        let keyID = (try? JSONParser.parse(added.text))?["keyID"]?.stringValue ?? ""
        #expect(added.status == 0 && keyID.count == 64, "\(added.text)")
        let signedPath = "/database/1/\(roles)/development/public/users/caller"
        var signed = URLRequest(url: URL(string: server + signedPath)!)
        for field in Signer(keyID: keyID, privateKey: signer.privateKey).headers(signedPath: signedPath, body: "") {
            signed.setValue(field.value, forHTTPHeaderField: field.name.rawName)
        }
        let (_, signedResponse) = try await URLSession.shared.data(for: signed)
        #expect((signedResponse as? HTTPURLResponse)?.statusCode == 200)
        let keyList = try await Programs.cli(["key", "list", "--container", roles], server: server)
        #expect(keyList.status == 0 && keyList.text.contains("\(keyID)\tdevelopment"), "\(keyList.text)")
        let keyRevoke = try await Programs.cli(["key", "revoke", "--container", roles, String(keyID.prefix(10))], server: server)
        #expect(keyRevoke.status == 0 && keyRevoke.text.contains("revoked key \(keyID)"), "\(keyRevoke.text)")
        let badKey = try await Programs.cli(["key", "add", "--container", roles, "--environment", "development", "--public-key-file", schemaFile], server: server)
        #expect(badKey.status != 0 && badKey.text.contains("P-256"), "\(badKey.text)")

        // SIGTERM stops the service and its embedded cluster
        kill(pid, SIGTERM)
        stopped = try await Subprocess.waitForExit(pid, within: .seconds(60)) != nil
        #expect(stopped, "SIGTERM did not stop the server within 60 s; log: \(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(1500))")
        let pidFile = try FileManager.default.contentsOfDirectory(atPath: folder + "/state").contains("pg")
            ? FileManager.default.fileExists(atPath: folder + "/state/pg/postmaster.pid") : false
        #expect(!pidFile, "the embedded PostgreSQL is still running")
        let clusterLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(clusterLog.contains("embedded PostgreSQL stopped"), "\(clusterLog.suffix(1500))")
    }

    /// The served binary bounds what a slow client or a held lock can cost it: a connection that
    /// stops sending in the middle of its request head is closed after `--idle-timeout`; a write
    /// behind a lock another session holds is answered TRY_AGAIN_LATER after `--lock-timeout`;
    /// SIGTERM ends the process within `--shutdown-timeout` while a client still trickles a body.
    @Test func servedBinaryBoundsSlowClientsLockWaitsAndShutdown() async throws {
        let configuration = try await TestCluster.shared.newDatabase()
        let folder = try Programs.scratchFolder("stratus-bounds")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let port = Programs.freePort()
        let server = "http://127.0.0.1:\(port)"
        let environment = Programs.serveEnvironment(adminToken: "bounds-admin")
        let password = configuration.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
        let url = "postgres://\(configuration.username)\(password)@\(configuration.host):\(configuration.port)/\(configuration.database)"
        let log = folder + "/serve.log"
        defer { TestOutput.keepServerLog(log, name: "serve") }
        let pid = try Subprocess.spawn([Programs.binary, "serve", "--port", String(port), "--database-url", url, "--bcrypt-cost", "4",
                                        "--idle-timeout", "2", "--lock-timeout", "1", "--shutdown-timeout", "3"],
                                       outputPath: log, environment: environment)
        var exited = false
        defer { if !exited { Subprocess.killAndReap(pid) } }
        let health = try await Programs.waitForHealth(server)
        try #require(health?.0 == 200, "server log: \(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(2000))")

        // 1. A request head that never ends: the server closes the connection (cat sees EOF; a
        // timeout would exit 124).
        let slowHead = try await Subprocess.runDetached(["/bin/bash", "-c", """
            exec 3<>/dev/tcp/127.0.0.1/\(port)
            printf 'POST /health HTTP/1.1\\r\\nHost: x\\r\\n' >&3
            start=$(date +%s); timeout 20 cat <&3 >/dev/null; echo "rc=$? after=$(( $(date +%s) - start ))"
            """])
        #expect(slowHead.text.contains("rc=0"), "the half-sent request was not cut off: \(slowHead.text)")
        let after = Int(slowHead.text.components(separatedBy: "after=").last?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? 99
        #expect(after >= 1 && after <= 10, "closed after \(after) s with --idle-timeout 2")

        // 2. A write whose zone another session keeps locked: TRY_AGAIN_LATER, not a hang.
        let container = "iCloud.com.example.Bounds"
        let (apiToken, userToken) = try await serveTenant(server, adminToken: "bounds-admin", container: container)
        let modify = server + "/database/1/\(container)/development/private/records/modify?ckAPIToken=\(apiToken)&ckWebAuthToken=\(userToken)"
        @Sendable func create(_ name: String) async throws -> (Int, JSON) {
            try await Programs.post(modify, #"{"operations":[{"operationType":"create","record":{"recordType":"Note","recordName":"\#(name)","fields":{"title":{"value":"x"}}}}]}"#)
        }
        #expect(try await create("first").0 == 200)
        try await withDatabase(configuration, maximumConnections: 1) { db in
            try await db.withConnection { connection in
                try await connection.query("BEGIN", logger: TestCluster.logger)
                try await connection.query("SELECT zone_id FROM zones FOR UPDATE", logger: TestCluster.logger)
                let started = ContinuousClock.now
                let blocked = try await create("second")
                let waited = ContinuousClock.now - started
                try await connection.query("ROLLBACK", logger: TestCluster.logger)
                #expect(blocked.0 == 503, "\(blocked)")
                #expect(blocked.1["serverErrorCode"] == "TRY_AGAIN_LATER")
                #expect(blocked.1["reason"]?.stringValue?.contains("locked") == true, "\(blocked.1)")
                #expect(waited >= .milliseconds(900) && waited < .seconds(10), "answered after \(waited) with --lock-timeout 1")
            }
        }
        #expect(try await create("second").0 == 200, "the lock is gone, the write goes through")

        // 3. SIGTERM while a client trickles a body a byte every half second (which keeps the
        // connection from ever going idle): the process still ends soon after the deadline.
        let trickle = try Subprocess.spawn(["/bin/bash", "-c", """
            exec 3<>/dev/tcp/127.0.0.1/\(port)
            printf 'POST /management/1/containers HTTP/1.1\\r\\nHost: x\\r\\nAuthorization: Bearer bounds-admin\\r\\nContent-Length: 400\\r\\n\\r\\n' >&3
            for i in $(seq 1 400); do printf 'x' >&3 || exit 0; sleep 0.5; done
            """], outputPath: folder + "/trickle.log")
        defer { Subprocess.killAndReap(trickle) }
        try await Task.sleep(for: .seconds(2))
        let stopping = ContinuousClock.now
        kill(pid, SIGTERM)
        exited = try await Subprocess.waitForExit(pid, within: .seconds(40)) != nil
        let took = ContinuousClock.now - stopping
        let serveLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(exited, "SIGTERM did not stop the server within 40 s; log: \(serveLog.suffix(1500))")
        #expect(took >= .seconds(2), "shutdown did not wait for the request in flight (\(took))")
    }

    /// A request that ignores the shutdown's cancellation (a write behind a lock another session
    /// holds, with lock and statement timeouts off: PostgreSQL goes on waiting) cannot hold the
    /// process: 5 s past `--shutdown-timeout`, or at a second SIGTERM, `stratus serve` logs what
    /// still runs and which requests were in flight, and exits with status 1. The in-flight gauge
    /// shows the request while it waits.
    @Test func shutdownGivesUpOnWorkThatOutlivesItsDeadline() async throws {
        let configuration = try await TestCluster.shared.newDatabase()
        let folder = try Programs.scratchFolder("stratus-watchdog")
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let environment = Programs.serveEnvironment(adminToken: "watchdog-admin")
        let password = configuration.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
        let url = "postgres://\(configuration.username)\(password)@\(configuration.host):\(configuration.port)/\(configuration.database)"
        let container = "iCloud.com.example.Watchdog"

        /// Starts a server, blocks a write in it behind the held lock, sends `signals` SIGTERMs a
        /// second apart; returns how long it took to exit after the first, its exit status and its log.
        @Sendable func stop(name: String, shutdownTimeout: Int, signals: Int,
                  held connection: PostgresConnection, tenant: (String, String)?) async throws -> (Duration, Int32?, String, (String, String)) {
            let port = Programs.freePort()
            let server = "http://127.0.0.1:\(port)"
            let log = folder + "/\(name).log"
            defer { TestOutput.keepServerLog(log, name: name) }
            let pid = try Subprocess.spawn([Programs.binary, "serve", "--port", String(port), "--database-url", url, "--bcrypt-cost", "4",
                                            "--lock-timeout", "0", "--statement-timeout", "0", "--shutdown-timeout", String(shutdownTimeout)],
                                           outputPath: log, environment: environment)
            var exited = false
            defer { if !exited { Subprocess.killAndReap(pid) } }
            let health = try await Programs.waitForHealth(server)
            try #require(health?.0 == 200, "server log: \(((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(2000))")
            var tenant = tenant
            if tenant == nil {
                tenant = try await serveTenant(server, adminToken: "watchdog-admin", container: container)
            }
            let (apiToken, userToken) = try #require(tenant)
            let modify = server + "/database/1/\(container)/development/private/records/modify?ckAPIToken=\(apiToken)&ckWebAuthToken=\(userToken)"
            let body = #"{"operations":[{"operationType":"create","record":{"recordType":"Note","fields":{"title":{"value":"x"}}}}]}"#
            #expect(try await Programs.post(modify, body).0 == 200, "a write before the lock")
            try await connection.query("BEGIN", logger: TestCluster.logger)
            try await connection.query("SELECT zone_id FROM zones FOR UPDATE", logger: TestCluster.logger)
            let blocked = Task { try? await Programs.post(modify, body) }
            // The gauge shows the write waiting (the scrape counts itself too).
            var gauge = ""
            for _ in 0..<100 {
                var request = URLRequest(url: URL(string: server + "/metrics")!)
                request.setValue("Bearer watchdog-admin", forHTTPHeaderField: "Authorization")
                let (data, _) = try await URLSession.shared.data(for: request)
                gauge = String(decoding: data, as: UTF8.self).split(separator: "\n").filter { $0.hasPrefix("stratus_requests_in_flight{") }.joined(separator: "; ")
                if gauge.contains(#"family="records/modify"} 1"#) { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(gauge.contains(#"stratus_requests_in_flight{family="records/modify"} 1"#), "\(gauge)")
            #expect(gauge.contains(#"stratus_requests_in_flight{family="metrics"} 1"#), "\(gauge)")
            let stopping = ContinuousClock.now
            kill(pid, SIGTERM)
            for _ in 1..<signals {
                try await Task.sleep(for: .seconds(1))
                kill(pid, SIGTERM)
            }
            let status = try await Subprocess.waitForExit(pid, within: .seconds(60))
            exited = status != nil
            let took = ContinuousClock.now - stopping
            try await connection.query("ROLLBACK", logger: TestCluster.logger)
            let answer = await blocked.value
            #expect(answer == nil || answer?.0 != 200, "the blocked write was never answered as done: \(String(describing: answer))")
            return (took, status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "", (apiToken, userToken))
        }

        try await withDatabase(configuration, maximumConnections: 1) { db in
            try await db.withConnection { connection in
                // The deadline: 1 s for the requests, then 5 s more, then the exit.
                let (took, status, log, tenant) = try await stop(name: "watchdog-deadline", shutdownTimeout: 1, signals: 1,
                                                                 held: connection, tenant: nil)
                #expect(status.map { ($0 >> 8) & 0xff } == 1, "exit status \(String(describing: status)); log: \(log.suffix(1500))")
                #expect(took >= .seconds(6), "gave up after \(took), before --shutdown-timeout 1 plus 5 s")
                #expect(log.contains("the shutdown ran 5 s past --shutdown-timeout (1 s)"), "\(log.suffix(1500))")
                #expect(log.contains("HTTP server"), "\(log.suffix(1500))")
                #expect(log.contains("records/modify 1"), "\(log.suffix(1500))")

                // A second SIGTERM: the process gives up at once, long before its 60 s.
                let (second, secondStatus, secondLog, _) = try await stop(name: "watchdog-second", shutdownTimeout: 60, signals: 2,
                                                                         held: connection, tenant: tenant)
                #expect(secondStatus.map { ($0 >> 8) & 0xff } == 1, "exit status \(String(describing: secondStatus)); log: \(secondLog.suffix(1500))")
                #expect(second < .seconds(30), "took \(second) after the first SIGTERM")
                #expect(secondLog.contains("a second SIGTERM came during the shutdown"), "\(secondLog.suffix(1500))")
                #expect(secondLog.contains("records/modify 1"), "\(secondLog.suffix(1500))")
            }
        }
    }
}
