import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// The operator credentials `stratus login` keeps: one per server, in
/// `$XDG_CONFIG_HOME/stratus/credentials` (`~/.config/stratus/credentials` when unset), a JSON
/// file only its owner may read (mode 0600).
struct CredentialStore {
    struct Entry {
        var credential: String
        var email: String
        var credentialID: Int64
    }

    var path: String

    /// The user's store.
    static var standard: CredentialStore {
        let environment = ProcessInfo.processInfo.environment
        let config = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? (environment["HOME"] ?? NSHomeDirectory()) + "/.config"
        return CredentialStore(path: config + "/stratus/credentials")
    }

    /// A server's key in the file: its URL without a trailing slash.
    static func key(_ server: URL) -> String {
        server.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
    }

    func read() -> [String: JSON] {
        guard let data = FileManager.default.contents(atPath: path), let json = try? JSONParser.parse(Array(data)) else { return [:] }
        return json["servers"]?.objectValue ?? [:]
    }

    func entry(for server: URL) -> Entry? {
        guard let json = read()[Self.key(server)], let credential = json["credential"]?.stringValue else { return nil }
        return Entry(credential: credential, email: json["emailAddress"]?.stringValue ?? "", credentialID: json["credentialID"]?.intValue ?? 0)
    }

    /// Saves (or, with `nil`, forgets) the server's credential. The file is written whole, to a
    /// new file made readable by its owner only and renamed over the old one.
    func save(_ entry: Entry?, for server: URL) throws {
        var servers = read()
        servers[Self.key(server)] = entry.map { ["credential": .string($0.credential), "emailAddress": .string($0.email), "credentialID": .int($0.credentialID)] }
        let folder = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let temporary = path + ".tmp-\(getpid())"
            let bytes = Data(JSONWriter.bytes(["servers": .object(servers)]) + [0x0A])
            guard FileManager.default.createFile(atPath: temporary, contents: bytes, attributes: [.posixPermissions: 0o600]) else {
                throw CLIError("cannot write \(temporary)")
            }
            guard rename(temporary, path) == 0 else { throw CLIError("cannot replace \(path): \(String(cString: strerror(errno)))") }
        } catch let error as CLIError {
            throw error
        } catch {
            throw CLIError("cannot write the credentials file \(path): \(error.localizedDescription)")
        }
    }
}

/// A password: from `file` (its first line), else from the terminal with echo off.
func readPassword(file: String?, prompt: String, confirm: Bool = false) throws -> String {
    if let file {
        guard let data = FileManager.default.contents(atPath: file) else { throw CLIError("cannot read the password file \(file)") }
        let text = String(decoding: data, as: UTF8.self)
        return String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
            .trimmingCharacters(in: CharacterSet(charactersIn: "\r"))
    }
    guard isatty(STDIN_FILENO) != 0 else {
        throw ValidationError("no terminal to read the password from: give --password-file FILE")
    }
    func ask(_ text: String) -> String {
        FileHandle.standardError.write(Data(text.utf8))
        var saved = termios()
        tcgetattr(STDIN_FILENO, &saved)
        var silent = saved
        silent.c_lflag &= ~tcflag_t(ECHO)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &silent)
        defer {
            tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved)
            FileHandle.standardError.write(Data("\n".utf8))
        }
        return readLine(strippingNewline: true) ?? ""
    }
    let password = ask(prompt)
    if confirm, ask("Again: ") != password { throw CLIError("the two passwords differ; nothing was changed") }
    return password
}

/// The server URL of `--server` (or STRATUS_SERVER, default http://127.0.0.1:8080).
func serverURL(_ flag: String?) throws -> URL {
    let base = setting(flag, "STRATUS_SERVER", default: "http://127.0.0.1:8080")!
    guard let url = URL(string: base), url.scheme == "http" || url.scheme == "https", url.host != nil else {
        throw ValidationError("--server must be an http(s) URL, e.g. http://127.0.0.1:8080")
    }
    return url
}

struct LoginCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login", abstract: "Sign in as an operator; the admin verbs then act as you.",
        discussion: Help.text("""
            Exchanges your email address and password for an operator credential (a revocable key the
            server shows once) and keeps it in $XDG_CONFIG_HOME/stratus/credentials (~/.config/stratus/
            credentials), readable by you only, one per server. 'stratus logout' revokes it.

            Examples:
              stratus login --email ada@example.com
              stratus login --server https://stratus.example.com --email ada@example.com --password-file pw.txt
            """))
    @Option(help: "Server URL (env STRATUS_SERVER, default http://127.0.0.1:8080).") var server: String?
    @Option(help: "Your operator email address (asked for when not given).") var email: String?
    @Option(help: "Read the password from this file's first line instead of the terminal.") var passwordFile: String?
    @Option(help: "A name for this sign-in, shown to superusers (default: 'stratus login on HOST').") var name: String?
    @Flag(help: "Print one JSON document instead of text.") var json = false

    func run() async throws {
        try await runAdmin {
            let url = try serverURL(server)
            var address = email
            if address == nil {
                guard isatty(STDIN_FILENO) != 0 else { throw ValidationError("give --email (there is no terminal to ask on)") }
                FileHandle.standardError.write(Data("Email: ".utf8))
                address = readLine(strippingNewline: true)
            }
            guard let address, !address.isEmpty else { throw ValidationError("give your operator email address (--email)") }
            let password = try readPassword(file: passwordFile, prompt: "Password for \(address): ")
            let client = ManagementClient(base: url, token: nil)
            let response = try await client.send("POST", "management/1/login", body: [
                "emailAddress": .string(address), "password": .string(password),
                "name": .string(name ?? "stratus login on \(ProcessInfo.processInfo.hostName)"),
            ])
            guard let credential = response["credential"]?.stringValue else { throw CLIError("the server answered without a credential") }
            let store = CredentialStore.standard
            let email = response["operator"]?["emailAddress"]?.stringValue ?? address
            try store.save(.init(credential: credential, email: email, credentialID: response["credentialID"]?.intValue ?? 0), for: url)
            let superuser = response["operator"]?["superuser"] == true
            print(self.json ? JSONWriter.string(["emailAddress": .string(email), "superuser": .bool(superuser), "credentialsFile": .string(store.path)])
                  : "signed in to \(CredentialStore.key(url)) as \(email)\(superuser ? " (superuser)" : ""); the credential is in \(store.path)")
        }
    }
}

struct LogoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout", abstract: "Sign out: revoke this server's stored operator credential and forget it.")
    @Option(help: "Server URL (env STRATUS_SERVER, default http://127.0.0.1:8080).") var server: String?

    func run() async throws {
        try await runAdmin {
            let url = try serverURL(server)
            let store = CredentialStore.standard
            guard let entry = store.entry(for: url) else {
                print("not signed in to \(CredentialStore.key(url))")
                return
            }
            var note = ""
            do {
                _ = try await ManagementClient(base: url, token: entry.credential).send("POST", "management/1/logout")
            } catch let error as CLIError where error.description.hasPrefix("AUTHENTICATION_FAILED") {
                // Revoked already (a password change, a disabled account): forgetting it is all that is left.
                note = " (the server had revoked it already)"
            }
            try store.save(nil, for: url)
            print("signed out of \(CredentialStore.key(url)) as \(entry.email)\(note)")
        }
    }
}

struct WhoamiCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "whoami", abstract: "Who the admin verbs act as: the operator (or the admin token) and their role in each container.")
    @OptionGroup var options: ClientOptions

    func run() async throws {
        try await runAdmin {
            let response = try await options.client.send("GET", "management/1/whoami")
            options.output(response) {
                guard let email = response["operator"]?["emailAddress"]?.stringValue else {
                    return "the admin token (a superuser: every container)"
                }
                let superuser = response["superuser"] == true
                let rows = (response["containers"]?.arrayValue ?? []).map { "  \($0["name"]?.stringValue ?? "")\t\($0["role"]?.stringValue ?? "")" }
                var lines = ["\(email)\(superuser ? " (superuser: every container)" : "")"]
                lines += rows.isEmpty ? (superuser ? [] : ["  in no container's team yet: an owner adds you with 'stratus team add'"]) : rows
                return lines.joined(separator: "\n")
            }
        }
    }
}

struct OperatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "operator", abstract: "Add, list, remove, disable, enable and sign out operators, and set their passwords (superusers).",
        discussion: Help.text("""
            Operators are the people who administer containers. A superuser administers every container;
            anyone else only the containers whose team they are in ('stratus team'). The admin token acts
            as a superuser: add one with --superuser, sign in as them ('stratus login'), and the admin
            token need not be used again.

            Examples:
              stratus operator add ada@example.com --superuser
              stratus operator add bob@example.com --password-file bob.txt
              stratus operator list
            """),
        subcommands: [Add.self, List.self, Remove.self, Passwd.self, Disable.self, Enable.self, Revoke.self, Audit.self])

    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The server-wide audit log: operators added, removed, disabled, enabled, their passwords set (superusers).")
        @Option(help: "Only entries at or after this ISO 8601 time, e.g. 2026-11-24T10:00:00Z.") var since: String?
        @Option(help: "At most this many entries (1–10000, default 1000).") var limit: Int?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                var pairs: [(String, String)] = []
                if let since { pairs.append(("since", since)) }
                if let limit { pairs.append(("limit", String(limit))) }
                let query = pairs.isEmpty ? "" : "?" + pairs.map { "\($0.0)=\(pathComponent($0.1))" }.joined(separator: "&")
                let response = try await options.client.send("GET", "management/1/audit" + query)
                options.output(response) { AuditCommand.table(response) }
            }
        }
    }

    /// Sends `method` to the operator `email`'s path (and `suffix`), then prints `done` (or the JSON answer).
    static func act(_ options: ClientOptions, _ method: String, _ email: String, _ suffix: String, done: String) async throws {
        try await runAdmin {
            let response = try await options.client.send(method, "management/1/operators/\(pathComponent(email))\(suffix)")
            options.output(response) { done }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add an operator (the password from the terminal, or --password-file).")
        @Argument(help: "Their email address.") var email: String
        @Flag(help: "Make them a superuser: every container, operators, server statistics.") var superuser = false
        @Option(help: "Read the password from this file's first line instead of the terminal.") var passwordFile: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let password = try readPassword(file: passwordFile, prompt: "Password for \(email): ", confirm: true)
                let response = try await options.client.send("POST", "management/1/operators", body: [
                    "emailAddress": .string(email), "password": .string(password), "superuser": .bool(superuser),
                ])
                options.output(response) { "added operator \(email)\(superuser ? " (superuser)" : ""); they sign in with 'stratus login --email \(email)'" }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List operators with their teams.")
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/operators")
                options.output(response) {
                    let rows = (response["operators"]?.arrayValue ?? []).map { entry -> String in
                        let teams = (entry["containers"]?.arrayValue ?? []).map { "\($0["name"]?.stringValue ?? ""):\($0["role"]?.stringValue ?? "")" }
                        let state = entry["disabledAt"] == .null ? "active" : "disabled"
                        return "\(entry["emailAddress"]?.stringValue ?? "")\t\(entry["superuser"] == true ? "yes" : "no")\t\(state)\t\(teams.isEmpty ? "-" : teams.joined(separator: " "))"
                    }
                    return rows.isEmpty ? "no operators yet: add one with 'stratus operator add EMAIL'" : (["EMAIL\tSUPERUSER\tSTATE\tTEAMS"] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an operator, their credentials and their team places.")
        @Argument(help: "Their email address.") var email: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await OperatorCommand.act(options, "DELETE", email, "", done: "removed operator \(email)")
        }
    }

    struct Passwd: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set an operator's password: a superuser's for anyone, yours for you (then with your current one too).",
            discussion: "Their other credentials are revoked: every other 'stratus login' of theirs must sign in again.")
        @Argument(help: "Their email address.") var email: String
        @Option(help: "Read the new password from this file's first line instead of the terminal.") var passwordFile: String?
        @Option(help: "Changing your own: read your current password from this file instead of the terminal.") var currentPasswordFile: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let client = try options.client
                var body: [String: JSON] = [:]
                if client.signedInAs?.lowercased() == email.lowercased() {
                    body["password"] = .string(try readPassword(file: currentPasswordFile, prompt: "Current password: "))
                }
                body["newPassword"] = .string(try readPassword(file: passwordFile, prompt: "New password for \(email): ", confirm: true))
                let response = try await client.send("POST", "management/1/operators/\(pathComponent(email))/password", body: .object(body))
                options.output(response) {
                    let revoked = response["revokedCredentials"]?.intValue ?? 0
                    return "set the password of \(email); \(revoked) other credential\(revoked == 1 ? "" : "s") revoked"
                }
            }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Disable an operator: their credentials stop working at once, everywhere.")
        @Argument(help: "Their email address.") var email: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await OperatorCommand.act(options, "POST", email, "/disable", done: "disabled operator \(email); their sign-ins were revoked")
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Sign an operator out everywhere: every CLI sign-in and console session of theirs stops working; the account stays.")
        @Argument(help: "Their email address.") var email: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await OperatorCommand.act(options, "POST", email, "/revoke", done: "revoked every credential of operator \(email)")
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Enable a disabled operator (they sign in again).")
        @Argument(help: "Their email address.") var email: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await OperatorCommand.act(options, "POST", email, "/enable", done: "enabled operator \(email)")
        }
    }
}

struct TeamCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "team", abstract: "A container's team: who administers it, with which role.",
        discussion: Help.text("""
            Roles: owner (everything for the container: the team, production tokens and keys, schema deploys,
            quotas, user disable, export and erase), developer (the development environment fully: schema
            import and reset, its tokens, keys and role members; production read-only), viewer (reads
            everything, changes nothing). A container's only owner stays one.

            Examples:
              stratus team add --container iCloud.com.example.Notes --operator bob@example.com --role developer
              stratus team set-role --container iCloud.com.example.Notes --operator bob@example.com --role owner
              stratus team list --container iCloud.com.example.Notes
            """),
        subcommands: [Add.self, List.self, Remove.self, SetRole.self])

    static func validateRole(_ role: String) throws {
        guard TeamRole(name: role) != nil else { throw ValidationError("--role must be owner, developer or viewer") }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Add an operator to a container's team.")
        @Option(help: "Container identifier.") var container: String
        @Option(name: .customLong("operator"), help: "The operator's email address.") var email: String
        @Option(help: "owner, developer or viewer.") var role: String
        @OptionGroup var options: ClientOptions

        func validate() throws { try TeamCommand.validateRole(role) }

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(container))/team",
                                                             body: ["operator": .string(email), "role": .string(role)])
                options.output(response) { "added \(email) to the team of \(container) as \(role)" }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a container's team.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(container))/team")
                options.output(response) {
                    let rows = (response["team"]?.arrayValue ?? []).map {
                        "\($0["emailAddress"]?.stringValue ?? "")\t\($0["role"]?.stringValue ?? "")\t\($0["disabled"] == true ? "disabled" : "active")\t\($0["addedAt"]?.stringValue ?? "")"
                    }
                    return rows.isEmpty ? "\(container) has no team yet (superusers administer it): 'stratus team add'" : (["OPERATOR\tROLE\tSTATE\tADDED"] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove an operator from a container's team (not its only owner).")
        @Option(help: "Container identifier.") var container: String
        @Option(name: .customLong("operator"), help: "The operator's email address.") var email: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("DELETE", "management/1/containers/\(pathComponent(container))/team/\(pathComponent(email))")
                options.output(response) { "removed \(email) (\(response["role"]?.stringValue ?? "")) from the team of \(container)" }
            }
        }
    }

    struct SetRole: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "set-role", abstract: "Change a team member's role.")
        @Option(help: "Container identifier.") var container: String
        @Option(name: .customLong("operator"), help: "The operator's email address.") var email: String
        @Option(help: "owner, developer or viewer.") var role: String
        @OptionGroup var options: ClientOptions

        func validate() throws { try TeamCommand.validateRole(role) }

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("PATCH", "management/1/containers/\(pathComponent(container))/team/\(pathComponent(email))",
                                                             body: ["role": .string(role)])
                options.output(response) { "\(email) is now \(role) of \(container) (was \(response["previousRole"]?.stringValue ?? "?"))" }
            }
        }
    }
}
