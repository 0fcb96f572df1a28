import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Records through the management API (the console's records browser): the data API's own
/// query, lookup, modify and zone listing, for any database of the container. The body is the
/// data API's, plus `environment` (development when absent), `database` (`public`, `private` or
/// `shared`; public when absent) and, for a private or shared database, `user` (whose: a record
/// name or an email address). The public database is used with the container administrator's
/// privileges, as a server-to-server key does; a user's database as that user. Reading or
/// changing a user's database, and changing the public one, is audited.
extension StratusApp {
    func addManagedRecordRoutes(to router: Router<BasicRequestContext>) {
        let base = "\(ManagementAccess.base)/containers/:container"
        manage(router, .post, "\(base)/records/query") { request, _, grant in
            try await self.managedRecords(request, grant, action: "records.read") { try await self.dataAPI.records.queryRecords($0) }
        }
        manage(router, .post, "\(base)/records/lookup") { request, _, grant in
            try await self.managedRecords(request, grant, action: "records.read") { try await self.dataAPI.records.lookupRecords($0) }
        }
        manage(router, .post, "\(base)/zones/list") { request, _, grant in
            try await self.managedRecords(request, grant, action: "records.read") { try await self.dataAPI.zones.listZones($0) }
        }
        manage(router, .post, "\(base)/records/modify") { request, _, grant in
            try await self.managedRecords(request, grant, action: "records.modify") { try await self.dataAPI.records.modifyRecords($0) }
        }
    }

    /// Runs a data-API handler on the database the management body names, as the caller it implies.
    func managedRecords(_ request: Request, _ grant: ManagementGrant, action: String,
                        _ handler: (DataRequest) async throws -> JSON) async throws -> Response {
        let container = try grant.container
        var body = try await readObject(request)
        let environment = try ContainerEnvironment(segment: try Wire.string(body["environment"], key: "environment") ?? "development")
        guard let scope = DatabaseScope(rawValue: try Wire.string(body["database"], key: "database") ?? "public") else {
            throw StratusError.badRequest("'database' must be public, private or shared")
        }
        let given = try Wire.string(body["user"], key: "user")
        for key in ["environment", "database", "user"] { body[key] = nil }
        var caller = Caller(container: container, environment: environment)
        var target = ""
        if scope == .public {
            // The container administrator's privileges, as for a server key: no security role
            // restricts it, and what it creates names the operator as creator.
            let who = grant.credential.map { "_operator_\($0.operatorInfo.operatorID)" } ?? "_admin"
            caller.user = who
            caller.serverKey = who
        } else {
            guard let given, !given.isEmpty else {
                throw StratusError.badRequest("the \(scope.rawValue) database is a user's: give 'user' (their record name or email address)")
            }
            guard Names.isPrintableName(given, maximumBytes: 320),
                  let found = try await admin.users(containerID: container.id, environment: environment, user: given).first else {
                throw StratusError(.notFound, "no user '\(Names.printable(given))' in \(environment.rawValue); give a user record name or an email address")
            }
            caller.user = found.userRecordName
            target = found.userRecordName
        }
        let answer = try await handler(DataRequest(caller: caller, scope: scope, body: body, authenticator: authenticator, metered: false))
        if scope != .public || action == "records.modify" {
            try await admin.audit(AuditEntry(containerID: container.id, actor: grant.actor, action: action, environment: environment,
                                             target: target.isEmpty ? scope.rawValue : target, detail: "\(scope.rawValue) database"))
        }
        return .json(answer)
    }
}
