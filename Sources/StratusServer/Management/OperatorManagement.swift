import Foundation
import Hummingbird
import HummingbirdBcrypt
import NIOPosix
import StratusCore
import StratusStore

/// Operators and teams: `stratus login|logout|whoami`, `stratus operator …`, `stratus team …`.
struct OperatorManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let passwords: Passwords

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .login) { call -> ManagementReply in
            let body = try call.object()
            let (email, password) = try Passwords.credentials(body)
            let name = try Wire.string(body["name"], key: "name") ?? "stratus login"
            guard !name.isEmpty, name.utf8.count <= 200, name.unicodeScalars.allSatisfy(Names.isPrintable) else {
                throw StratusError.badRequest("'name' (where the credential is used) must be 1–200 printable characters")
            }
            let account = try await self.passwords.verifyOperatorPassword(email: email, password: password)
            let secret = ManagementGate.operatorCredentialPrefix + TokenSealer.randomAPIToken()
            let id = try await self.admin.operatorStore.createOperatorCredential(operatorID: account.operatorID, tokenHash: TokenSealer.hash(secret), name: name)
            return .json(["credential": .string(secret), "credentialID": .int(id.rawValue), "operator": ManagementJSON.operatorJSON(account)])
        }
        api.manage(router, .logout) { call -> ManagementReply in
            let grant = call.grant
            guard let credential = grant.credential else {
                throw StratusError.badRequest("the admin token cannot sign out: it is what the server was started with (STRATUS_ADMIN_TOKEN); change it there")
            }
            try await self.admin.operatorStore.revokeOperatorCredential(credential.credentialID)
            return .json(["signedOut": true, "credentialID": .int(credential.credentialID.rawValue)])
        }
        api.manage(router, .whoami) { call -> ManagementReply in
            let grant = call.grant
            guard let credential = grant.credential else {
                return .json(["adminToken": true, "superuser": true, "operator": .null, "containers": []])
            }
            let containers = try await self.admin.operatorStore.teamContainers(operatorID: credential.operatorInfo.operatorID)
            return .json(["adminToken": false, "superuser": .bool(credential.operatorInfo.superuser), "operator": ManagementJSON.operatorJSON(credential.operatorInfo),
                          "credentialID": .int(credential.credentialID.rawValue),
                          "containers": .array(containers.map { ManagementJSON.containerJSON($0.container, role: $0.role) })])
        }
        api.manage(router, .operators) { call -> ManagementReply in
            let operators = try await self.admin.operatorStore.operators()
            return .json(["operators": .array(operators.map { info, containers in
                var json = ManagementJSON.operatorJSON(info)
                if case .object(var members) = json {
                    members["containers"] = .array(containers.map { ["name": .string($0.container), "role": .string($0.role.description)] })
                    json = .object(members)
                }
                return json
            })])
        }
        api.manage(router, .addOperator) { call -> ManagementReply in
            let grant = call.grant
            let body = try call.object()
            let (email, password) = try Passwords.credentials(body)
            try Passwords.validateNewPassword(password)
            let superuser = try Wire.bool(body["superuser"], key: "superuser") ?? false
            let hash = try await self.passwords.hash(password)
            let info = try await self.admin.operatorStore.createOperator(email: email, passwordHash: hash, superuser: superuser, by: grant.actor)
            return .json(["operator": ManagementJSON.operatorJSON(info)], status: .created)
        }
        api.manage(router, .removeOperator) { call -> ManagementReply in
            let grant = call.grant
            let target = try await self.namedOperator(call)
            guard target.operatorID != grant.caller?.operatorID else {
                throw StratusError.badRequest("you cannot remove your own account; ask another superuser")
            }
            try await self.admin.operatorStore.removeOperator(target, by: grant.actor)
            return .json(["removed": .string(target.email)])
        }
        for (route, verb, disabled) in [(ManagementRoute.disableOperator, "disable", true), (.enableOperator, "enable", false)] {
            api.manage(router, route) { call -> ManagementReply in
                let grant = call.grant
                let target = try await self.namedOperator(call)
                guard target.operatorID != grant.caller?.operatorID else {
                    throw StratusError.badRequest("you cannot \(verb) your own account; ask another superuser")
                }
                let info = try await self.admin.operatorStore.setOperatorDisabled(target, disabled: disabled, by: grant.actor)
                return .json(["operator": ManagementJSON.operatorJSON(info)])
            }
        }
        api.manage(router, .revokeOperatorCredentials) { call -> ManagementReply in
            let target = try await self.namedOperator(call)
            let revoked = try await self.admin.operatorStore.revokeOperatorCredentials(target, by: call.grant.actor)
            return .json(["operator": ManagementJSON.operatorJSON(target), "revokedCredentials": .int(Int64(revoked))])
        }
        api.manage(router, .operatorPassword) { call -> ManagementReply in
            let grant = call.grant
            let target = try await self.namedOperator(call)
            let body = try call.object()
            guard let new = try Wire.string(body["newPassword"], key: "newPassword") else {
                throw StratusError.badRequest("missing required key 'newPassword'")
            }
            try Passwords.validateNewPassword(new)
            // Your own password: the current one too, so a stolen credential cannot lock you out.
            let ownAccount = target.operatorID == grant.caller?.operatorID
            if ownAccount {
                guard let current = try Wire.string(body["password"], key: "password") else {
                    throw StratusError.badRequest("missing required key 'password' (your current password)")
                }
                _ = try await self.passwords.verifyOperatorPassword(email: target.email, password: current)
            }
            let hash = try await self.passwords.hash(new)
            let revoked = try await self.admin.operatorStore.setOperatorPassword(target, passwordHash: hash, keeping: ownAccount ? grant.credential?.credentialID : nil,
                                                                   by: grant.actor)
            return .json(["operator": ManagementJSON.operatorJSON(target), "revokedCredentials": .int(Int64(revoked))])
        }
        addTeamRoutes(to: router)
    }

    func addTeamRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .team) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let members = try await self.admin.operatorStore.team(containerID: container.id)
            return .json(["container": .string(container.name), "team": .array(members.map(ManagementJSON.teamMemberJSON))])
        }
        api.manage(router, .addTeamMember) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            guard let email = try Wire.string(body["operator"], key: "operator"), !email.isEmpty else {
                throw StratusError.badRequest("missing required key 'operator' (the operator's email address)")
            }
            let role = try Self.teamRole(body)
            let member = try await self.operatorNamed(email)
            let added = try await self.admin.operatorStore.addTeamMember(container: container, member: member, role: role, by: grant.actor)
            return .json(["container": .string(container.name), "member": ManagementJSON.teamMemberJSON(added)], status: .created)
        }
        api.manage(router, .setTeamRole) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let member = try await self.namedOperator(call)
            let role = try Self.teamRole(try call.object())
            let previous = try await self.admin.operatorStore.changeTeamMember(container: container, member: member, role: role, by: grant.actor)
            return .json(["container": .string(container.name), "operator": .string(member.email), "role": .string(role.description),
                          "previousRole": .string(previous.description)])
        }
        api.manage(router, .removeTeamMember) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let member = try await self.namedOperator(call)
            let previous = try await self.admin.operatorStore.changeTeamMember(container: container, member: member, role: nil, by: grant.actor)
            return .json(["container": .string(container.name), "removed": .string(member.email), "role": .string(previous.description)])
        }
    }

    /// The operator the path names (`:operator`: an email address, or an id).
    func namedOperator(_ call: ManagementCall) async throws -> OperatorInfo {
        try await operatorNamed(call.pathParameter("operator"))
    }

    func operatorNamed(_ given: String) async throws -> OperatorInfo {
        let name = UsersController.normalizedEmail(given)
        guard Names.isPrintableName(name, maximumBytes: 254) else {
            throw StratusError.badRequest("give the operator's email address")
        }
        guard let found = try await admin.operatorStore.operatorAccount(name) else {
            throw StratusError(.notFound, "there is no operator '\(name)'; a superuser adds one with 'stratus operator add \(name)'")
        }
        return found.info
    }

    /// The body's `role`: owner, developer or viewer.
    static func teamRole(_ body: [String: JSON]) throws(StratusError) -> TeamRole {
        guard let name = try Wire.string(body["role"], key: "role") else {
            throw .badRequest("missing required key 'role' (owner, developer or viewer)")
        }
        guard let role = TeamRole(name: name) else {
            throw .badRequest("unknown role '\(Names.printable(name))': give owner, developer or viewer")
        }
        return role
    }
}
