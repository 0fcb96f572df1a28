import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct UsageCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "usage", abstract: "Show a container's metered usage, or check the meters against the data.",
        discussion: Help.text("""
            Records and bytes are counted in the same transaction as every write, so they are exact
            at any moment; requests are summed from each server process's counts, added to the
            database about once a second.

            --verify recounts every live record from the data (for one container, or all when
            --container is left out) and prints any counter that differs; the exit status is 1 if
            one does, 0 if the meters are exact.

            Examples:
              stratus usage --container iCloud.com.example.Notes --environment production
              stratus usage --container iCloud.com.example.Notes --json
              stratus usage --verify
            """))

    @Option(help: "Container identifier (required unless --verify).") var container: String?
    @Option(help: "development or production (default development; with --verify, both unless given).") var environment: String?
    @Flag(help: "Recount from the data and report any difference from the meters (exit 1 if any).") var verify = false
    @OptionGroup var options: ClientOptions

    func validate() throws {
        if let environment, ContainerEnvironment(rawValue: environment) == nil {
            throw ValidationError("--environment must be 'development' or 'production'")
        }
        if !verify, container == nil { throw ValidationError("give --container (or --verify to check every container)") }
    }

    func run() async throws {
        try await runAdmin {
            if verify {
                var query: [String] = []
                if let container { query.append("container=\(pathComponent(container))") }
                if let environment { query.append("environment=\(environment)") }
                let response = try await options.client.send("GET", "management/1/usage/verify" + (query.isEmpty ? "" : "?" + query.joined(separator: "&")))
                let differences = response["differences"]?.arrayValue ?? []
                options.output(response) { Self.differencesText(differences) }
                if !differences.isEmpty { throw ExitCode.failure }
                return
            }
            let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(container ?? ""))/usage?environment=\(environment ?? "development")")
            options.output(response) { Self.reportText(response) }
        }
    }

    static func differencesText(_ differences: [JSON]) -> String {
        guard !differences.isEmpty else { return "usage verified: every counter equals a recount of the data" }
        var lines = ["CONTAINER\tENVIRONMENT\tSCOPE\tRECORDS (COUNTED/METERED)\tBYTES (COUNTED/METERED)"]
        for difference in differences {
            func value(_ key: String) -> String { difference[key].map { JSONWriter.string($0) } ?? "?" }
            lines.append("\(difference["container"]?.stringValue ?? "?")\t\(difference["environment"]?.stringValue ?? "?")\t\(difference["scope"]?.stringValue ?? "?")\t\(value("countedRecords"))/\(value("meteredRecords"))\t\(value("countedBytes"))/\(value("meteredBytes"))")
        }
        lines.append("\(differences.count) counter(s) differ from the data")
        return lines.joined(separator: "\n")
    }

    static func reportText(_ response: JSON) -> String {
        func number(_ value: JSON?) -> String { value.map { JSONWriter.string($0) } ?? "?" }
        let limits = response["limits"]
        var lines = ["\(response["container"]?.stringValue ?? "") (\(response["environment"]?.stringValue ?? ""))",
                     "records\t\(number(response["records"])) of \(number(limits?["maxRecords"]))",
                     "bytes\t\(number(response["bytes"])) of \(number(limits?["maxStorageBytes"])) (field data and the assets records hold)",
                     "assets stored\t\(number(response["storedAssets"]?["count"])) files, \(number(response["storedAssets"]?["bytes"])) bytes (each content once per container)",
                     "", "PERIOD\tREQUESTS\tTHROTTLED\tQUOTA REFUSED\tNOTIFICATIONS\tNOTIFICATIONS DROPPED\tSIGN-UPS\tSIGN-UPS THROTTLED\tPUSHES SENT"]
        for (label, key) in [("last minute", "lastMinute"), ("last hour", "lastHour"), ("last day", "lastDay")] {
            let period = response["requests"]?[key]
            lines.append("\(label)\t\(number(period?["requests"]))\t\(number(period?["throttled"]))\t\(number(period?["refused"]))\t\(number(period?["notifications"]))\t\(number(period?["notificationsDropped"]))\t\(number(period?["signups"]))\t\(number(period?["signupsThrottled"]))\t\(number(period?["pushes"]))")
        }
        let users = response["topUsers"]?.arrayValue ?? []
        lines.append("")
        if users.isEmpty {
            lines.append("no private storage in use")
        } else {
            lines.append("TOP USERS BY PRIVATE STORAGE\tRECORDS\tBYTES (of \(number(limits?["userPrivateStorageBytes"])) each)")
            for user in users {
                lines.append("\(user["userRecordName"]?.stringValue ?? "?")\t\(number(user["records"]))\t\(number(user["bytes"]))")
            }
        }
        return lines.joined(separator: "\n")
    }
}
