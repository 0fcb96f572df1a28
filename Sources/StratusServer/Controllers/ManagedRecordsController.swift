import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Records through the management API (the console's records browser): the data API's own
/// query, lookup, modify, zone listing and asset upload URLs, for any database of the container. The body is the
/// data API's, plus `environment` (development when absent), `database` (`public`, `private` or
/// `shared`; public when absent) and, for a private or shared database, `user` (whose: a record
/// name or an email address). The public database is used with the container administrator's
/// privileges, as a server-to-server key does; a user's database as that user, only by an owner
/// (`ManagementAccess.userDatabase`) who gives a `reason`. Reading or changing a user's database
/// (with the reason), and changing the public one, is audited.
struct ManagedRecordsController: Sendable {
    /// What it does, each one management route.
    enum Operation: CaseIterable, Sendable {
        case query, lookup, zones, modify, uploads

        /// Its management route.
        var route: ManagementRoute {
            switch self {
            case .query: .queryRecords
            case .lookup: .lookupRecords
            case .zones: .listZones
            case .modify: .modifyRecords
            case .uploads: .requestAssetUploads
            }
        }
        /// The audit log's action.
        var action: String { self == .modify ? "records.modify" : "records.read" }
    }

    let admin: AdminStore
    let authenticator: Authenticator
    let records: RecordsController
    let zones: ZonesController
    let assets: AssetsController

    /// Its management routes.
    func addRoutes(to router: Router<BasicRequestContext>, api: ManagementAPI) {
        for operation in Operation.allCases {
            api.manage(router, operation.route) { call in
                .json(try await self.run(operation, grant: call.grant, body: try call.object()))
            }
        }
    }

    /// Runs a data-API handler on the database the management body names, as the caller it implies.
    func run(_ operation: Operation, grant: ManagementGrant, body: [String: JSON]) async throws -> JSON {
        let action = operation.action
        let container = try grant.container
        var body = body
        let environment = try ContainerEnvironment(segment: try Wire.string(body["environment"], key: "environment") ?? "development")
        guard let scope = DatabaseScope(rawValue: try Wire.string(body["database"], key: "database") ?? "public") else {
            throw StratusError.badRequest("'database' must be public, private or shared")
        }
        let given = try Wire.string(body["user"], key: "user")
        let givenReason = try Wire.string(body["reason"], key: "reason")
        for key in ["environment", "database", "user", "reason"] { body[key] = nil }
        var caller = Caller(container: container, environment: environment)
        var target = ""
        var reason = ""
        if scope == .public {
            // The container administrator's privileges, as for a server key: no security role
            // restricts it, and what it creates names the operator as creator.
            let who = grant.credential.map { "_operator_\($0.operatorInfo.operatorID)" } ?? "_admin"
            caller.user = UserID(who)
            caller.serverKey = who
        } else {
            switch ManagementAccess.decide(ManagementAccess.userDatabase, caller: grant.caller, role: grant.role, environment: environment,
                                           container: container.name) {
            case .allowed: break
            case .denied(let reason): throw StratusError(.accessDenied, "an app user's \(scope.rawValue) database: \(reason)")
            case .notFound, .unauthenticated: throw ManagementGate.notFound(container: container.name)
            }
            guard let text = givenReason, !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw StratusError.badRequest("say why you open this user's \(scope.rawValue) database: give 'reason' (kept in the audit log)")
            }
            guard text.count <= 500, Names.isPrintableName(text, maximumBytes: 2000) else {
                throw StratusError.badRequest("'reason' must be printable text of at most 500 characters")
            }
            reason = text.trimmingCharacters(in: .whitespacesAndNewlines)
            guard let given, !given.isEmpty else {
                throw StratusError.badRequest("the \(scope.rawValue) database is a user's: give 'user' (their record name or email address)")
            }
            guard Names.isPrintableName(given, maximumBytes: 320),
                  let found = try await admin.users(containerID: container.id, environment: environment, user: given).first else {
                throw StratusError(.notFound, "no user '\(Names.printable(given))' in \(environment.rawValue); give a user record name or an email address")
            }
            caller.user = found.userRecordName
            target = found.userRecordName.rawValue
        }
        let request = DataRequest(caller: caller, scope: scope, body: body, authenticator: authenticator, metered: false)
        let answer: JSON = switch operation {
        case .query: try await records.queryRecords(request)
        case .lookup: try await records.lookupRecords(request)
        case .zones: try await zones.listZones(request)
        case .modify: try await records.modifyRecords(request)
        case .uploads: try await assets.requestUploads(request)
        }
        // Asking for upload URLs changes nothing yet (the save that uses them is audited).
        if operation == .modify || (scope != .public && operation != .uploads) {
            try await admin.audit(AuditEntry(containerID: container.id, actor: grant.actor, action: action, environment: environment,
                                             target: target.isEmpty ? scope.rawValue : target,
                                             detail: "\(scope.rawValue) database" + (reason.isEmpty ? "" : ": \(reason)")))
        }
        return answer
    }
}
