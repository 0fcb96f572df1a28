import Crypto
import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Pushes to devices: `stratus push status`, `stratus push apns set|remove`.
struct PushManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let subscriptions: SubscriptionStore
    let pushes: PushDispatcher
    let vapid: VAPIDKeys

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .push) { call -> ManagementReply in
            let container = try call.grant.container
            let settings = try await self.subscriptions.apnsSettings(containerID: container.id)
            let devices = try await self.subscriptions.pushDeviceCounts(containerID: container.id)
            let queue = try await self.subscriptions.pushQueue(containerID: container.id)
            var environments: [String: JSON] = [:]
            for environment in [ContainerEnvironment.development, .production] {
                var entry: [String: JSON] = [
                    "apns": settings[environment].map(Self.apnsJSON) ?? .null,
                    "webPush": ["vapidPublicKey": .string(self.vapid.publicKey(containerID: container.id))],
                    "devices": ["apns": .int(Int64(devices[environment]?[1] ?? 0)), "webPush": .int(Int64(devices[environment]?[2] ?? 0))],
                    "queue": ["pushes": .int(Int64(queue[environment]?.count ?? 0)),
                              "oldestSeconds": queue[environment].map { .int(Int64($0.oldestSeconds.rounded())) } ?? .null],
                ]
                if let refusal = self.pushes.lastRefusal(containerID: container.id, environment: environment) {
                    entry["lastRefusal"] = ["reason": .string(refusal.reason), "at": ManagementJSON.iso(refusal.at)]
                }
                environments[environment.rawValue] = .object(entry)
            }
            return .json(["container": .string(container.name), "environments": .object(environments)])
        }
        api.manage(router, .setAPNs) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ManagementGate.environment(in: body, default: nil)
            let setting = try Self.apnsSetting(body, sealer: self.pushes.sealer, by: grant.actor.name)
            try await self.subscriptions.setAPNs(setting, containerID: container.id, environment: environment,
                                                 audit: AuditEntry(containerID: container.id, actor: grant.actor, action: "push.apns.set",
                                                                   environment: environment, target: setting.topic,
                                                                   detail: "key \(setting.keyID), team \(setting.teamID)"))
            self.pushes.forget(containerID: container.id, environment: environment)
            return .json(["environment": .string(environment.rawValue), "apns": Self.apnsJSON(setting)])
        }
        api.manage(router, .removeAPNs) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let audit = AuditEntry(containerID: container.id, actor: grant.actor, action: "push.apns.remove", environment: environment)
            guard try await self.subscriptions.removeAPNs(containerID: container.id, environment: environment, audit: audit) else {
                throw StratusError(.notFound, "no APNs credential is set for \(environment.rawValue) of '\(container.name)'")
            }
            self.pushes.forget(containerID: container.id, environment: environment)
            return .json(["environment": .string(environment.rawValue), "removed": true])
        }
    }

    /// A credential as the team sees it: never the key.
    static func apnsJSON(_ setting: APNsSetting) -> JSON {
        ["keyID": .string(setting.keyID), "teamID": .string(setting.teamID), "topic": .string(setting.topic),
         "setAt": ManagementJSON.iso(setting.setAt), "setBy": .string(setting.setBy)]
    }

    /// Reads and checks `key` (the .p8 file's PEM text), `keyID`, `teamID` and `topic`.
    static func apnsSetting(_ body: [String: JSON], sealer: PushKeySealer, by actor: String) throws -> APNsSetting {
        func identifier(_ key: String, _ what: String) throws -> String {
            guard let value = try Wire.string(body[key], key: key) else {
                throw StratusError.badRequest("missing required key '\(key)': \(what)")
            }
            guard value.utf8.count == 10, value.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0)) }) else {
                throw StratusError.badRequest("'\(key)' must be 10 letters and digits (\(what)), not '\(Names.printable(String(value.prefix(40))))'")
            }
            return value
        }
        guard let pem = try Wire.string(body["key"], key: "key") else {
            throw StratusError.badRequest("missing required key 'key': the text of the APNs key file (AuthKey_XXXXXXXXXX.p8)")
        }
        guard pem.utf8.count <= 8192, (try? P256.Signing.PrivateKey(pemRepresentation: pem)) != nil else {
            throw StratusError.badRequest("'key' is not an APNs key: give the text of the .p8 file Apple's developer site gave (a P-256 private key in PEM, BEGIN PRIVATE KEY)")
        }
        let keyID = try identifier("keyID", "the key's id, shown beside it on Apple's developer site")
        let teamID = try identifier("teamID", "your Apple developer team's id")
        guard let topic = try Wire.string(body["topic"], key: "topic") else {
            throw StratusError.badRequest("missing required key 'topic': the app's bundle id, such as com.example.notes")
        }
        let parts = topic.split(separator: ".", omittingEmptySubsequences: false)
        guard topic.utf8.count <= 255, parts.count >= 2, parts.allSatisfy({ part in
            !part.isEmpty && part.unicodeScalars.allSatisfy { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || $0 == "-") }
        }) else {
            throw StratusError.badRequest("'topic' must be the app's bundle id (letters, digits and '-' in parts joined by '.', such as com.example.notes), not '\(Names.printable(String(topic.prefix(80))))'")
        }
        return APNsSetting(keyID: keyID, teamID: teamID, topic: topic, sealedKey: try sealer.seal(pem), setBy: actor)
    }
}
