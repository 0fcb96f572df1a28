import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push", abstract: "Pushes to devices: the APNs credential, devices registered, pushes waiting.",
        discussion: Help.text("""
            An app registers its device with the data API's tokens/register (an APNs device token, or a
            browser's Web Push subscription); each subscription of its user that fires then pushes to
            every device they registered. Web Push needs nothing set here: the container's VAPID public
            key ('stratus push status', or GET …/webpush/key) is what the web app passes to
            pushManager.subscribe. APNs needs the app's credential, per environment:

              stratus push apns set --container iCloud.com.example.Notes --environment production \\
                --key-file AuthKey_ABC123DEFG.p8 --key-id ABC123DEFG --team-id DEF123GHIJ --topic com.example.Notes

            The key is stored sealed with the server's secret and never shown again. Development pushes
            go to APNs' sandbox, production's to APNs' production host (as the apnsEnvironment the app
            registered with says); 'stratus serve --apns-host' points both elsewhere.
            """),
        subcommands: [Status.self, APNs.self])

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show each environment's APNs credential (never the key), VAPID key, devices and queue.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(container))/push")
                options.output(response) { Self.text(response) }
            }
        }

        static func text(_ response: JSON) -> String {
            var lines: [String] = []
            for environment in ["development", "production"] {
                let entry = response["environments"]?[environment]
                lines.append("\(environment):")
                if let apns = entry?["apns"], apns != .null {
                    lines.append("  APNs\ttopic \(apns["topic"]?.stringValue ?? ""), key \(apns["keyID"]?.stringValue ?? ""), team \(apns["teamID"]?.stringValue ?? ""); set \(apns["setAt"]?.stringValue ?? "") by \(apns["setBy"]?.stringValue ?? "")")
                } else {
                    lines.append("  APNs\tnot set: APNs devices get no pushes ('stratus push apns set')")
                }
                lines.append("  Web Push\tVAPID public key \(entry?["webPush"]?["vapidPublicKey"]?.stringValue ?? "")")
                let devices = entry?["devices"]
                lines.append("  devices\t\(JSONWriter.string(devices?["apns"] ?? 0)) APNs, \(JSONWriter.string(devices?["webPush"] ?? 0)) Web Push")
                let queue = entry?["queue"]
                var waiting = "  waiting\t\(JSONWriter.string(queue?["pushes"] ?? 0)) pushes"
                if let oldest = queue?["oldestSeconds"], oldest != .null { waiting += ", the oldest \(JSONWriter.string(oldest)) s old" }
                lines.append(waiting)
                if let refusal = entry?["lastRefusal"] {
                    lines.append("  last refusal\t\(refusal["at"]?.stringValue ?? ""): \(refusal["reason"]?.stringValue ?? "")")
                }
            }
            return lines.joined(separator: "\n")
        }
    }

    struct APNs: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "apns", abstract: "Set or remove an environment's APNs credential (owners; audited).",
                                                        subcommands: [Set.self, Remove.self])

        struct Set: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Set the APNs key (.p8), key id, team id and topic an environment pushes with.",
                discussion: "Example: stratus push apns set --container iCloud.com.example.Notes --environment development --key-file AuthKey_ABC123DEFG.p8 --key-id ABC123DEFG --team-id DEF123GHIJ --topic com.example.Notes")
            @OptionGroup var target: ContainerTarget
            @Option(help: "The APNs authentication key file from Apple's developer site (AuthKey_<key id>.p8).") var keyFile: String
            @Option(help: "The key's id (10 characters, shown beside it on Apple's developer site).") var keyID: String
            @Option(help: "Your Apple developer team id (10 characters).") var teamID: String
            @Option(help: "The app's bundle id: APNs' topic.") var topic: String
            @OptionGroup var options: ClientOptions

            func run() async throws {
                try await runAdmin {
                    guard let pem = try? String(contentsOfFile: keyFile, encoding: .utf8) else { throw CLIError("cannot read \(keyFile)") }
                    let body: JSON = ["environment": .string(target.environment), "key": .string(pem), "keyID": .string(keyID),
                                      "teamID": .string(teamID), "topic": .string(topic)]
                    let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(target.container))/push/apns", body: body)
                    options.output(response) {
                        "APNs set for \(target.container) / \(target.environment): topic \(topic), key \(keyID), team \(teamID) (the key is stored sealed and not shown again)"
                    }
                }
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "Remove an environment's APNs credential: its APNs devices get no pushes, and those waiting are dropped.")
            @OptionGroup var target: ContainerTarget
            @OptionGroup var options: ClientOptions

            func run() async throws {
                try await runAdmin {
                    let response = try await options.client.send("DELETE", "management/1/containers/\(pathComponent(target.container))/push/apns?environment=\(target.environment)")
                    options.output(response) { "APNs removed for \(target.container) / \(target.environment)" }
                }
            }
        }
    }
}
