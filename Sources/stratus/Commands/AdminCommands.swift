import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Options every admin verb shares.
struct ClientOptions: ParsableArguments {
    @Option(help: "Server URL (env STRATUS_SERVER, default http://127.0.0.1:8080).") var server: String?
    @Option(name: .customLong("admin-token"),
            help: "Admin token (env STRATUS_ADMIN_TOKEN; default: your 'stratus login' credential for the server, else the token in <data-dir>/admin-token).")
    var adminToken: String?
    @Option(name: .customLong("data-dir"), help: "Where 'stratus serve' keeps local state (env STRATUS_DATA_DIR, default ./.stratus).") var dataDir: String?
    @Flag(help: "Print one JSON document instead of text.") var json = false

    /// A client of the server, with the first credential of: --admin-token, STRATUS_ADMIN_TOKEN,
    /// the operator credential 'stratus login' stored for this server, the admin token a local
    /// 'stratus serve' wrote.
    var client: ManagementClient {
        get throws {
            let url = try serverURL(server)
            if let token = setting(adminToken, "STRATUS_ADMIN_TOKEN") { return ManagementClient(base: url, token: token) }
            if let entry = CredentialStore.standard.entry(for: url) {
                return ManagementClient(base: url, token: entry.credential, signedInAs: entry.email)
            }
            guard let token = try localAdminToken(dataDir: setting(dataDir, "STRATUS_DATA_DIR", default: ".stratus")!, create: false) else {
                throw ValidationError("not signed in: run 'stratus login' (or set STRATUS_ADMIN_TOKEN, or --admin-token, to the token the server was started with)")
            }
            return ManagementClient(base: url, token: token)
        }
    }

    /// Prints `value` as JSON when `--json` is set, else `text()`.
    /// Prints the answer: its JSON with --json; else the text, whose tab-separated tables are
    /// aligned in columns on a terminal and left tab-separated for a pipe (for `cut -f`, `awk -F'\t'`).
    func output(_ value: JSON, text: () -> String) {
        if json { return print(JSONWriter.string(value)) }
        print(isatty(STDOUT_FILENO) != 0 ? TextTable.aligned(text()) : text())
    }
}

/// A thin client of the management API.
struct ManagementClient {
    var base: URL
    /// The bearer credential (`nil` for signing in).
    var token: String?
    /// The operator whose stored credential `token` is, if it is one.
    var signedInAs: String? = nil

    /// Sends a request and returns the JSON body; a CKWS error dictionary becomes a thrown message.
    func send(_ method: String, _ path: String, body: JSON? = nil) async throws -> JSON {
        let text = base.absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/")) + "/" + path
        guard let url = URL(string: text) else { throw CLIError("invalid server URL \(text)") }
        var request = URLRequest(url: url)
        request.httpMethod = method
        if let token { request.setValue("Bearer " + token, forHTTPHeaderField: "Authorization") }
        if let body {
            request.httpBody = Data(JSONWriter.bytes(body))
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        }
        request.timeoutInterval = 120
        let data: Data
        let response: URLResponse
        do {
            (data, response) = try await URLSession.shared.data(for: request)
        } catch {
            throw CLIError("cannot reach the Stratus server at \(base.absoluteString) (\(error.localizedDescription)); is 'stratus serve' running?")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        let json = try? JSONParser.parse(Array(data))
        guard (200..<300).contains(status) else {
            let reason = json?["reason"]?.stringValue ?? String(decoding: data.prefix(300), as: UTF8.self)
            let code = json?["serverErrorCode"]?.stringValue ?? "HTTP \(status)"
            throw CLIError("\(code): \(reason)")
        }
        guard let json else { throw CLIError("the server answered with something that is not JSON") }
        return json
    }
}

/// An error the CLI reports as one line on stderr with a non-zero exit.
/// Runs an admin verb: errors become one line on stderr and exit code 1.
func runAdmin(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let error as CLIError {
        printError(error.description)
        throw ExitCode.failure
    } catch let error as ValidationError {
        printError(error.message)
        throw ExitCode(64)
    }
}

struct ContainerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "container", abstract: "Create, list, export and import containers.",
        subcommands: [Create.self, List.self, Export.self, Import.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a container (one per app or app family).",
                                                        discussion: "Example: stratus container create iCloud.com.example.Notes")
        @Argument(help: "Container identifier: letters, digits, '.', '-', '_' (e.g. iCloud.com.example.Notes).") var id: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("POST", "management/1/containers", body: ["name": .string(id)])
                options.output(response) { "created container \(id)" }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List containers.")
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers")
                options.output(response) {
                    let rows = (response["containers"]?.arrayValue ?? []).map {
                        "\($0["name"]?.stringValue ?? "")\t\($0["createdAt"]?.stringValue ?? "")"
                    }
                    return rows.isEmpty ? "no containers yet: create one with 'stratus container create ID'" : (["NAME\tCREATED"] + rows).joined(separator: "\n")
                }
            }
        }
    }
}

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token", abstract: "Create, list, update and revoke API tokens (ckAPIToken).",
        subcommands: [Create.self, List.self, Update.self, Revoke.self])

    struct Update: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change an API token's allowed origins or sign-in callback (audited; every server process within a second).",
            discussion: Help.text("""
                Examples:
                  stratus token update --container iCloud.com.example.Notes 3 --allowed-origin https://notes.example.com
                  stratus token update --container iCloud.com.example.Notes 3 --any-origin --no-signin-callback
                """))
        @Option(help: "Container identifier.") var container: String
        @Argument(help: "The token's id (from 'stratus token list') or its prefix.") var token: String
        @Option(help: "A web origin browsers may call from (repeat for several); replaces the list.") var allowedOrigin: [String] = []
        @Flag(help: "Let any origin call (clears the allowed origins).") var anyOrigin = false
        @Option(help: "The sign-in callback URL.") var signinCallback: String?
        @Flag(help: "Remove the sign-in callback.") var noSigninCallback = false
        @OptionGroup var options: ClientOptions

        func validate() throws {
            if anyOrigin, !allowedOrigin.isEmpty { throw ValidationError("give --allowed-origin or --any-origin, not both") }
            if noSigninCallback, signinCallback != nil { throw ValidationError("give --signin-callback or --no-signin-callback, not both") }
            if !anyOrigin, allowedOrigin.isEmpty, !noSigninCallback, signinCallback == nil {
                throw ValidationError("nothing to change: give --allowed-origin, --any-origin, --signin-callback or --no-signin-callback")
            }
        }

        func run() async throws {
            try await runAdmin {
                var body: [String: JSON] = [:]
                if anyOrigin { body["allowedOrigins"] = [] } else if !allowedOrigin.isEmpty { body["allowedOrigins"] = .array(allowedOrigin.map { .string($0) }) }
                if noSigninCallback { body["signInCallback"] = .null } else if let signinCallback { body["signInCallback"] = .string(signinCallback) }
                let response = try await options.client.send("PATCH", "management/1/containers/\(pathComponent(container))/tokens/\(pathComponent(token))", body: .object(body))
                options.output(response) {
                    let origins = response["token"]?["allowedOrigins"]?.arrayValue?.compactMap(\.stringValue) ?? []
                    let callback = response["token"]?["signInCallback"]?.stringValue ?? "none"
                    return "updated token \(token) of \(container): allowed origins \(origins.isEmpty ? "any" : origins.joined(separator: " ")); sign-in callback \(callback)"
                }
            }
        }
    }

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create an API token for one container-environment. The token is shown once; only its hash is stored.",
            discussion: Help.text("""
                A production token names the web origins its app runs on (--allowed-origin, repeat for
                several): browsers elsewhere may not call with it, and the sign-in page hands sessions
                only to those origins. A token for native apps only, or one that must be usable from
                any web page, says --any-origin instead; the sign-in page then hands sessions to no
                web page (use --signin-callback, or name the origins later with 'stratus token update').
                A development token without origins lets pages on localhost receive sessions.

                Examples:
                  stratus token create --container iCloud.com.example.Notes --environment development --name web
                  stratus token create --container iCloud.com.example.Notes --environment production --name web --allowed-origin https://notes.example.com
                  stratus token create --container iCloud.com.example.Notes --environment production --name ios --any-origin
                """))
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment: String
        @Option(help: "A name to recognise the token by.") var name: String?
        @Option(help: "A web origin browsers may call from, e.g. https://app.example.com (repeat for several). A production token needs one, or --any-origin.")
        var allowedOrigin: [String] = []
        @Flag(help: "Let any origin call (a production token must say this or name its origins; the sign-in page then posts sessions to no page).")
        var anyOrigin = false
        @Option(help: "Where the sign-in page sends a user who signed in, with ?ckWebAuthToken=… (none: the page hands the token to the window that opened it).")
        var signinCallback: String?
        @OptionGroup var options: ClientOptions

        func validate() throws {
            guard let environment = ContainerEnvironment(rawValue: environment) else {
                throw ValidationError("--environment must be 'development' or 'production'")
            }
            if anyOrigin, !allowedOrigin.isEmpty { throw ValidationError("give --allowed-origin or --any-origin, not both") }
            if environment == .production, allowedOrigin.isEmpty, !anyOrigin {
                throw ValidationError("""
                    a production token names the web origins its app runs on: give --allowed-origin https://app.example.com \
                    (repeat for several), or --any-origin for a token of native apps or one any web page may use
                    """)
            }
        }

        func run() async throws {
            if anyOrigin, environment == ContainerEnvironment.production.rawValue {
                printError("""
                    warning: this production token may be used from any web page, and the sign-in page will hand its sessions to no web page; \
                    name the app's origins with 'stratus token update --allowed-origin' when it runs in a browser
                    """)
            }
            try await runAdmin {
                var body: [String: JSON] = ["environment": .string(environment)]
                if let name { body["name"] = .string(name) }
                if !allowedOrigin.isEmpty { body["allowedOrigins"] = .array(allowedOrigin.map { .string($0) }) }
                if let signinCallback { body["signInCallback"] = .string(signinCallback) }
                let response = try await options.client.send("POST", "management/1/containers/\(pathComponent(container))/tokens", body: .object(body))
                options.output(response) {
                    """
                    \(response["apiToken"]?.stringValue ?? "")
                    (API token for \(container) / \(environment); store it now, it is not shown again)
                    """
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List API tokens (never their secrets).")
        @Option(help: "Only this container's tokens.") var container: String?
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                var path = "management/1/tokens"
                if let container { path += "?container=" + (container.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? container) }
                let response = try await options.client.send("GET", path)
                options.output(response) {
                    var unnamed = 0
                    let rows = (response["tokens"]?.arrayValue ?? []).map { token -> String in
                        let state = token["revokedAt"] == .null ? "active" : "revoked"
                        let list = (token["allowedOrigins"]?.arrayValue ?? []).compactMap(\.stringValue)
                        var origins = list.isEmpty ? "any" : list.joined(separator: " ")
                        if list.isEmpty, state == "active", token["environment"]?.stringValue == ContainerEnvironment.production.rawValue {
                            origins += " (!)"
                            unnamed += 1
                        }
                        return "\(token["id"].map { JSONWriter.string($0) } ?? "")\t\(token["container"]?.stringValue ?? "")\t\(token["environment"]?.stringValue ?? "")\t\(token["name"]?.stringValue ?? "")\t\(token["prefix"]?.stringValue ?? "")…\t\(state)\t\(origins)"
                    }
                    guard !rows.isEmpty else { return "no API tokens" }
                    var lines = ["ID\tCONTAINER\tENVIRONMENT\tNAME\tPREFIX\tSTATE\tORIGINS"] + rows
                    if unnamed > 0 {
                        lines.append("""
                            (!) \(unnamed) active production token(s) name no origins: any web page may call with them, and the sign-in page \
                            hands their sessions to no page. Name the app's origins: stratus token update --container C ID --allowed-origin https://…
                            """)
                    }
                    return lines.joined(separator: "\n")
                }
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke an API token by id or prefix; requests using it fail within seconds.",
                                                        discussion: "Example: stratus token revoke --container iCloud.com.example.Notes 3")
        @Option(help: "Container identifier.") var container: String
        @Argument(help: "The token's id (from 'stratus token list') or its prefix.") var token: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("POST", "management/1/containers/\(container)/tokens/\(token)/revoke")
                options.output(response) { "revoked token \(token) of \(container)" }
            }
        }
    }
}

