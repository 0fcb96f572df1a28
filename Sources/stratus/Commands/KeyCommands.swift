import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

struct KeyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key", abstract: "Add, list and revoke server-to-server keys (signed requests, no user).",
        discussion: Help.text("""
            A server-to-server key lets your own server call the data API without an API token or a user:
            it signs each request with an EC P-256 private key whose public half Stratus knows. Such a
            request acts on the container-environment's public database with the container
            administrator's privileges (security roles do not restrict it).

            Make a key pair and register the public key:
              openssl ecparam -name prime256v1 -genkey -noout -out eckey.pem
              openssl ec -in eckey.pem -pubout -out pub.pem
              stratus key add --container iCloud.com.example.Notes --environment development --public-key-file pub.pem

            Then send, with every request, the headers X-Apple-CloudKit-Request-KeyID (the printed key ID),
            X-Apple-CloudKit-Request-ISO8601Date (now, like 2026-11-24T10:00:00Z) and
            X-Apple-CloudKit-Request-SignatureV1: base64 of the ECDSA SHA-256 signature of the text
            "<date>:<base64 of SHA-256 of the body>:<path>", these three joined by ':', e.g.:
              2026-11-24T10:00:00Z
              47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=
              /database/1/iCloud.com.example.Notes/development/public/zones/list
            """),
        subcommands: [Add.self, List.self, Revoke.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Register a P-256 public key (PEM) and print its key ID (audited).")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: String
        @Option(help: "The public key's PEM file (openssl ec -in eckey.pem -pubout).") var publicKeyFile: String
        @Option(help: "A name to recognise the key by.") var name: String?
        @OptionGroup var options: ClientOptions

        func validate() throws {
            guard ContainerEnvironment(rawValue: environment) != nil else { throw ValidationError("--environment must be 'development' or 'production'") }
        }

        func run() async throws {
            try await runAdmin {
                guard let pem = try? String(contentsOfFile: publicKeyFile, encoding: .utf8) else { throw CLIError("cannot read \(publicKeyFile)") }
                var body: [String: JSON] = ["environment": .string(environment), "publicKey": .string(pem)]
                if let name { body["name"] = .string(name) }
                let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(container))/keys", body: .object(body))
                if options.json {
                    print(JSONWriter.string(["keyID": response["keyID"] ?? .null]))
                } else {
                    print("\(response["keyID"]?.stringValue ?? "")\n(key ID for \(container) / \(environment): send it as X-Apple-CloudKit-Request-KeyID)")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a container's server-to-server keys.")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(pathComponent(container))/keys")
                options.output(response) {
                    let rows = (response["keys"]?.arrayValue ?? []).map { key -> String in
                        let state = key["revokedAt"] == .null ? "active" : "revoked"
                        return "\(key["keyID"]?.stringValue ?? "")\t\(key["environment"]?.stringValue ?? "")\t\(key["name"]?.stringValue ?? "")\t\(state)\t\(key["createdAt"]?.stringValue ?? "")"
                    }
                    return rows.isEmpty ? "no server-to-server keys: add one with 'stratus key add'" : (["KEY ID\tENVIRONMENT\tNAME\tSTATE\tCREATED"] + rows).joined(separator: "\n")
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a key: every server process refuses it within a second (audited).",
                                                        discussion: "Example: stratus key revoke --container iCloud.com.example.Notes 3f2a9c1e")
        @Option(help: "Container identifier.") var container: String
        @Argument(help: "The key ID, or its first 8 or more digits.") var keyID: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(container))/keys/\(pathComponent(keyID))/revoke")
                options.output(response) { "revoked key \(response["key"]?["keyID"]?.stringValue ?? keyID) of \(container)" }
            }
        }
    }
}
