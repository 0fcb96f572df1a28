import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct QuotaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quota", abstract: "Show and set a container's limits per environment.",
        discussion: Help.text("""
            Each container-environment has nine limits: records, storage bytes, operations per
            second (for the container, and per user: without a user, per API token and client
            address), each user's private storage, notifications queued per second, sign-up
            attempts per hour (per client address, and for the whole environment), and the rows
            of the request log kept ('stratus logs'; 0 keeps none). Unset ones take
            the documented defaults; 'default' resets one. Every change is in the audit log and
            reaches every server process at once.

            Past a storage limit a write gets QUOTA_EXCEEDED and writes nothing of that record;
            past a rate limit a request gets THROTTLED with a retry hint; past the notification
            limit a write's notifications are dropped (counted in 'stratus usage'), not the write;
            past a sign-up limit a sign-up gets THROTTLED and creates nothing, whether or not the
            address already has an account. 'stratus usage' shows what is used (see the README,
            "Quotas, rate limits and usage").

            Examples:
              stratus quota show --container iCloud.com.example.Notes --environment production
              stratus quota set --container iCloud.com.example.Notes --environment production --max-records 100000 --requests-per-second 200
              stratus quota set --container iCloud.com.example.Notes --max-records default
              stratus quota set --container iCloud.com.example.Notes --environment production --signups-per-address-per-hour 5
              stratus quota set --container iCloud.com.example.Notes --environment production --log-requests 1000000
            """),
        subcommands: [Show.self, Set.self])

    static func table(_ response: JSON) -> String {
        let set = Swift.Set((response["set"]?.arrayValue ?? []).compactMap(\.stringValue))
        var lines = ["LIMIT\tVALUE\tSOURCE"]
        for key in QuotaLimits.keys {
            let value = response["limits"]?[key.name].map { JSONWriter.string($0) } ?? "?"
            lines.append("\(key.name)\t\(value)\t\(set.contains(key.name) ? "set" : "default")")
        }
        lines.append("(\(response["environment"]?.stringValue ?? "") environment; requests are operations per second)")
        return lines.joined(separator: "\n")
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show the limits of a container-environment and which are defaults.")
        @OptionGroup var target: ContainerTarget
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(target.container))/quota?environment=\(target.environment)")
                options.output(response) { QuotaCommand.table(response) }
            }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Set limits (a number, or 'default' to reset one).")
        @OptionGroup var target: ContainerTarget
        @Option(name: .customLong("max-records"), help: "Most records in the environment (all databases).") var maxRecords: String?
        @Option(name: .customLong("max-storage-bytes"), help: "Most bytes of record data in the environment.") var maxStorageBytes: String?
        @Option(name: .customLong("requests-per-second"), help: "Requests per second for the whole container-environment.") var requestsPerSecond: String?
        @Option(name: .customLong("user-requests-per-second"), help: "Requests per second for one user.") var userRequestsPerSecond: String?
        @Option(name: .customLong("user-private-storage-bytes"), help: "Most bytes in one user's private database (shared records count as their owner's).") var userPrivateStorageBytes: String?
        @Option(name: .customLong("notifications-per-second"), help: "Notifications queued per second for the environment's subscribers; past it they are dropped.") var notificationsPerSecond: String?
        @Option(name: .customLong("pushes-per-second"), help: "Pushes sent per second to the environment's devices (APNs and Web Push); past it they wait in the queue.") var pushesPerSecond: String?
        @Option(name: .customLong("signups-per-address-per-hour"),
                help: "Sign-up attempts one client address may make in an hour (an answer that the address has an account counts too).")
        var signupsPerAddressPerHour: String?
        @Option(name: .customLong("signups-per-hour"), help: "Sign-up attempts the whole environment takes in an hour.") var signupsPerHour: String?
        @Option(name: .customLong("log-requests"),
                help: "Rows of the request log kept, the newest ('stratus logs'; default 100000, 0 for none).") var logRequests: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            var body: [String: JSON] = ["environment": .string(target.environment)]
            for (name, given) in [("maxRecords", maxRecords), ("maxStorageBytes", maxStorageBytes), ("requestsPerSecond", requestsPerSecond),
                                  ("userRequestsPerSecond", userRequestsPerSecond), ("userPrivateStorageBytes", userPrivateStorageBytes),
                                  ("notificationsPerSecond", notificationsPerSecond), ("pushesPerSecond", pushesPerSecond), ("signupsPerAddressPerHour", signupsPerAddressPerHour),
                                  ("signupsPerHour", signupsPerHour), ("logRequests", logRequests)] {
                guard let given else { continue }
                if given == "default" {
                    body[name] = .null
                } else if let number = Int64(given.replacingOccurrences(of: "_", with: "")) {
                    body[name] = .int(number)
                } else {
                    throw ValidationError("--\(name.kebab) must be a whole number or 'default', not '\(given)'")
                }
            }
            guard body.count > 1 else { throw ValidationError("give at least one limit to set, e.g. --max-records 100000") }
            try await runAdmin {
                let response = try await options.client.send("PATCH", "management/1/containers/\(pathComponent(target.container))/quota", body: .object(body))
                options.output(response) { QuotaCommand.table(response) }
            }
        }
    }
}

extension String {
    /// `maxRecords` → `max-records`.
    var kebab: String {
        var out = ""
        for character in self {
            if character.isUppercase { out += "-" + character.lowercased() } else { out.append(character) }
        }
        return out
    }
}
