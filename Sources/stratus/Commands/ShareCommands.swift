import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct ShareCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share", abstract: "List the shares users made of their private zones and records.",
        discussion: Help.text("""
            Users share from their private databases by saving cloudkit.share records; participants accept
            them with records/accept and see them in their shared databases. This command shows, for the
            operator, every share of an environment: its owner, zone, root record (none: the whole zone),
            short GUID, link permission, and each participant with their permission and acceptance.

            Examples:
              stratus share list --container iCloud.com.example.Notes --environment development
              stratus share list --container iCloud.com.example.Notes --user ada@example.com --json
            """),
        subcommands: [List.self])

    static let header = "OWNER\tZONE\tSHARE\tROOT\tSHORT GUID\tLINK\tSTATE\tPARTICIPANTS"

    /// One share as a table row; participants as `name-or-email (permission, status)`.
    static func row(_ share: JSON) -> String {
        let participants = (share["participants"]?.arrayValue ?? []).map { participant -> String in
            let who = participant["userRecordName"]?.stringValue ?? participant["emailAddress"]?.stringValue ?? "?"
            let permission = participant["permission"]?.stringValue == "READ_WRITE" ? "RW" : "RO"
            return "\(who) (\(permission), \(participant["acceptanceStatus"]?.stringValue ?? ""))"
        }
        let fields = [
            share["owner"]?.stringValue ?? "", share["zoneName"]?.stringValue ?? "", share["shareName"]?.stringValue ?? "",
            share["rootRecordName"]?.stringValue ?? "(zone)", share["shortGUID"]?.stringValue ?? "", share["publicPermission"]?.stringValue ?? "",
            share["deleted"] == true ? "deleted" : "live", participants.isEmpty ? "none" : participants.joined(separator: ", "),
        ]
        return fields.joined(separator: "\t")
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List an environment's shares, or those one user owns or takes part in.")
        @OptionGroup var target: ContainerTarget
        @Option(help: "Only the shares this user (user record name or email address) owns or takes part in.") var user: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await listPerEnvironment("shares", target: target, user: user, options: options, header: ShareCommand.header, row: ShareCommand.row)
        }
    }
}
