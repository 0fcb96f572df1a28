import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// A user's data rights: everything they own, as JSON (`stratus user export`), and
/// its erasure (`stratus user erase`), through the management API.
struct UserDataManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let records: RecordStore
    let authenticator: Authenticator
    let notifier: Notifier
    /// Asset download URLs in the exported records.
    let links: AssetLinks

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .exportUser) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let user = try await self.managedUser(container, call)
            var environments: [JSON] = []
            let assetURL = self.links.assetURL(containerID: container.id)
            for environment in ContainerEnvironment.allCases {
                let data = try await self.records.users.userData(containerID: container.id, environment: environment, user: user.userRecordName)
                func render(_ record: Record, zone: String, owner: String) -> JSON {
                    record.wireJSON(RecordRendering(zoneID: ["zoneName": .string(zone), "ownerRecordName": .string(owner)], assetURL: assetURL))
                }
                environments.append([
                    "environment": .string(environment.rawValue),
                    "privateZones": .array(data.zones.map { zone in
                        ["zoneName": .string(zone.name), "records": .array(zone.records.map { render($0, zone: zone.name, owner: user.userRecordName.rawValue) })]
                    }),
                    "publicRecords": .array(data.publicRecords.map { render($0, zone: Names.defaultZone, owner: "_defaultOwner") }),
                    "subscriptions": .array(data.subscriptions.map { listing in
                        var json = listing.subscription.wireJSON(zoneID: nil)
                        if case .object(var members) = json {
                            members["database"] = .string(listing.scope.rawValue)
                            json = .object(members)
                        }
                        return json
                    }),
                    "pushDevices": .array(try await self.records.subscriptions.pushDevices(containerID: container.id, environment: environment,
                                                                                           user: user.userRecordName).map(PushRegistration.json)),
                    "shareParticipations": .array(data.participations.map {
                        ["zoneID": ["zoneName": .string($0.zone), "ownerRecordName": .string($0.owner.rawValue)], "shareRecordName": .string($0.share),
                         "permission": .int(Int64($0.permission)), "status": .int(Int64($0.status))]
                    }),
                ])
            }
            var account = ManagementJSON.userJSON(user)
            if case .object(var members) = account, let profile = try await self.admin.profile(containerID: container.id, user: user.userRecordName) {
                members["discoverable"] = .bool(profile.discoverable)
                members["givenName"] = profile.givenName.map { .string($0) } ?? .null
                members["familyName"] = profile.familyName.map { .string($0) } ?? .null
                account = .object(members)
            }
            return .json(["container": .string(container.name), "exportedAt": ManagementJSON.iso(Date()), "user": account, "environments": .array(environments)])
        }
        api.manage(router, .eraseUser) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let user = try await self.managedUser(container, call)
            guard try Wire.string(body["confirm"], key: "confirm") == user.userRecordName.rawValue else {
                throw StratusError.badRequest("erasing a user cannot be undone: send {\"confirm\": \"\(user.userRecordName)\"} (the CLI: --yes)")
            }
            let erasure = try await self.erase(user.userRecordName, in: container, by: grant.actor)
            return .json(["erased": ["userRecordName": .string(user.userRecordName.rawValue), "privateZones": .int(Int64(erasure.zones)),
                                     "privateRecords": .int(Int64(erasure.records)), "publicRecords": .int(Int64(erasure.publicRecords)),
                                     "shareParticipations": .int(Int64(erasure.participations)), "subscriptions": .int(Int64(erasure.subscriptions))]])
        }
    }

    /// The `:user` of a management path, which must exist.
    func managedUser(_ container: ContainerInfo, _ call: ManagementCall) async throws -> UserSummary {
        let name = try call.userParameter()
        guard let found = try await admin.users(containerID: container.id, environment: .development, user: name).first else {
            throw StratusError(.notFound, "no user '\(name)' in this container; give a user record name or an email address")
        }
        return found
    }

    /// Deletes everything the user owns: their private zones (the zones' deletions stay in the
    /// database change feed, and participants lose the shares), the public records they created
    /// (as tombstones), then their participations, subscriptions, tokens, roles, sessions and
    /// account, with an audit entry.
    func erase(_ user: UserID, in container: ContainerInfo, by actor: AuditActor) async throws -> UserErasure {
        var erasure = UserErasure()
        for environment in ContainerEnvironment.allCases {
            let data = try await records.users.userData(containerID: container.id, environment: environment, user: user)
            let privateDB = DatabaseRef(containerID: container.id, environment: environment, scope: .private, owner: user)
            for zone in data.zones where try await records.deleteZone(privateDB, name: zone.name) != nil {
                erasure.zones += 1
                erasure.records += zone.records.count
            }
            let publicDB = DatabaseRef(containerID: container.id, environment: environment, scope: .public, owner: .nobody)
            let names = try await records.users.publicRecordNames(containerID: container.id, environment: environment, user: user)
            for start in stride(from: 0, to: names.count, by: ModifyRequest.maximumOperations) {
                let operations: [JSON] = names[start..<min(start + ModifyRequest.maximumOperations, names.count)].map {
                    ["operationType": "forceDelete", "record": ["recordName": .string($0)]]
                }
                let request = try ModifyRequest.decode(["operations": .array(operations)], newRecordName: { RandomUUID.string(uppercase: true) })
                let results = try await records.modify(publicDB, zone: Names.defaultZone, request: request, caller: user, now: now(),
                                                       allowSchemaChanges: false)
                erasure.publicRecords += results.filter { if case .deleted = $0 { return true } else { return false } }.count
            }
        }
        let (admin, containerID) = (admin, container.id)
        let result = try await records.users.eraseAccount(containerID: container.id, user: user, erasure: erasure, by: actor) { connection in
            try await admin.endSessions(containerID: containerID, user: user, reason: "user erased", on: connection)
        }
        authenticator.invalidate(.userSessions(containerID: container.id, user: user))
        for environment in ContainerEnvironment.allCases {
            notifier.invalidate(.subscriptions(containerID: container.id, environment: environment))
            notifier.invalidate(.courierTokens(containerID: container.id, environment: environment, owner: user))
        }
        return result
    }
}
