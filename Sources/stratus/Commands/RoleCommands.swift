import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct RoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "role", abstract: "Give users custom security roles, take them away, list members.",
        discussion: Help.text("""
            A custom role is declared in the schema (CREATE ROLE Editor;) and granted permissions on record
            types (GRANT READ, WRITE TO Editor in RECORD TYPE Article). Its members get those permissions in
            the public database: in lookups, queries, change feeds and modifies. Membership is per
            environment; production gets the role itself by 'stratus schema deploy'. Every change is
            audited and reaches every server process within a second.

            Examples:
              stratus role assign --container iCloud.com.example.News --role Editor --user ada@example.com
              stratus role members --container iCloud.com.example.News --role Editor
              stratus role unassign --container iCloud.com.example.News --role Editor --user ada@example.com
            """),
        subcommands: [List.self, Members.self, Assign.self, Unassign.self])

    typealias Target = ContainerTarget

    static let header = "USER RECORD NAME\tEMAIL\tADDED"

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the environment's custom roles and how many members each has.")
        @OptionGroup var target: Target
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "\(target.rolesPath)?environment=\(target.environment)")
                options.output(response) {
                    let rows = (response["roles"]?.arrayValue ?? []).map { "\($0["role"]?.stringValue ?? "")\t\($0["members"].map { JSONWriter.string($0) } ?? "0")" }
                    return rows.isEmpty ? "the \(target.environment) schema declares no custom roles (CREATE ROLE Name;)" : (["ROLE\tMEMBERS"] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Members: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the members of a custom role.")
        @OptionGroup var target: Target
        @Option(help: "The custom role's name.") var role: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "\(target.rolesPath)/\(pathComponent(role))/members?environment=\(target.environment)")
                options.output(response) {
                    let rows = (response["members"]?.arrayValue ?? []).map {
                        "\($0["userRecordName"]?.stringValue ?? "")\t\($0["emailAddress"]?.stringValue ?? "")\t\($0["addedAt"]?.stringValue ?? "")"
                    }
                    return rows.isEmpty ? "role \(role) has no members in \(target.environment)" : ([RoleCommand.header] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Assign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Give a user a custom role (audited).")
        @OptionGroup var target: Target
        @Option(help: "The custom role's name.") var role: String
        @Option(help: "User record name (_ and 32 hex digits) or email address.") var user: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("POST", "\(target.rolesPath)/\(pathComponent(role))/members",
                                                             body: ["environment": .string(target.environment), "user": .string(user)])
                let name = response["member"]?["userRecordName"]?.stringValue ?? user
                options.output(response) {
                    response["added"] == .bool(true) ? "\(name) now holds role \(role) in \(target.environment)"
                        : "\(name) already held role \(role) in \(target.environment)"
                }
            }
        }
    }

    struct Unassign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Take a custom role from a user (audited).")
        @OptionGroup var target: Target
        @Option(help: "The custom role's name.") var role: String
        @Option(help: "User record name or email address.") var user: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("DELETE", "\(target.rolesPath)/\(pathComponent(role))/members/\(pathComponent(user))?environment=\(target.environment)")
                options.output(response) { "\(response["removed"]?.stringValue ?? user) no longer holds role \(role) in \(target.environment)" }
            }
        }
    }
}
