import ArgumentParser
import Foundation
import Logging
import StratusCommandLine
import StratusCore
import StratusServer

@main
struct Stratus: AsyncParsableCommand {
    static func main() async {
        // Before the arguments are parsed: `serve --log-format json` (or STRATUS_LOG_FORMAT) picks
        // the lines' format for every logger the process makes.
        let json = logFormat(CommandLine.arguments) == "json"
        LoggingSystem.bootstrap({ label, provider in
            var handler = StderrLogHandler(label: label, json: json)
            handler.metadataProvider = provider
            return handler
        }, metadataProvider: RequestID.metadataProvider)
        let arguments = Array(CommandLine.arguments.dropFirst())
        // `stratus help X Y`: only a command there is.
        let asked = arguments.dropFirst().filter { !$0.hasPrefix("-") }
        if arguments.first == "help", commandPath(asked).count < asked.count {
            printError("no command '\(asked.joined(separator: " "))'; 'stratus help' lists the commands")
            Self.exit(withError: ExitCode(64))
        }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            // Help and version go out as ArgumentParser prints them, and a command that printed its
            // own error leaves only its exit code; any other mistake is one line in the one style,
            // with where to read more.
            let code = exitCode(for: error)
            if code == .success || error is ExitCode { Self.exit(withError: error) }
            let path = (["stratus"] + commandPath(arguments)).joined(separator: " ")
            printError(message(for: error).replacingOccurrences(of: "Error: ", with: "") + " (see '\(path) --help')")
            Self.exit(withError: ExitCode(code.rawValue))
        }
    }

    /// The longest run of `arguments` from the start that names commands (`["schema", "deploy"]`).
    static func commandPath(_ arguments: [String]) -> [String] {
        var command: any ParsableCommand.Type = Stratus.self
        var path: [String] = []
        for argument in arguments {
            guard let next = command.configuration.subcommands.first(where: { $0._commandName == argument }) else { break }
            path.append(argument)
            command = next
        }
        return path
    }

    /// `--log-format`'s value among the arguments, else STRATUS_LOG_FORMAT's.
    static func logFormat(_ arguments: [String]) -> String? {
        for (index, argument) in arguments.enumerated() {
            if argument == "--log-format", index + 1 < arguments.count { return arguments[index + 1] }
            if argument.hasPrefix("--log-format=") { return String(argument.dropFirst("--log-format=".count)) }
        }
        return setting(nil, "STRATUS_LOG_FORMAT")
    }

    static let configuration = CommandConfiguration(
        commandName: "stratus",
        abstract: "A self-hosted, CloudKit-compatible database service on PostgreSQL.",
        discussion: Help.text("""
            'stratus serve' runs the service. The other verbs are admin commands: they talk to a running
            server's management API (--server, default http://127.0.0.1:8080) as the operator signed in
            with 'stratus login', or with the admin token (--admin-token or STRATUS_ADMIN_TOKEN; on the
            server's own machine, the token 'stratus serve' wrote to ./.stratus/admin-token).

            Examples:
              stratus serve
              stratus login --email ada@example.com
              stratus container create iCloud.com.example.Notes
              stratus token create --container iCloud.com.example.Notes --environment development --name web
              stratus token list --json
            """),
        subcommands: [Serve.self, Migrate.self, LoginCommand.self, LogoutCommand.self, WhoamiCommand.self, OperatorCommand.self, TeamCommand.self, ContainerCommand.self, TokenCommand.self, UserCommand.self, RoleCommand.self, ShareCommand.self, SubscriptionCommand.self, QuotaCommand.self, UsageCommand.self, LogsCommand.self, KeyCommand.self, PushCommand.self, SchemaCommand.self, AuditCommand.self]
    )
}

/// Prints one line to standard error.
func printError(_ message: String) {
    FileHandle.standardError.write(Data(("stratus: " + message + "\n").utf8))
}
