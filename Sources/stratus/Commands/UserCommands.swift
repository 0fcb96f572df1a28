import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// Percent-encodes one path component.
func pathComponent(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "._-~"))) ?? text
}

/// The container and environment a user or role verb works on.
/// Lists what the management API keeps per environment (`shares`, `subscriptions`), or one user's,
/// as a table with `header` and a row each, or JSON.
func listPerEnvironment(_ what: String, target: ContainerTarget, user: String?, options: ClientOptions, header: String,
                        row: (JSON) -> String) async throws {
    try await runAdmin {
        var path = "management/1/containers/\(pathComponent(target.container))/\(what)?environment=\(target.environment)"
        if let user { path += "&user=\(pathComponent(user))" }
        let response = try await options.client.send("GET", path)
        options.output(response) {
            let rows = (response[what]?.arrayValue ?? []).map(row)
            return rows.isEmpty ? "no \(what)\(user.map { " of \($0)" } ?? "") in \(target.environment)" : ([header] + rows).joined(separator: "\n")
        }
    }
}

struct ContainerTarget: ParsableArguments {
    @Option(help: "Container identifier.") var container: String
    @Option(help: "development or production.") var environment = "development"

    func validate() throws {
        guard ContainerEnvironment(rawValue: environment) != nil else { throw ValidationError("--environment must be 'development' or 'production'") }
    }

    var rolesPath: String { "management/1/containers/\(pathComponent(container))/roles" }
}

struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "List, show, disable, enable, export and erase a container's users.",
        discussion: Help.text("""
            Users sign up through the app (POST /auth/1/{container}/{environment}/signup). A disabled user
            cannot sign in, and every session of theirs ends at once, on every server process.

            Examples:
              stratus user list --container iCloud.com.example.Notes --environment development
              stratus user disable --container iCloud.com.example.Notes --user ada@example.com
              stratus user export --container iCloud.com.example.Notes --user ada@example.com --output ada.json
              stratus user erase --container iCloud.com.example.Notes --user ada@example.com --yes
            """),
        subcommands: [List.self, Show.self, Disable.self, Enable.self, Export.self, Erase.self])

    typealias Target = ContainerTarget

    static func row(_ user: JSON) -> String {
        let state = user["disabledAt"] == .null ? "active" : "disabled"
        return "\(user["userRecordName"]?.stringValue ?? "")\t\(user["emailAddress"]?.stringValue ?? "")\t\(state)\t\(user["liveSessions"].map { JSONWriter.string($0) } ?? "0")\t\(user["createdAt"]?.stringValue ?? "")"
    }

    static let header = "USER RECORD NAME\tEMAIL\tSTATE\tSESSIONS\tCREATED"

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the container's users, with their live sessions in the environment.")
        @OptionGroup var target: Target
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(target.container))/users?environment=\(target.environment)")
                options.output(response) {
                    let rows = (response["users"]?.arrayValue ?? []).map(UserCommand.row)
                    return rows.isEmpty ? "no users yet: they sign up through the app" : ([UserCommand.header] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one user, by user record name or email address.")
        @OptionGroup var target: Target
        @Option(help: "User record name (_ and 32 hex digits) or email address.") var user: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(target.container))/users/\(pathComponent(user))?environment=\(target.environment)")
                options.output(response) { [UserCommand.header, UserCommand.row(response["user"] ?? .null)].joined(separator: "\n") }
            }
        }
    }

    /// Disables or enables a user through the management API and says so.
    static func setDisabled(_ disabled: Bool, target: Target, user: String, options: ClientOptions) async throws {
        try await runAdmin {
            let verb = disabled ? "disable" : "enable"
            let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(target.container))/users/\(pathComponent(user))/\(verb)")
            let name = response["user"]?["userRecordName"]?.stringValue ?? user
            options.output(response) { disabled ? "disabled \(name); their sessions have ended" : "enabled \(name)" }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Disable a user: they cannot sign in, and their sessions end at once (audited).")
        @OptionGroup var target: Target
        @Option(help: "User record name or email address.") var user: String
        @OptionGroup var options: ClientOptions

        func run() async throws { try await UserCommand.setDisabled(true, target: target, user: user, options: options) }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write everything a user owns as one JSON document (both environments).",
            discussion: Help.text("""
                The account (email, names, discoverability), each private zone with its records, the public
                records they created, their subscriptions and the shares they take part in, as CKWS record
                dictionaries (assets with a download URL valid one hour).
                """))
        @Option(help: "Container identifier.") var container: String
        @Option(help: "User record name or email address.") var user: String
        @Option(help: "Write to this file instead of standard output.") var output: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(container))/users/\(pathComponent(user))/export")
                let text = JSONWriter.string(response)
                if let output {
                    guard FileManager.default.createFile(atPath: output, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600]) else {
                        throw CLIError("cannot write \(output); check the folder and its permissions")
                    }
                    let environments = response["environments"]?.arrayValue ?? []
                    let records = environments.reduce(0) { total, environment in
                        total + (environment["privateZones"]?.arrayValue ?? []).reduce(0) { $0 + ($1["records"]?.arrayValue?.count ?? 0) }
                            + (environment["publicRecords"]?.arrayValue?.count ?? 0)
                    }
                    print("wrote \(output): \(response["user"]?["userRecordName"]?.stringValue ?? user), \(records) records, \(text.utf8.count) bytes")
                } else {
                    print(text)
                }
            }
        }
    }

    struct Erase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Erase a user: their data, shares, subscriptions, sessions and account (audited; cannot be undone).",
            discussion: Help.text("""
                Deletes the user's private zones (their deletion stays in the database change feed, and
                share participants lose those shares), the public records they created (as tombstones, so
                sync clients see them go), their participation in others' shares, their subscriptions,
                notification tokens, roles and sessions, and the account itself. Export first if the data
                is to be handed over.
                """))
        @Option(help: "Container identifier.") var container: String
        @Option(help: "User record name or email address.") var user: String
        @Flag(help: "Confirm: erasing cannot be undone.") var yes = false
        @OptionGroup var options: ClientOptions

        func run() async throws {
            guard yes else { throw ValidationError("erasing a user cannot be undone; add --yes to confirm (and 'stratus user export' first to keep a copy)") }
            try await runAdmin {
                let base = "management/1/containers/\(pathComponent(container))/users/\(pathComponent(user))"
                let found = try await options.client.send("GET", base + "?environment=development")
                let name = found["user"]?["userRecordName"]?.stringValue ?? user
                let response = try await options.client.send("POST", base + "/erase", body: ["confirm": .string(name)])
                let erased = response["erased"]
                func count(_ key: String) -> String { erased?[key].map { JSONWriter.string($0) } ?? "0" }
                options.output(response) {
                    "erased \(name): \(count("privateZones")) private zone(s) with \(count("privateRecords")) record(s), \(count("publicRecords")) public record(s), "
                        + "\(count("shareParticipations")) share participation(s), \(count("subscriptions")) subscription(s); the account is gone"
                }
            }
        }
    }

    struct Enable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Enable a disabled user again (they sign in anew; audited).")
        @OptionGroup var target: Target
        @Option(help: "User record name or email address.") var user: String
        @OptionGroup var options: ClientOptions

        func run() async throws { try await UserCommand.setDisabled(false, target: target, user: user, options: options) }
    }
}

struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit", abstract: "Show a container's audit log: every management action, who, when, from where.",
        discussion: Help.text("""
            Recorded in the same transaction as the action itself: containers and API tokens created,
            tokens revoked, schema imports, deploys and resets, users disabled and enabled.

            Example: stratus audit --container iCloud.com.example.Notes --since 2026-11-24T00:00:00Z
            """))
    @Option(help: "Container identifier.") var container: String
    @Option(help: "Only entries at or after this ISO 8601 time, e.g. 2026-11-24T10:00:00Z.") var since: String?
    @Option(help: "At most this many entries (1–10000, default 1000).") var limit: Int?
    @OptionGroup var options: ClientOptions

    func validate() throws {
        if let since, ISO8601DateFormatter().date(from: since) == nil {
            throw ValidationError("--since must be an ISO 8601 time such as 2026-11-24T10:00:00Z")
        }
        if let limit, !(1...10_000).contains(limit) { throw ValidationError("--limit must be 1–10000") }
    }

    func run() async throws {
        try await runAdmin {
            var path = "management/1/containers/\(pathComponent(container))/audit?limit=\(limit ?? 1000)"
            if let since { path += "&since=" + pathComponent(since) }
            let response = try await options.client.send("GET", path)
            options.output(response) { Self.table(response) }
        }
    }

    /// An audit log's entries as text, one a line.
    static func table(_ response: JSON) -> String {
        let rows = (response["entries"]?.arrayValue ?? []).map { entry -> String in
            let environment = entry["environment"]?.stringValue.map { " [\($0)]" } ?? ""
            let detail = entry["detail"]?.stringValue.flatMap { $0.isEmpty ? nil : $0.split(separator: "\n").first.map(String.init) } ?? ""
            return "\(entry["at"]?.stringValue ?? "")\t\(entry["actor"]?.stringValue ?? "")\t\(entry["address"]?.stringValue ?? "")\t\(entry["action"]?.stringValue ?? "")\(environment)\t\(entry["target"]?.stringValue ?? "")\t\(detail)"
        }
        return rows.isEmpty ? "no audit entries" : (["AT\tACTOR\tADDRESS\tACTION\tTARGET\tDETAIL"] + rows).joined(separator: "\n")
    }
}
