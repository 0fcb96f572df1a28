import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Members of custom security roles: `stratus role assign|unassign|members|list`.
struct RoleManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let schemas: SchemaStore
    let authenticator: Authenticator

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .roles) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let schema = try await self.schemas.reload(containerID: container.id, environment: environment)
            let counts = try await self.admin.roleMemberCounts(containerID: container.id, environment: environment)
            let roles: [JSON] = schema.roles.sorted().map { ["role": .string($0), "members": .int(counts[$0] ?? 0)] }
            return .json(["environment": .string(environment.rawValue), "roles": .array(roles)])
        }
        api.manage(router, .roleMembers) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let role = try await self.customRole(call, container: container, environment: environment)
            let members = try await self.admin.roleMembers(containerID: container.id, environment: environment, role: role)
            return .json(["role": .string(role), "environment": .string(environment.rawValue), "members": .array(members.map(ManagementJSON.memberJSON))])
        }
        api.manage(router, .addRoleMember) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ContainerEnvironment(segment: try Wire.string(body["environment"], key: "environment") ?? "development")
            let role = try await self.customRole(call, container: container, environment: environment)
            guard let user = try Wire.string(body["user"], key: "user"), !user.isEmpty else {
                throw StratusError.badRequest("missing required key 'user' (a user record name or an email address)")
            }
            let (member, added) = try await self.admin.assignRole(containerID: container.id, environment: environment, role: role, user: user,
                                                                  by: grant.actor)
            self.authenticator.invalidate(.roles(containerID: container.id, environment: environment))
            return .json(["role": .string(role), "member": ManagementJSON.memberJSON(member), "added": .bool(added)])
        }
        api.manage(router, .removeRoleMember) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let role = try await self.customRole(call, container: container, environment: environment)
            let user = try await self.admin.unassignRole(containerID: container.id, environment: environment, role: role,
                                                         user: try call.userParameter(), by: grant.actor)
            self.authenticator.invalidate(.roles(containerID: container.id, environment: environment))
            return .json(["role": .string(role), "removed": .string(user)])
        }
    }

    /// The `:role` path parameter: a custom role of the environment's schema.
    func customRole(_ call: ManagementCall, container: ContainerInfo, environment: ContainerEnvironment) async throws -> String {
        let role = call.pathParameter("role")
        guard !role.isEmpty, role.utf8.count <= 255, role.unicodeScalars.allSatisfy(Names.isPrintable) else {
            throw StratusError.badRequest("give the name of a custom role (CREATE ROLE in the schema)")
        }
        if SystemRole.all.contains(role) {
            throw StratusError.badRequest("'\(role)' is a built-in role: every user holds it as the schema says; only custom roles (CREATE ROLE) have members")
        }
        let schema = try await schemas.reload(containerID: container.id, environment: environment)
        guard schema.roles.contains(role) else {
            let known = schema.roles.sorted()
            throw StratusError(.notFound, "the \(environment.rawValue) schema of '\(container.name)' has no role '\(role)'"
                + (known.isEmpty ? "; add one with CREATE ROLE \(role); to the schema" : "; its roles: \(known.joined(separator: ", "))")
                + (environment == .production ? " (production gets roles by 'stratus schema deploy')" : ""))
        }
        return role
    }
}
