import Foundation
import HTTPTypes
import Hummingbird
import StratusCore

/// Pushes to devices: each environment's APNs credential (set and removed by owners; the key is
/// never shown), the container's VAPID key, the devices registered and the pushes waiting.
struct ConsolePushPages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/push") { call in
            let container = call.container
            let status = try await call.require(.push)
            let access = await call.access()
            var rows: [[HTML]] = []
            for environment in ContainerEnvironment.allCases {
                let entry = status["environments"]?[environment.rawValue]
                let apns: HTML
                if let setting = entry?["apns"], setting != .null {
                    let remove: HTML = access.may(.removeAPNs)
                        ? ConsoleLayout.button(call.user, action: ConsolePath.make("c", container, "push", "apns", environment.rawValue, "remove"),
                                               label: "Remove", danger: true)
                        : ""
                    apns = "topic <code>\(HTML.isolated(setting["topic"]?.stringValue ?? ""))</code>, key <code>\(HTML.isolated(setting["keyID"]?.stringValue ?? ""))</code>, team <code>\(HTML.isolated(setting["teamID"]?.stringValue ?? ""))</code>; set \(HTML.isolated(setting["setAt"]?.stringValue ?? "")) by \(HTML.isolated(setting["setBy"]?.stringValue ?? "")) \(remove)"
                } else {
                    apns = "not set: APNs devices get no pushes"
                }
                let devices = entry?["devices"]
                let queue = entry?["queue"]
                var waiting = "\(JSONWriter.string(queue?["pushes"] ?? 0))"
                if let oldest = queue?["oldestSeconds"], oldest != .null { waiting += ", the oldest \(JSONWriter.string(oldest)) s old" }
                let refusal: HTML = entry?["lastRefusal"].map { "\(HTML.isolated($0["at"]?.stringValue ?? "")): \(HTML.isolated($0["reason"]?.stringValue ?? ""))" } ?? "none"
                rows.append(["\(environment.rawValue)", apns, "\(JSONWriter.string(devices?["apns"] ?? 0)) APNs, \(JSONWriter.string(devices?["webPush"] ?? 0)) Web Push",
                             "\(waiting)", refusal])
            }
            let vapid = status["environments"]?["development"]?["webPush"]?["vapidPublicKey"]?.stringValue ?? ""
            let environments = access.environments(for: .setAPNs)
            let form: HTML = environments.isEmpty ? "<p>Only the container's owners set APNs credentials.</p>" : """
                <form method="post" action="\(ConsolePath.make("c", container, "push", "apns"))" class="stack">\(ConsoleLayout.csrf(call.user))<h2>Set an APNs credential</h2>
                <p>From Apple's developer site: an APNs authentication key (.p8), its key id, your team id, and the app's bundle id. The key is stored sealed with the server's secret and never shown again.</p>
                <label for="apns-environment">Environment</label>\(ConsoleLayout.environmentSelect(.development, id: "apns-environment", among: environments))
                <label for="apns-key">Key: the text of AuthKey_XXXXXXXXXX.p8</label><textarea id="apns-key" name="key" rows="6" autocomplete="off" spellcheck="false"></textarea>
                <label for="apns-key-id">Key id (10 characters)</label><input id="apns-key-id" name="keyID" maxlength="10" autocomplete="off">
                <label for="apns-team-id">Team id (10 characters)</label><input id="apns-team-id" name="teamID" maxlength="10" autocomplete="off">
                <label for="apns-topic">Topic: the app's bundle id</label><input id="apns-topic" name="topic" maxlength="255" placeholder="com.example.notes">
                <button type="submit">Set</button></form>
                """
            let body: HTML = """
                \(ConsoleLayout.table("Pushes by environment", ["Environment", "APNs", "Devices", "Waiting", "Last refusal"], rows, empty: ""))
                <p>Web Push: web apps subscribe with the container's VAPID public key, <code class="secret">\(HTML.isolated(vapid))</code> (also at GET …/webpush/key).</p>
                \(form)
                """
            return call.page("Push", container: container, section: "push", body)
        }
        console.route(router, .post, "/console/c/:container/push/apns") { call in
            let container = call.container
            let back = ConsolePath.make("c", container, "push")
            let environment = call.form["environment"] ?? ""
            let answer = await call.api(.setAPNs, body: [
                "environment": .string(environment), "key": .string(call.form["key"] ?? ""), "keyID": .string(call.form.text("keyID") ?? ""),
                "teamID": .string(call.form.text("teamID") ?? ""), "topic": .string(call.form.text("topic") ?? ""),
            ])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + ConsolePath.query([("notice", "APNs set for \(environment): topic \(answer.json["apns"]?["topic"]?.stringValue ?? "")")]))
        }
        let confirm: @Sendable (ConsoleCall) -> ConsoleConfirmation = { call in
            let environment = ConsoleController.pathParameter(call.context, "environment")
            return ConsoleConfirmation(title: "Remove the APNs credential of \(environment)?",
                                       consequence: "APNs devices registered in \(environment) get no pushes until a credential is set again, and the APNs pushes waiting are dropped. Web Push goes on.",
                                       action: "Remove the credential", back: ConsolePath.make("c", call.container, "push"), route: .removeAPNs)
        }
        console.route(router, .post, "/console/c/:container/push/apns/:environment/remove", confirm: confirm) { call in
            let container = call.container
            let environment = ConsoleController.pathParameter(call.context, "environment")
            let back = ConsolePath.make("c", container, "push")
            let answer = await call.api(.removeAPNs, query: ["environment": environment])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
            return ConsoleController.seeOther(back + ConsolePath.query([("notice", "APNs removed for \(environment)")]))
        }
    }
}
