import Foundation
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The operator and team verbs of the built `stratus` binary against two real `stratus serve`
/// processes, with a real config folder: a superuser sets up a team with the admin token, a
/// developer signs in, works, is refused what their role does not allow, and signs out.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct TeamCommandsTests {
    /// Runs the CLI as someone with `config` for their config folder and no admin token.
    static func cli(_ arguments: [String], server: String, config: String, adminToken: String? = nil) async throws -> Subprocess.Output {
        var environment = ProcessInfo.processInfo.environment
        environment["STRATUS_SERVER"] = server
        environment["STRATUS_ADMIN_TOKEN"] = adminToken
        environment["XDG_CONFIG_HOME"] = config
        environment["HOME"] = config
        // No local admin-token file to fall back on.
        environment["STRATUS_DATA_DIR"] = config + "/no-data-dir"
        return try await Subprocess.runDetached([Programs.binary] + arguments, environment: environment)
    }

    @Test func aDeveloperSignsInWorksIsRefusedWhatTheirRoleDoesNotAllowAndSignsOut() async throws {
        try await withServeProcesses(2, adminToken: "teams-admin", name: "stratus-teams") { servers in
            let folder = try Programs.scratchFolder("stratus-team-cli")
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let (server, other) = (servers[0], servers[1])
            let root = folder + "/root", dev = folder + "/dev", viewer = folder + "/viewer"
            let passwordFile = folder + "/password"
            try "developer's password 1\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
            TestSecrets.record("developer's password 1")
            func run(_ arguments: [String], as config: String, admin: Bool = false) async throws -> Subprocess.Output {
                try await Self.cli(arguments, server: server, config: config, adminToken: admin ? "teams-admin" : nil)
            }
            // The superuser's set-up, with the admin token.
            for name in ["iCloud.com.example.TeamA", "iCloud.com.example.TeamB"] {
                #expect(try await run(["container", "create", name], as: root, admin: true).status == 0)
            }
            for (email, role) in [("dev@example.com", "developer"), ("viewer@example.com", "viewer")] {
                let added = try await run(["operator", "add", email, "--password-file", passwordFile], as: root, admin: true)
                #expect(added.status == 0, "\(added.text)")
                let joined = try await run(["team", "add", "--container", "iCloud.com.example.TeamA", "--operator", email, "--role", role], as: root, admin: true)
                #expect(joined.status == 0 && joined.text.contains("as \(role)"), "\(joined.text)")
            }
            // The server-wide log holds the accounts' creation, by whom.
            let serverLog = try await run(["operator", "audit"], as: root, admin: true)
            #expect(serverLog.status == 0 && serverLog.text.contains("admin token") && serverLog.text.contains("operator.add\tdev@example.com"), "\(serverLog.text)")
            let operators = try await run(["operator", "list"], as: root, admin: true)
            #expect(operators.text.contains("dev@example.com\tno\tactive\tiCloud.com.example.TeamA:developer"), "\(operators.text)")

            // Not signed in: the verbs say how to.
            let anonymous = try await run(["container", "list"], as: dev)
            #expect(anonymous.status != 0 && anonymous.text.contains("stratus login"), "\(anonymous.text)")

            // Signing in keeps the credential in the config folder, for the owner's eyes only.
            let login = try await run(["login", "--email", "dev@example.com", "--password-file", passwordFile], as: dev)
            #expect(login.status == 0 && login.text.contains("signed in to \(server) as dev@example.com"), "\(login.text)")
            let file = dev + "/stratus/credentials"
            let attributes = try FileManager.default.attributesOfItem(atPath: file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(attributes)")
            let stored = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            let credential = try #require(stored["servers"]?[server]?["credential"]?.stringValue, "\(stored)")
            TestSecrets.record(credential)
            #expect(credential.hasPrefix("sto_") && credential.count == 68)
            let whoami = try await run(["whoami"], as: dev)
            #expect(whoami.text.contains("dev@example.com") && whoami.text.contains("iCloud.com.example.TeamA\tdeveloper"), "\(whoami.text)")

            // Their containers only; development work done, production refused with the role named.
            let list = try await run(["container", "list", "--json"], as: dev)
            let names = (try? JSONParser.parse(list.text))?["containers"]?.arrayValue?.compactMap { $0["name"]?.stringValue }
            #expect(names == ["iCloud.com.example.TeamA"], "\(list.text)")
            let elsewhere = try await run(["schema", "export", "--container", "iCloud.com.example.TeamB"], as: dev)
            #expect(elsewhere.status != 0 && elsewhere.text.contains("NOT_FOUND: container 'iCloud.com.example.TeamB' does not exist"), "\(elsewhere.text)")
            let schemaFile = folder + "/schema.ckdb"
            try "DEFINE SCHEMA\n  RECORD TYPE Note (title STRING QUERYABLE, GRANT READ TO \"_world\");\n".write(toFile: schemaFile, atomically: true, encoding: .utf8)
            let imported = try await run(["schema", "import", "--container", "iCloud.com.example.TeamA", "--file", schemaFile, "--yes"], as: dev)
            #expect(imported.status == 0, "\(imported.text)")
            let deploy = try await run(["schema", "deploy", "--container", "iCloud.com.example.TeamA", "--yes"], as: dev)
            #expect(deploy.status != 0 && deploy.text.contains("ACCESS_DENIED") && deploy.text.contains("owner role"), "\(deploy.text)")
            let token = try await run(["token", "create", "--container", "iCloud.com.example.TeamA", "--environment", "development", "--json"], as: dev)
            #expect(token.status == 0, "\(token.text)")
            TestSecrets.record((try? JSONParser.parse(token.text))?["apiToken"]?.stringValue)
            let production = try await run(["token", "create", "--container", "iCloud.com.example.TeamA", "--environment", "production", "--any-origin"], as: dev)
            #expect(production.status != 0 && production.text.contains("ACCESS_DENIED"), "\(production.text)")
            let notSuperuser = try await run(["operator", "list"], as: dev)
            #expect(notSuperuser.status != 0 && notSuperuser.text.contains("superuser"), "\(notSuperuser.text)")

            // A viewer reads, and cannot make a token.
            #expect(try await run(["login", "--email", "viewer@example.com", "--password-file", passwordFile], as: viewer).status == 0)
            let viewerToken = try await run(["token", "create", "--container", "iCloud.com.example.TeamA", "--environment", "development"], as: viewer)
            #expect(viewerToken.status != 0 && viewerToken.text.contains("ACCESS_DENIED") && viewerToken.text.contains("developer role"), "\(viewerToken.text)")
            #expect(try await run(["schema", "export", "--container", "iCloud.com.example.TeamA"], as: viewer).status == 0)

            // The audit log names the operator and their credential, never a name the client claims.
            let audit = try await run(["audit", "--container", "iCloud.com.example.TeamA", "--json"], as: root, admin: true)
            let actors = Set((try? JSONParser.parse(audit.text))?["entries"]?.arrayValue?.compactMap { $0["actor"]?.stringValue } ?? [])
            let credentialID = stored["servers"]?[server]?["credentialID"]?.intValue ?? -1
            #expect(actors.contains("operator dev@example.com (credential \(credentialID))"), "\(actors)")

            // The credential works on the other server process too, until signed out: then on neither.
            let headers = ["Authorization": "Bearer \(credential)"]
            #expect(await Self.status(other + "/management/1/whoami", headers: headers) == 200)
            let logout = try await run(["logout"], as: dev)
            #expect(logout.status == 0 && logout.text.contains("signed out"), "\(logout.text)")
            #expect(await Self.status(other + "/management/1/whoami", headers: headers) == 401)
            let after = try await run(["container", "list"], as: dev)
            #expect(after.status != 0 && after.text.contains("stratus login"), "\(after.text)")
            let storedAfter = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: file))))
            #expect(storedAfter["servers"]?[server] == nil, "\(storedAfter)")

            // A removed team member finds nothing, on every process at once.
            #expect(try await run(["team", "remove", "--container", "iCloud.com.example.TeamA", "--operator", "viewer@example.com"], as: root, admin: true).status == 0)
            let viewerCredential = try JSONParser.parse(Array(try Data(contentsOf: URL(fileURLWithPath: viewer + "/stratus/credentials"))))["servers"]?[server]?["credential"]?.stringValue ?? ""
            #expect(await Self.status(other + "/management/1/containers/iCloud.com.example.TeamA/schema", headers: ["Authorization": "Bearer \(viewerCredential)"]) == 404)
            // Signed out everywhere by a superuser: the account stays, its credentials stop.
            let revoked = try await run(["operator", "revoke", "viewer@example.com"], as: root, admin: true)
            #expect(revoked.status == 0 && revoked.text.contains("revoked every credential of operator viewer@example.com"), "\(revoked.text)")
            #expect(await Self.status(other + "/management/1/whoami", headers: ["Authorization": "Bearer \(viewerCredential)"]) == 401)
            #expect(try await run(["operator", "audit"], as: root, admin: true).text.contains("operator.revoke\tviewer@example.com"))
            let help = try await run(["team", "--help"], as: root)
            #expect(help.text.contains("owner") && help.text.contains("set-role"), "\(help.text)")
        }
    }

    /// The HTTP status of a GET.
    static func status(_ url: String, headers: [String: String]) async -> Int {
        var request = URLRequest(url: URL(string: url)!)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        guard let (_, response) = try? await URLSession.shared.data(for: request) else { return 0 }
        return (response as? HTTPURLResponse)?.statusCode ?? 0
    }
}
