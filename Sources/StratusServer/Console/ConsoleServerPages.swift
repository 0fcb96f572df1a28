import Foundation
import HTTPTypes
import Hummingbird
import StratusCore

/// A superuser's pages: the operators (add, disable, enable, sign out everywhere, set a password),
/// the server's statistics and its audit log. Each reads and acts through the management API, so
/// anyone else is refused by it (and the header offers the pages only to superusers).
struct ConsoleServerPages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/operators") { call in
            let operators = try await call.require(.operators)["operators"]?.arrayValue ?? []
            let me = call.user.name.lowercased()
            let rows = operators.map { account -> [HTML] in
                let email = account["emailAddress"]?.stringValue ?? ""
                let disabled = account["disabledAt"] != .null && account["disabledAt"] != nil
                let base = ConsolePath.make("operators", email)
                let teams = (account["containers"]?.arrayValue ?? []).map { "\($0["name"]?.stringValue ?? "") (\($0["role"]?.stringValue ?? ""))" }
                var actions: [HTML] = []
                // Your own account is not disabled or signed out from here (the API refuses the first;
                // the second is 'Sign out').
                if email.lowercased() != me {
                    actions.append(ConsoleLayout.button(call.user, action: base + (disabled ? "/enable" : "/disable"), label: disabled ? "Enable" : "Disable",
                                                        danger: !disabled))
                    if !disabled { actions.append(ConsoleLayout.button(call.user, action: base + "/revoke", label: "Sign out everywhere", danger: true)) }
                }
                actions.append("<a href=\"\(base)/password\">Set password…</a>")
                return [HTML.isolated(email), "\(account["superuser"] == true ? "superuser" : "operator")",
                        teams.isEmpty ? "—" : "\(teams.joined(separator: ", "))",
                        "\(Self.day(account["createdAt"]?.stringValue))", disabled ? "disabled \(Self.day(account["disabledAt"]?.stringValue))" : "active",
                        HTML.join(actions, separator: " ")]
            }
            let body: HTML = """
                \(ConsoleLayout.table("Operators", ["Email", "Kind", "Teams", "Added", "State", "Actions"], rows, empty: "No operators yet: add one below."))
                <form method="post" action="/console/operators" class="stack">\(ConsoleLayout.csrf(call.user))
                <h2>Add an operator</h2>
                <label for="email">Email address</label> <input id="email" name="email" type="email" autocomplete="off" required>
                <label for="password">Password (at least 12 characters; tell them to change it)</label> <input id="password" name="password" type="password" autocomplete="new-password" required>
                <label><input type="checkbox" name="superuser" value="on"> Superuser (every container, operators, server statistics)</label>
                <button type="submit">Add the operator</button></form>
                <p class="hint">Operators join a container's work through its Team page. The CLI twin: <code>stratus operator</code>.</p>
                """
            return call.page("Operators", section: "operators", body)
        }
        console.route(router, .post, "/console/operators") { call in
            let email = call.form.text("email") ?? ""
            let answer = await call.api(.addOperator, body: ["emailAddress": .string(email), "password": .string(call.form["password"] ?? ""),
                                                            "superuser": .bool(call.form["superuser"] == "on")])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: "/console/operators") }
            return ConsoleController.seeOther("/console/operators" + ConsolePath.query([("notice", "added operator \(email)")]))
        }
        let actions: [(verb: String, route: ManagementRoute, done: String, confirm: (@Sendable (ConsoleCall) -> ConsoleConfirmation)?)] = [
            ("disable", .disableOperator, "disabled; their sign-ins were revoked", Self.confirmation(.disableOperator, title: "Disable %@?",
                consequence: "%@ can no longer sign in, and every CLI sign-in and console session of theirs stops working at once. Their teams stay; you can enable them again.",
                action: "Disable the operator")),
            ("enable", .enableOperator, "enabled: they can sign in again", nil),
            ("revoke", .revokeOperatorCredentials, "signed out everywhere", Self.confirmation(.revokeOperatorCredentials, title: "Sign %@ out everywhere?",
                consequence: "Every CLI sign-in and console session of %@ stops working at once; they sign in again with their password. Nothing else changes.",
                action: "Sign them out")),
        ]
        for action in actions {
            console.route(router, .post, "/console/operators/:operator/\(action.verb)", confirm: action.confirm) { call in
                let email = ConsoleController.pathParameter(call.context, "operator")
                let answer = await call.api(action.route, ["operator": ConsolePath.segment(email)])
                guard answer.ok else { return try ConsoleController.actionFailed(answer, back: "/console/operators") }
                return ConsoleController.seeOther("/console/operators" + ConsolePath.query([("notice", "\(email): \(action.done)")]))
            }
        }
        console.route(router, .get, "/console/operators/:operator/password") { call in
            let email = ConsoleController.pathParameter(call.context, "operator")
            guard await call.allowed(.operatorPassword, ["operator": ConsolePath.segment(email)]) else {
                throw ConsoleFailure(status: 403, reason: "only a superuser may set another operator's password")
            }
            let own = email.lowercased() == call.user.name.lowercased()
            let current: HTML = own ? """
                <label for="current">Your current password</label> <input id="current" name="current" type="password" autocomplete="current-password" required>
                """ : ""
            let body: HTML = """
                <p>\(own ? "Your other sign-ins (CLI and console) stop working; this one stays." : "Every CLI sign-in and console session of \(email) stops working at once; tell them the new password.")</p>
                <form method="post" action="\(ConsolePath.make("operators", email, "password"))" class="stack">\(ConsoleLayout.csrf(call.user))\(current)
                <label for="password">New password (at least 12 characters)</label> <input id="password" name="password" type="password" autocomplete="new-password" required>
                <div class="buttons"><button type="submit">Set the password</button> <a class="button" href="/console/operators">Cancel</a></div></form>
                """
            return call.page("Set the password of \(email)", section: "operators", body)
        }
        console.route(router, .post, "/console/operators/:operator/password") { call in
            let email = ConsoleController.pathParameter(call.context, "operator")
            var body: [String: JSON] = ["newPassword": .string(call.form["password"] ?? "")]
            if let current = call.form["current"] { body["password"] = .string(current) }
            let page = ConsolePath.make("operators", email, "password")
            let answer = await call.api(.operatorPassword, ["operator": ConsolePath.segment(email)], body: body)
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: page) }
            let revoked = answer.json["revokedCredentials"]?.intValue ?? 0
            return ConsoleController.seeOther("/console/operators" + ConsolePath.query([("notice", "set the password of \(email); \(revoked) sign-in\(revoked == 1 ? "" : "s") revoked")]))
        }
        console.route(router, .get, "/console/server") { call in
            let stats = try await call.require(.stats)
            let cpu: Double = switch stats["cpuSeconds"] {
            case .double(let seconds)?: seconds
            case .int(let seconds)?: Double(seconds)
            default: 0
            }
            var figures: [[HTML]] = [
                ["Process", "\(stats["pid"]?.intValue ?? 0)"],
                ["Memory (resident)", "\(stats["rssBytes"]?.intValue.map(ConsoleUnits.bytes) ?? "unknown")"],
                ["CPU time since start", "\(String(format: "%.1f", cpu)) s"],
                ["Context switches", "\(ConsoleUnits.count(stats["contextSwitches"]?.intValue ?? 0))"],
            ]
            if let replicas = stats["replicaReads"] {
                figures.append(["Reads answered by a replica", "\(ConsoleUnits.count(replicas["servedByReplica"]?.intValue ?? 0))"])
                figures.append(["Reads kept on the primary", "\(ConsoleUnits.count(replicas["servedByPrimary"]?.intValue ?? 0))"])
            }
            let audit = try await ConsoleAudit.section(call, route: .serverAudit, path: "/console/server",
                                                       caption: "Server audit log: operator accounts added, removed, disabled, enabled, signed out, their passwords set")
            let body: HTML = """
                <p class="hint">This server process's figures (each server process of a cluster has its own; <code>stratus stats</code> is the CLI twin).</p>
                \(ConsoleLayout.table("This server process", ["Figure", "Value"], figures, empty: "", whole: true))
                \(audit)
                """
            return call.page("Server", section: "server", body)
        }
    }

    /// A confirmation for an action on the path's operator (`%@` in the texts is their email).
    static func confirmation(_ route: ManagementRoute, title: String, consequence: String, action: String) -> @Sendable (ConsoleCall) -> ConsoleConfirmation {
        { call in
            let email = ConsoleController.pathParameter(call.context, "operator")
            return ConsoleConfirmation(title: title.replacingOccurrences(of: "%@", with: email),
                                       consequence: consequence.replacingOccurrences(of: "%@", with: email), action: action,
                                       back: "/console/operators", route: route, parameters: ["operator": ConsolePath.segment(email)])
        }
    }

    /// The day of an ISO 8601 time ("2026-11-29"), or "—".
    static func day(_ iso: String?) -> String {
        iso.map { String($0.prefix(10)) } ?? "—"
    }
}
