import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore

/// Users, tokens and keys, subscriptions, shares, usage and quotas, the audit log and the team.
struct ConsoleAdminPages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        addConsoleUserPages(router)
        addConsoleCredentialPages(router)
        addConsoleUsagePages(router)
        addConsoleTeamPages(router)
    }

    // MARK: Users

    func addConsoleUserPages(_ router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/users") { call in
            let container = call.container
            let environment = call.environment
            let users = try await call.require(.users, query: ["environment": environment.rawValue])["users"]?.arrayValue ?? []
            let search = call.query("q")?.lowercased()
            let found = users.filter { user in
                guard let search else { return true }
                return (user["emailAddress"]?.stringValue ?? "").lowercased().contains(search) || (user["userRecordName"]?.stringValue ?? "").lowercased().contains(search)
            }
            let access = await call.access()
            let rows = found.prefix(500).map { user -> [HTML] in
                let name = user["userRecordName"]?.stringValue ?? ""
                let disabled = user["disabledAt"] != .null
                let base = ConsolePath.make("c", container, "users", name)
                var actions: [HTML] = []
                if access.may(disabled ? .enableUser : .disableUser) {
                    actions.append(ConsoleLayout.button(call.user, action: base + (disabled ? "/enable" : "/disable"), label: disabled ? "Enable" : "Disable",
                                                        fields: [("environment", environment.rawValue)], danger: !disabled))
                }
                if access.may(.exportUser) { actions.append("<a href=\"\(base)/export\">Export</a>") }
                if access.may(.eraseUser) { actions.append("<a href=\"\(base)/erase\">Erase…</a>") }
                return [HTML.isolated(user["emailAddress"]?.stringValue ?? ""), "<code>\(name)</code>", "\(disabled ? "disabled" : "active")",
                        "\(user["liveSessions"]?.intValue ?? 0)", actions.isEmpty ? "—" : HTML.join(actions, separator: " ")]
            }
            let searchForm: HTML = """
                <form method="get" action="\(ConsolePath.make("c", container, "users"))" class="inline">
                <label for="environment">Environment</label> \(ConsoleLayout.environmentSelect(environment))
                <label for="q">Email or record name</label> <input id="q" name="q" value="\(call.query("q") ?? "")" type="search">
                <button type="submit">Search</button></form>
                """
            let more: HTML = found.count > 500 ? "<p>Showing 500 of \(found.count): search to narrow.</p>" : ""
            return call.page("Users", container: container, section: "users",
                             "\(searchForm)\(ConsoleLayout.table("Users of \(environment.rawValue)", ["Email", "Record name", "State", "Sessions", "Actions"], Array(rows), empty: "No users match."))\(more)")
        }
        for (verb, label) in [("disable", "disabled"), ("enable", "enabled")] {
            console.route(router, .post, "/console/c/:container/users/:user/\(verb)", confirm: verb == "disable" ? Self.disableConfirmation : nil) { call in
                let container = call.container
                let user = ConsoleController.pathParameter(call.context, "user")
                let answer = await call.api(verb == "disable" ? .disableUser : .enableUser, ["user": ConsolePath.segment(user)])
                let back = ConsolePath.make("c", container, "users") + ConsolePath.query([("environment", call.form["environment"] ?? "development")])
                guard answer.ok else {
                    if answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
                    return ConsoleController.seeOther(back + "&error=" + ConsolePath.segment(answer.reason))
                }
                return ConsoleController.seeOther(back + "&notice=" + ConsolePath.segment("\(answer.json["user"]?["emailAddress"]?.stringValue ?? user) is \(label)"))
            }
        }
        console.route(router, .get, "/console/c/:container/users/:user/export") { call in
            let container = call.container
            let user = ConsoleController.pathParameter(call.context, "user")
            let exported = try await call.require(.exportUser, ["user": ConsolePath.segment(user)])
            var headers = ConsoleController.consoleHeaders(contentType: "application/json; charset=utf-8")
            headers[.contentDisposition] = "attachment; filename=\"user-\(ConsolePath.segment(user)).json\""
            return Response(status: .ok, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: JSONWriter.string(exported))))
        }
        console.route(router, .get, "/console/c/:container/users/:user/erase") { call in
            let container = call.container
            let user = ConsoleController.pathParameter(call.context, "user")
            let found = try await call.require(.user, ["user": ConsolePath.segment(user)])["user"]
            let name = found?["userRecordName"]?.stringValue ?? user
            let body: HTML = """
                <p>Erasing <strong>\(HTML.isolated(found?["emailAddress"]?.stringValue ?? ""))</strong> (<code>\(name)</code>) deletes their account, their private zones and
                records, the public records they created and their subscriptions, in both environments. It cannot be undone.</p>
                <form method="post" action="\(ConsolePath.make("c", container, "users", name, "erase"))" class="stack">\(ConsoleLayout.csrf(call.user))
                <label for="confirm">Type the user's record name to confirm: \(name)</label><input id="confirm" name="confirm" autocomplete="off">
                <button type="submit" class="danger">Erase this user</button></form>
                """
            return call.page("Erase a user", container: container, section: "users", body)
        }
        console.route(router, .post, "/console/c/:container/users/:user/erase") { call in
            let container = call.container
            let user = ConsoleController.pathParameter(call.context, "user")
            let answer = await call.api(.eraseUser, ["user": ConsolePath.segment(user)], body: ["confirm": .string(call.form["confirm"] ?? "")])
            guard answer.ok else {
                if answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
                return ConsoleController.seeOther(ConsolePath.make("c", container, "users", user, "erase") + ConsolePath.query([("error", "type the record name exactly; nothing was erased")]))
            }
            return ConsoleController.seeOther(ConsolePath.make("c", container, "users") + ConsolePath.query([("notice", "erased \(user)")]))
        }
    }

    /// Disabling a user, asked first.
    @Sendable static func disableConfirmation(_ call: ConsoleCall) -> ConsoleConfirmation {
        let user = ConsoleController.pathParameter(call.context, "user")
        return ConsoleConfirmation(title: "Disable \(user)?",
                                   consequence: "\(user) can no longer sign in, and every session of theirs ends at once, on every server. Their data stays; you can enable them again.",
                                   action: "Disable the user", back: ConsolePath.make("c", call.container, "users"),
                                   route: .disableUser, parameters: ["user": ConsolePath.segment(user)])
    }

    // MARK: Tokens, keys, subscriptions, shares

    func addConsoleCredentialPages(_ router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/tokens") { call in
            let container = call.container
            let tokens = try await call.require(.tokens, query: ["container": container])["tokens"]?.arrayValue ?? []
            let keys = try await call.require(.keys)["keys"]?.arrayValue ?? []
            let access = await call.access()
            let tokenRows = tokens.map { token -> [HTML] in
                let id = token["id"]?.intValue ?? 0
                let live = token["revokedAt"] == .null
                    && access.may(.revokeToken, in: token["environment"]?.stringValue.flatMap(ContainerEnvironment.init(rawValue:)))
                let revoke: HTML = live ? ConsoleLayout.button(call.user, action: ConsolePath.make("c", container, "tokens", String(id), "revoke"), label: "Revoke", danger: true) : "revoked"
                let origins = (token["allowedOrigins"]?.arrayValue ?? []).compactMap(\.stringValue)
                let production = token["environment"]?.stringValue == ContainerEnvironment.production.rawValue
                let any: HTML = live && production ? "any (the sign-in page hands its sessions to no page: name the app's origins with stratus token update)" : "any"
                return ["\(id)", HTML.isolated(token["name"]?.stringValue ?? ""), "\(token["environment"]?.stringValue ?? "")", "<code>\(token["prefix"]?.stringValue ?? "")…</code>",
                        origins.isEmpty ? any : "\(origins.joined(separator: " "))", revoke]
            }
            let keyRows = keys.map { key -> [HTML] in
                let id = key["keyID"]?.stringValue ?? ""
                let live = key["revokedAt"] == .null
                    && access.may(.revokeKey, in: key["environment"]?.stringValue.flatMap(ContainerEnvironment.init(rawValue:)))
                let revoke: HTML = live ? ConsoleLayout.button(call.user, action: ConsolePath.make("c", container, "keys", id, "revoke"), label: "Revoke", danger: true) : "revoked"
                return ["<code>\(String(id.prefix(16)))…</code>", HTML.isolated(key["name"]?.stringValue ?? ""), "\(key["environment"]?.stringValue ?? "")", revoke]
            }
            let tok = ConsoleLayout.csrf(call.user)
            let tokenEnvironments = access.environments(for: .createToken), keyEnvironments = access.environments(for: .addKey)
            let tokenForm: HTML = tokenEnvironments.isEmpty ? "" : """
                <form method="post" action="\(ConsolePath.make("c", container, "tokens"))" class="stack">\(tok)<h2>Create an API token</h2>
                <label for="environment">Environment</label>\(ConsoleLayout.environmentSelect(.development, among: tokenEnvironments))
                <label for="token-name">Name</label><input id="token-name" name="name" value="console" maxlength="200">
                <label for="token-origins">Allowed origins, one per line (such as https://app.example.com; a production token needs them, or any origin)</label>
                <textarea id="token-origins" name="origins" rows="2"></textarea>
                <label class="check"><input id="token-any-origin" type="checkbox" name="anyOrigin" value="1"> Any origin (native apps; the sign-in page then hands sessions to no page)</label>
                <button type="submit">Create</button></form>
                """
            let keyForm: HTML = keyEnvironments.isEmpty ? "" : """
                <form method="post" action="\(ConsolePath.make("c", container, "keys"))" class="stack">\(tok)<h2>Add a server-to-server key</h2>
                <label for="key-environment">Environment</label>\(ConsoleLayout.environmentSelect(.development, id: "key-environment", among: keyEnvironments))
                <label for="key-name">Name</label><input id="key-name" name="name" value="server key" maxlength="200">
                <label for="key-pem">Public key (PEM, P-256: openssl ec -in eckey.pem -pubout)</label><textarea id="key-pem" name="publicKey" rows="5"></textarea>
                <button type="submit">Add</button></form>
                """
            let body: HTML = """
                \(ConsoleLayout.table("API tokens", ["ID", "Name", "Environment", "Prefix", "Allowed origins", ""], tokenRows, empty: "No API tokens yet."))
                \(tokenForm)
                \(ConsoleLayout.table("Server-to-server keys", ["Key ID", "Name", "Environment", ""], keyRows, empty: "No server-to-server keys yet."))
                \(keyForm)
                """
            return call.page("Tokens and keys", container: container, section: "tokens", body)
        }
        console.route(router, .post, "/console/c/:container/tokens") { call in
            let container = call.container
            let environment = call.form["environment"] ?? ""
            let origins = (call.form["origins"] ?? "").split(whereSeparator: \.isWhitespace).map { JSON.string(String($0)) }
            let anyOrigin = call.form["anyOrigin"] != nil
            let back = ConsolePath.make("c", container, "tokens")
            if anyOrigin, !origins.isEmpty {
                return ConsoleController.seeOther(back + ConsolePath.query([("error", "give allowed origins or tick any origin, not both")]))
            }
            if environment == ContainerEnvironment.production.rawValue, origins.isEmpty, !anyOrigin {
                return ConsoleController.seeOther(back + ConsolePath.query([("error", "a production token names the web origins its app runs on; "
                                                                + "give them, or tick any origin for a token of native apps")]))
            }
            var request: [String: JSON] = ["environment": .string(environment), "name": .string(call.form.text("name") ?? "console")]
            if !origins.isEmpty { request["allowedOrigins"] = .array(origins) }
            let answer = await call.api(.createToken, body: request)
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            let secret = answer.json["apiToken"]?.stringValue ?? ""
            let body: HTML = """
                <p class="notice" role="status">Copy the token now: it is not shown again (only its hash is kept).</p>
                <label for="new-token">API token for \(container), \(answer.json["token"]?["environment"]?.stringValue ?? "")</label>
                <input id="new-token" readonly value="\(secret)" class="secret">
                <p><a href="\(ConsolePath.make("c", container, "tokens"))">Back to tokens and keys</a></p>
                """
            return call.page("New API token", container: container, section: "tokens", body)
        }
        console.route(router, .post, "/console/c/:container/keys") { call in
            let container = call.container
            let answer = await call.api(.addKey, body: [
                "environment": .string(call.form["environment"] ?? ""), "name": .string(call.form.text("name") ?? "server key"),
                "publicKey": .string(call.form["publicKey"] ?? ""),
            ])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: ConsolePath.make("c", container, "tokens")) }
            return ConsoleController.seeOther(ConsolePath.make("c", container, "tokens") + ConsolePath.query([("notice", "added key \(answer.json["keyID"]?.stringValue ?? "")")]))
        }
        // Revoking an API token or a server-to-server key: the same form, the same way back.
        for (kind, parameter, noun) in [("tokens", "token", "token"), ("keys", "key", "key")] {
            let confirm: @Sendable (ConsoleCall) -> ConsoleConfirmation = { call in
                let target = ConsoleController.pathParameter(call.context, parameter)
                let shown = target.count > 16 ? String(target.prefix(16)) + "…" : target
                let consequence = kind == "tokens"
                    ? "Apps that send API token \(shown) are refused from now on, and the sessions users signed in to through it can no longer be used with it. It cannot be undone: a new token has a new value."
                    : "Requests signed with server-to-server key \(shown) are refused from now on. It cannot be undone: a new key has a new ID."
                return ConsoleConfirmation(title: "Revoke \(kind == "tokens" ? "API token" : "server-to-server key") \(shown)?", consequence: consequence,
                                           action: "Revoke the \(noun)", back: ConsolePath.make("c", call.container, "tokens"),
                                           route: kind == "tokens" ? .revokeToken : .revokeKey, parameters: [parameter: ConsolePath.segment(target)])
            }
            console.route(router, .post, "/console/c/:container/\(kind)/:\(parameter)/revoke", confirm: confirm) { call in
                let container = call.container
                let target = ConsoleController.pathParameter(call.context, parameter)
                let back = ConsolePath.make("c", container, "tokens")
                let answer = await call.api(kind == "tokens" ? .revokeToken : .revokeKey, [parameter: ConsolePath.segment(target)])
                guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
                let shown = target.count > 16 ? String(target.prefix(16)) + "…" : target
                return ConsoleController.seeOther(back + ConsolePath.query([("notice", "revoked \(noun) \(shown)")]))
            }
        }
        console.route(router, .get, "/console/c/:container/subscriptions") { call in
            let container = call.container
            let environment = call.environment
            let found = try await call.require(.subscriptions, query: ["environment": environment.rawValue])["subscriptions"]?.arrayValue ?? []
            let rows = found.map { item -> [HTML] in
                ["<code>\(item["owner"]?.stringValue ?? "")</code>", "\(item["database"]?.stringValue ?? "")", "\(item["subscriptionID"]?.stringValue ?? "")",
                 "\(item["subscriptionType"]?.stringValue ?? "")", "\(item["query"]?["recordType"]?.stringValue ?? item["zoneID"]?["zoneName"]?.stringValue ?? "")"]
            }
            let body: HTML = """
                \(ConsoleLayout.environmentPicker(environment, action: ConsolePath.make("c", container, "subscriptions")))
                \(ConsoleLayout.table("Subscriptions", ["Subscriber", "Database", "ID", "Type", "Watches"], rows, empty: "No subscriptions."))
                """
            return call.page("Subscriptions", container: container, section: "subscriptions", body)
        }
        console.route(router, .get, "/console/c/:container/shares") { call in
            let container = call.container
            let environment = call.environment
            let found = try await call.require(.shares, query: ["environment": environment.rawValue])["shares"]?.arrayValue ?? []
            let rows = found.map { item -> [HTML] in
                let participants = (item["participants"]?.arrayValue ?? []).compactMap { $0["emailAddress"]?.stringValue ?? $0["userRecordName"]?.stringValue }
                return ["<code>\(item["owner"]?.stringValue ?? "")</code>", "\(item["zoneName"]?.stringValue ?? item["zone"]?.stringValue ?? "")",
                        "\(item["shortGUID"]?.stringValue ?? "")", "\(participants.joined(separator: ", "))"]
            }
            let body: HTML = """
                \(ConsoleLayout.environmentPicker(environment, action: ConsolePath.make("c", container, "shares")))
                \(ConsoleLayout.table("Shares", ["Owner", "Zone", "Short GUID", "Participants"], rows, empty: "No shares."))
                """
            return call.page("Shares", container: container, section: "shares", body)
        }
    }

    // MARK: Usage, quotas, audit

    func addConsoleUsagePages(_ router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/usage") { call in
            let container = call.container
            let environment = call.environment
            let usage = try await call.require(.usage, query: ["environment": environment.rawValue])
            let quota = try await call.require(.quota, query: ["environment": environment.rawValue])
            let limits = usage["limits"]?.objectValue ?? [:]
            let requests = [("lastMinute", "The last minute"), ("lastHour", "The last hour"), ("lastDay", "The last day")].map { period, label -> [HTML] in
                let counts = usage["requests"]?[period]
                return ["\(label)"] + ["requests", "throttled", "refused", "notifications", "signups", "signupsThrottled"].map { key -> HTML in
                    Self.figure(counts?[key]?.intValue ?? 0)
                }
            }
            let top = (usage["topUsers"]?.arrayValue ?? []).map { user -> [HTML] in
                ["<code>\(user["userRecordName"]?.stringValue ?? "")</code>", Self.figure(user["records"]?.intValue ?? 0),
                 "\(ConsoleUnits.bytes(user["bytes"]?.intValue ?? 0))"]
            }
            let inputs = QuotaLimits.keys.map { key -> HTML in
                let value = quota["limits"]?[key.name]?.intValue ?? 0
                let about = Self.limitWords[key.name] ?? (key.name, "")
                let shown = key.name.hasSuffix("Bytes") ? " (now \(ConsoleUnits.bytes(value)))" : value >= 10_000 ? " (now \(ConsoleUnits.count(value)))" : ""
                return """
                    <label for="q-\(key.name)">\(about.0)\(shown) <span class="hint">\(about.1) <code>\(key.name)</code></span></label>
                    <input id="q-\(key.name)" name="\(key.name)" inputmode="numeric" value="\(value)">
                    """
            }
            let quotaForm: HTML = (await call.access()).may(.setQuota) ? """
                <form method="post" action="\(ConsolePath.make("c", container, "quota"))" class="stack">\(ConsoleLayout.csrf(call.user))
                <h2>Limits of \(environment.rawValue)</h2><input type="hidden" name="environment" value="\(environment.rawValue)">
                <p class="hint">Whole numbers; bytes as bytes (10 GiB is 10737418240).</p>
                \(inputs)<button type="submit">Save the limits</button></form>
                """ : "<p>Changing the limits needs the owner role.</p>"
            let body: HTML = """
                \(ConsoleLayout.environmentPicker(environment, action: ConsolePath.make("c", container, "usage")))
                <section class="bars">
                \(ConsoleLayout.bar("Records", value: usage["records"]?.intValue ?? 0, limit: limits["maxRecords"]?.intValue ?? 0, unit: .count))
                \(ConsoleLayout.bar("Storage", value: usage["bytes"]?.intValue ?? 0, limit: limits["maxStorageBytes"]?.intValue ?? 0, unit: .bytes))
                </section>
                \(ConsoleLayout.table("Data API work", ["Period", "Operations", "Throttled", "Refused", "Notifications", "Sign-ups", "Sign-ups throttled"], requests, empty: ""))
                <p class="hint">Operations are what the rate limits count: a lookup's records, a modify's operations, 1 for any other request. So they
                are not the HTTP requests that Telemetry and Logs count (one a request). Throttled: operations answered THROTTLED past a rate
                limit; refused: past a storage limit. Notifications: queued for subscribers. Sign-ups: accounts made and sign-in attempts let through.</p>
                \(ConsoleLayout.table("Top users by private storage", ["User", "Records", "Storage"], top, empty: "No user stores anything yet."))
                \(quotaForm)
                """
            return call.page("Usage and quotas", container: container, section: "usage", body)
        }
        console.route(router, .post, "/console/c/:container/quota") { call in
            let container = call.container
            let environment = call.form["environment"] ?? "development"
            var body: [String: JSON] = ["environment": .string(environment)]
            for key in QuotaLimits.keys {
                guard let text = call.form.text(key.name) else { continue }
                body[key.name] = Int64(text).map { .int($0) } ?? .string(text)
            }
            let back = ConsolePath.make("c", container, "usage") + ConsolePath.query([("environment", environment)])
            let answer = await call.api(.setQuota, body: body)
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + "&notice=" + ConsolePath.segment("saved the limits of \(environment)"))
        }
        console.route(router, .get, "/console/c/:container/audit") { call in
            let container = call.container
            let body = try await ConsoleAudit.section(call, route: .audit, path: ConsolePath.make("c", container, "audit"), caption: "Audit log")
            return call.page("Audit log", container: container, section: "audit", body)
        }
    }

    /// A count in words ("12.5 k"), the exact figure in its title.
    static func figure(_ value: Int64) -> HTML {
        value < 10_000 ? "\(value)" : "<span title=\"\(value)\">\(ConsoleUnits.count(value))</span>"
    }

    /// Each limit's name in words and what it limits.
    static let limitWords: [String: (String, String)] = [
        "maxRecords": ("Records", "records the environment may hold, all databases;"),
        "maxStorageBytes": ("Storage", "bytes of records and assets, all databases;"),
        "requestsPerSecond": ("Operations a second", "the whole environment;"),
        "userRequestsPerSecond": ("Operations a second per user", "each signed-in user;"),
        "userPrivateStorageBytes": ("Private storage per user", "bytes in each user's private database;"),
        "notificationsPerSecond": ("Notifications a second", "queued for subscribers; more are dropped;"),
        "pushesPerSecond": ("Pushes a second", "sent to devices; more wait their turn;"),
        "signupsPerAddressPerHour": ("Sign-ups an hour per address", "from one client address;"),
        "signupsPerHour": ("Sign-ups an hour", "the whole environment;"),
        "logRequests": ("Requests the log keeps", "the newest; 0 keeps none;"),
    ]

    /// The actions a container's audit log records, for its filter.
    static let auditActions = ["container.create", "container.import", "token.create", "token.update", "token.revoke", "key.add", "key.revoke", "push.apns.set", "push.apns.remove", "schema.import",
                               "schema.deploy", "schema.reset", "user.disable", "user.enable", "user.erase", "role.assign", "role.unassign",
                               "quota.set", "team.add", "team.role", "team.remove", "records.read", "records.modify"]

    // MARK: Team

    func addConsoleTeamPages(_ router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/team") { call in
            let container = call.container
            let team = try await call.require(.team)["team"]?.arrayValue ?? []
            let roles = TeamRole.allCases.reversed().map(\.description)
            let manages = (await call.access()).may(.setTeamRole)
            let rows = team.map { member -> [HTML] in
                let email = member["emailAddress"]?.stringValue ?? ""
                let current = member["role"]?.stringValue ?? ""
                let options = roles.map { "<option\($0 == current ? " selected" : "")>\($0)</option>" as HTML }
                let base = ConsolePath.make("c", container, "team", email)
                let change: HTML = """
                    <form method="post" action="\(base)/role" class="inline">\(ConsoleLayout.csrf(call.user))
                    <label class="visually-hidden" for="role-\(email)">Role of \(email)</label><select id="role-\(email)" name="role">\(options)</select>
                    <button type="submit">Change</button></form>
                    """
                guard manages else { return [HTML.isolated(email), "\(current)", "\(member["disabled"] == true ? "disabled" : "active")", "", ""] }
                return [HTML.isolated(email), "\(current)", "\(member["disabled"] == true ? "disabled" : "active")", change,
                        ConsoleLayout.button(call.user, action: base + "/remove", label: "Remove", danger: true)]
            }
            let options = roles.map { "<option>\($0)</option>" as HTML }
            let addForm: HTML = manages ? """
                <form method="post" action="\(ConsolePath.make("c", container, "team"))" class="stack">\(ConsoleLayout.csrf(call.user))<h2>Add an operator</h2>
                <label for="member-email">Their email address</label><input id="member-email" name="operator" type="email" required>
                <label for="member-role">Role</label><select id="member-role" name="role">\(options)</select>
                <button type="submit">Add</button></form>
                """ : ""
            let body: HTML = """
                \(ConsoleLayout.table("Team of \(container)", ["Operator", "Role", "State", "Role change", ""], rows, empty: "No team yet: superusers administer this container."))
                \(addForm)
                <p>Owners: everything for the container. Developers: development fully, production read-only. Viewers: read only.</p>
                """
            return call.page("Team", container: container, section: "team", body)
        }
        console.route(router, .post, "/console/c/:container/team") { call in
            let container = call.container
            let back = ConsolePath.make("c", container, "team")
            let answer = await call.api(.addTeamMember, body: ["operator": .string(call.form.text("operator") ?? ""), "role": .string(call.form["role"] ?? "")])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + ConsolePath.query([("notice", "added \(call.form.text("operator") ?? "")")]))
        }
        console.route(router, .post, "/console/c/:container/team/:operator/role") { call in
            let container = call.container
            let member = ConsoleController.pathParameter(call.context, "operator")
            let back = ConsolePath.make("c", container, "team")
            let answer = await call.api(.setTeamRole, ["operator": ConsolePath.segment(member)], body: ["role": .string(call.form["role"] ?? "")])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + ConsolePath.query([("notice", "\(member) is now \(call.form["role"] ?? "")")]))
        }
        console.route(router, .post, "/console/c/:container/team/:operator/remove", confirm: { call in
            let member = ConsoleController.pathParameter(call.context, "operator")
            return ConsoleConfirmation(title: "Remove \(member) from the team?",
                                       consequence: "\(member) can no longer see or change \(call.container) (unless they are a superuser). Their operator account stays.",
                                       action: "Remove from the team", back: ConsolePath.make("c", call.container, "team"),
                                       route: .removeTeamMember, parameters: ["operator": ConsolePath.segment(member)])
        }) { call in
            let container = call.container
            let member = ConsoleController.pathParameter(call.context, "operator")
            let back = ConsolePath.make("c", container, "team")
            let answer = await call.api(.removeTeamMember, ["operator": ConsolePath.segment(member)])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + ConsolePath.query([("notice", "removed \(member)")]))
        }
    }
}

/// An audit log on a page (a container's, or the server's): filtered by action and operator,
/// newest first, a page at a time back to the first entry.
enum ConsoleAudit {
    /// Entries per page.
    static let pageSize = 100
    /// The actions the server-wide log records.
    static let serverActions = ["operator.add", "operator.remove", "operator.disable", "operator.enable", "operator.password", "operator.revoke"]

    /// The filter form, the page of entries, and links to older and newest.
    static func section(_ call: ConsoleCall, route: ManagementRoute, path: String, caption: String) async throws -> HTML {
        let action = call.query("action")
        let actor = call.query("actor")
        let before = call.query("before").flatMap { Int64($0) }.flatMap { $0 > 0 ? $0 : nil }
        var query = ["order": "newest", "limit": String(pageSize + 1)]
        if let action { query["action"] = action }
        if let actor { query["actor"] = actor }
        if let before { query["before"] = String(before) }
        let fetched = try await call.require(route, query: query)["entries"]?.arrayValue ?? []
        let shown = fetched.prefix(pageSize)
        let names = route == .serverAudit ? serverActions : ConsoleAdminPages.auditActions
        let actions = names.map { name -> HTML in "<option\(name == action ? " selected" : "")>\(name)</option>" }
        let rows = shown.map { entry -> [HTML] in
            [ConsoleLayout.time(entry["at"]?.stringValue), HTML.isolated(entry["actor"]?.stringValue ?? ""), "\(entry["action"]?.stringValue ?? "")",
             "\(entry["environment"]?.stringValue ?? "")", HTML.isolated(entry["target"]?.stringValue ?? ""), HTML.isolated(entry["detail"]?.stringValue ?? ""),
             "\(entry["address"]?.stringValue ?? "")"]
        }
        let kept = [("action", action), ("actor", actor)].compactMap { pair in pair.1.map { (pair.0, $0) } }
        var links: [HTML] = []
        if before != nil { links.append("<a href=\"\(path + ConsolePath.query(kept))\">Newest entries</a>") }
        if fetched.count > pageSize, let last = shown.last?["id"]?.intValue {
            links.append("<a rel=\"next\" href=\"\(path + ConsolePath.query(kept + [("before", String(last))]))\">Older entries</a>")
        } else if !shown.isEmpty {
            links.append("<span class=\"hint\">The first entry is the last shown.</span>")
        }
        func moment(_ entry: JSON?) -> String { entry?["at"]?.stringValue.map { $0.prefix(10) + " " + $0.dropFirst(11).prefix(8) } ?? "" }
        let range = shown.isEmpty ? "" : " (newest first, \(shown.count) entr\(shown.count == 1 ? "y" : "ies"): \(moment(shown.first)) back to \(moment(shown.last)) UTC)"
        return """
            <form method="get" action="\(path)" class="inline">
            <label for="action">Action</label> <select id="action" name="action"><option value="">any</option>\(actions)</select>
            <label for="actor">Operator</label> <input id="actor" name="actor" value="\(actor ?? "")" type="search">
            <button type="submit">Filter</button></form>
            \(ConsoleLayout.table(caption + range, ["When", "Who", "Action", "Environment", "Target", "Detail", "From"], Array(rows), empty: "No entries match.",
                                 widths: ["m", "m", "m", "s", "", "", "s"]))
            <p class="pages">\(HTML.join(links, separator: " "))</p>
            """
    }
}
