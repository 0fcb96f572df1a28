import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct LogsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logs", abstract: "Show a container's request log: one line per data-API request, filtered, or followed as it grows.",
        discussion: Help.text("""
            Every request the data API answers for a container is logged: when, the database and
            operation, the HTTP status and serverErrorCode, how long it took, the user, the
            request id (the X-Request-ID header the client got, and an error's uuid), the
            client's address and, for a failure, its reason (printed last). Each environment keeps its newest 100,000 rows ('stratus quota set
            --log-requests N' changes that; 0 keeps none). Rows reach the log about a second
            after their request is answered.

            Lines are printed oldest first: the newest --limit rows that match. --follow then
            keeps printing new ones as they come, until interrupted (Ctrl-C). With --json, one
            document (or with --follow, one JSON object a line).

            Examples:
              stratus logs --container iCloud.com.example.Notes --environment production
              stratus logs --container iCloud.com.example.Notes --status 5xx --since 1h
              stratus logs --container iCloud.com.example.Notes --user ada@example.com --operation records/modify
              stratus logs --container iCloud.com.example.Notes --request-id 5C9F0A3E-1B2C-4D5E-8F90-123456789ABC
              stratus logs --container iCloud.com.example.Notes --text "not a whole number" --since 2026-11-24T10:00:00Z --until 2026-11-24T11:00:00Z
              stratus logs --container iCloud.com.example.Notes --follow
            """))

    @OptionGroup var target: ContainerTarget
    @Option(help: "Only requests since then: an ISO 8601 time (2026-11-24T10:00:00Z) or a time ago (90s, 15m, 2h, 7d).") var since: String?
    @Option(help: "Only this HTTP status (404) or class (4xx, 5xx).") var status: String?
    @Option(help: "Only this operation, e.g. records/modify, records/query, zones/list.") var operation: String?
    @Option(help: "Only this user's requests: a user record name or email address.") var user: String?
    @Option(help: "Only requests answered before then: an ISO 8601 time or a time ago, as --since.") var until: String?
    @Option(help: "Only the request with this id (its X-Request-ID, an error's uuid).") var requestID: String?
    @Option(help: "Only requests whose operation, error code, reason, request id or user contains this text (any case).") var text: String?
    @Option(help: "Show the newest this many matching rows (1–1000, default 100).") var limit: Int = 100
    @Flag(help: "Keep printing new requests as they are logged, until interrupted.") var follow = false
    @OptionGroup var options: ClientOptions

    func validate() throws {
        if let since, Self.time(since, now: Date()) == nil {
            throw ValidationError("--since must be an ISO 8601 time such as 2026-11-24T10:00:00Z, or a time ago such as 15m, 2h or 7d")
        }
        if let until, Self.time(until, now: Date()) == nil {
            throw ValidationError("--until must be an ISO 8601 time such as 2026-11-24T11:00:00Z, or a time ago such as 15m, 2h or 7d")
        }
        if !(1...1000).contains(limit) { throw ValidationError("--limit must be 1–1000") }
    }

    /// `since` as a time: ISO 8601, or a number with s, m, h or d before `now`.
    static func time(_ text: String, now: Date) -> Date? {
        if let date = ISO8601DateFormatter().date(from: text) { return date }
        guard let unit = text.last, let amount = Double(text.dropLast()), amount >= 0 else { return nil }
        let seconds: Double
        switch unit {
        case "s": seconds = 1
        case "m": seconds = 60
        case "h": seconds = 3600
        case "d": seconds = 86400
        default: return nil
        }
        return now.addingTimeInterval(-amount * seconds)
    }

    func run() async throws {
        try await runAdmin {
            var filters = ["environment=\(pathComponent(target.environment))"]
            if let since, let date = Self.time(since, now: Date()) { filters.append("since=" + pathComponent(ISO8601DateFormatter().string(from: date))) }
            if let status { filters.append("status=" + pathComponent(status)) }
            if let operation { filters.append("operation=" + pathComponent(operation)) }
            if let user { filters.append("user=" + pathComponent(user)) }
            if let until, let date = Self.time(until, now: Date()) { filters.append("until=" + pathComponent(ISO8601DateFormatter().string(from: date))) }
            if let requestID { filters.append("requestID=" + pathComponent(requestID)) }
            if let text { filters.append("q=" + pathComponent(text)) }
            let base = "management/1/containers/\(pathComponent(target.container))/logs?" + filters.joined(separator: "&")
            let client = try options.client
            let response = try await client.send("GET", base + "&limit=\(limit)")
            let entries = Array((response["entries"]?.arrayValue ?? []).reversed())
            if !follow {
                options.output(response) { entries.isEmpty ? "no requests logged match" : ([Self.header] + entries.map(Self.line)).joined(separator: "\n") }
                return
            }
            if !options.json { FileHandle.standardOutput.write(Data((([Self.header] + entries.map(Self.line)).joined(separator: "\n") + "\n").utf8)) }
            else { FileHandle.standardOutput.write(Data(entries.map { JSONWriter.string($0) + "\n" }.joined().utf8)) }
            // Rows numbered after the last printed (none matched yet: every matching row to come).
            var last = entries.last?["seq"]?.intValue ?? 0
            while true {
                try await Task.sleep(for: .seconds(1))
                let more = try await client.send("GET", base + "&after=\(last)&limit=1000")["entries"]?.arrayValue ?? []
                // Written at once (not held in stdout's buffer when piped): a follower sees each second's rows.
                let text = more.map { (options.json ? JSONWriter.string($0) : Self.line($0)) + "\n" }.joined()
                if !text.isEmpty { FileHandle.standardOutput.write(Data(text.utf8)) }
                last = more.last?["seq"]?.intValue ?? last
            }
        }
    }

    static let header = "AT\tDATABASE\tOPERATION\tSTATUS\tMS\tUSER\tREQUEST ID\tCLIENT\tREASON"

    /// One entry as a line of text.
    static func line(_ entry: JSON) -> String {
        let status = "\(entry["status"]?.intValue ?? 0)" + (entry["serverErrorCode"]?.stringValue.map { " " + $0 } ?? "")
        let milliseconds: String
        switch entry["durationMs"] {
        case .double(let value)?: milliseconds = String(format: "%.1f", value)
        case .int(let value)?: milliseconds = "\(value).0"
        default: milliseconds = "?"
        }
        return [entry["at"]?.stringValue ?? "", entry["database"]?.stringValue ?? "-", entry["operation"]?.stringValue ?? "", status, milliseconds,
                entry["userRecordName"]?.stringValue ?? "-", entry["requestID"]?.stringValue ?? "", entry["clientAddress"]?.stringValue ?? "-",
                entry["reason"]?.stringValue ?? ""]
            .joined(separator: "\t")
    }
}
