import ArgumentParser
import StratusCommandLine
import StratusCore

/// `stratus subscription list`: the operator's view of what users subscribed to.
struct SubscriptionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "subscription", abstract: "List the subscriptions users made to be notified of changes.",
        discussion: Help.text("""
            Users subscribe through the data API (subscriptions/modify): to the records a query matches
            (public and private databases), to a zone (private and shared), or to a whole database
            (private and shared). This command shows, for the operator, every subscription of an
            environment, or one user's: its subscriber, database, ID, type, what it watches and what it
            fires on.

            Examples:
              stratus subscription list --container iCloud.com.example.Notes --environment development
              stratus subscription list --container iCloud.com.example.Notes --user ada@example.com --json
            """),
        subcommands: [List.self])

    static let header = "OWNER\tDATABASE\tID\tTYPE\tWATCHES\tFIRES ON"

    /// One subscription as a table row.
    static func row(_ subscription: JSON) -> String {
        let kind = subscription["subscriptionType"]?.stringValue ?? ""
        var watches = "the whole database"
        if let zone = subscription["zoneID"]?["zoneName"]?.stringValue {
            let owner = subscription["zoneID"]?["ownerRecordName"]?.stringValue ?? ""
            watches = "zone \(zone)" + (owner.isEmpty || owner == subscription["owner"]?.stringValue ? "" : " of \(owner)")
        }
        if kind == "query" {
            let filters = subscription["query"]?["filterBy"]?.arrayValue?.count ?? 0
            watches = "\(subscription["query"]?["recordType"]?.stringValue ?? "?") records" + (filters > 0 ? " (\(filters) filter\(filters == 1 ? "" : "s"))" : "")
                + (subscription["zoneID"] == nil ? "" : " in \(watches)")
        }
        var fires = (subscription["firesOn"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ",")
        if fires.isEmpty { fires = "any change" }
        if subscription["firesOnce"] == true { fires += " (once)" }
        let fields = [subscription["owner"]?.stringValue ?? "", subscription["database"]?.stringValue ?? "",
                      subscription["subscriptionID"]?.stringValue ?? "", kind, watches, fires]
        return fields.joined(separator: "\t")
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List an environment's subscriptions, or one user's.")
        @OptionGroup var target: ContainerTarget
        @Option(help: "Only this user's subscriptions (user record name or email address).") var user: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await listPerEnvironment("subscriptions", target: target, user: user, options: options, header: SubscriptionCommand.header, row: SubscriptionCommand.row)
        }
    }
}
