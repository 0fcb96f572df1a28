/// A member's role in one container's team. Each role can do everything the ones below it can.
public enum TeamRole: Int16, Sendable, Comparable, CaseIterable, CustomStringConvertible {
    /// Reads everything of the container (schema, users, usage, audit, team; never a secret).
    case viewer = 1
    /// The development environment fully (schema import and reset, its tokens, keys and role
    /// members); production read-only.
    case developer = 2
    /// Everything for the container: production's tokens and keys, schema deploys, quotas, user
    /// disable, export and erase, the team.
    case owner = 3

    public static func < (a: TeamRole, b: TeamRole) -> Bool { a.rawValue < b.rawValue }

    public var description: String {
        switch self {
        case .viewer: "viewer"
        case .developer: "developer"
        case .owner: "owner"
        }
    }

    /// `viewer`, `developer` or `owner`.
    public init?(name: String) {
        guard let role = Self.allCases.first(where: { $0.description == name }) else { return nil }
        self = role
    }
}

/// What a management route asks of the caller.
public enum ManagementRequirement: Sendable, Equatable {
    /// No credential (signing in).
    case open
    /// Any operator or the admin token; what the route answers is limited to the caller's containers.
    case signedIn
    /// The admin token or a superuser operator.
    case superuser
    /// A superuser, or the operator the path names (`:operator`) acting on themselves.
    case selfOrSuperuser
    /// A member of the container in the path (`:container`) with at least this role (a superuser
    /// may do anything).
    case member(TeamRole)
    /// A member with at least `development` for the development environment and `production` for
    /// production, the environment read `from` the request.
    case perEnvironment(development: TeamRole, production: TeamRole, from: EnvironmentSource)

    /// Where a route's environment comes from.
    public enum EnvironmentSource: Sendable, Equatable {
        /// The `environment` query parameter, this when absent.
        case query(default: ContainerEnvironment)
        /// The body's `environment` key, this when absent (`nil`: the key is required).
        case body(default: ContainerEnvironment?)
        /// The environment of the API token (`:token`) or server key (`:key`) the path names.
        case target
    }

    /// Who may, in a few words (the OpenAPI document's `x-stratus-access`, the reference's role table).
    public var summary: String {
        switch self {
        case .open: "anyone"
        case .signedIn: "any operator (answers only what their teams hold)"
        case .superuser: "superuser"
        case .selfOrSuperuser: "the operator themselves, or a superuser"
        case .member(let role): role == .viewer ? "viewer" : role.description
        case .perEnvironment(let development, let production, _): "\(development) for development, \(production) for production"
        }
    }

    /// The least role that can pass, in some environment.
    public var leastRole: TeamRole? {
        switch self {
        case .member(let role): role
        case .perEnvironment(let development, let production, _): min(development, production)
        default: nil
        }
    }

    /// The role needed in `environment` (`nil` when the route needs no membership).
    public func role(in environment: ContainerEnvironment?) -> TeamRole? {
        switch self {
        case .member(let role): return role
        case .perEnvironment(let development, let production, _):
            guard let environment else { return max(development, production) }
            return environment == .production ? production : development
        default: return nil
        }
    }
}

/// Who calls the management API, as far as authorisation cares.
public struct ManagementCaller: Sendable, Equatable {
    public var isSuperuser: Bool
    /// The operator's id (`nil` for the admin token).
    public var operatorID: OperatorID?

    public init(isSuperuser: Bool, operatorID: OperatorID?) {
        self.isSuperuser = isSuperuser
        self.operatorID = operatorID
    }
}

/// Every route of the management API and what it asks of the caller: the one place that says who
/// may do what (`Deploy/REFERENCE.md` prints it as a table; `ManagementAccessTests` and the
/// server's authorisation matrix test hold the server to it). A route missing here does not start.
public enum ManagementAccess {
    public static let base = "/management/1"

    /// Route → requirement, every route of the management API.
    public static let requirements: [ManagementRoute: ManagementRequirement] = {
        let developmentOrOwner = { (source: ManagementRequirement.EnvironmentSource) in
            ManagementRequirement.perEnvironment(development: .developer, production: .owner, from: source)
        }
        let table: [(ManagementRoute, ManagementRequirement)] = [
            // Operators and their sign-in.
            (.login, .open),
            (.logout, .signedIn),
            (.whoami, .signedIn),
            (.operators, .superuser),
            (.addOperator, .superuser),
            (.removeOperator, .superuser),
            (.disableOperator, .superuser),
            (.enableOperator, .superuser),
            (.operatorPassword, .selfOrSuperuser),
            (.revokeOperatorCredentials, .superuser),
            (.serverAudit, .superuser),
            // Containers and their teams.
            (.createContainer, .superuser),
            (.containers, .signedIn),
            (.team, .member(.viewer)),
            (.addTeamMember, .member(.owner)),
            (.setTeamRole, .member(.owner)),
            (.removeTeamMember, .member(.owner)),
            // API tokens and server-to-server keys: development's for developers, production's for owners.
            (.tokens, .signedIn),
            (.createToken, developmentOrOwner(.body(default: nil))),
            (.updateToken, developmentOrOwner(.target)),
            (.revokeToken, developmentOrOwner(.target)),
            (.keys, .member(.viewer)),
            (.addKey, developmentOrOwner(.body(default: nil))),
            (.revokeKey, developmentOrOwner(.target)),
            // Users and their data.
            (.users, .member(.viewer)),
            (.user, .member(.viewer)),
            (.disableUser, .member(.owner)),
            (.enableUser, .member(.owner)),
            (.exportUser, .member(.owner)),
            (.eraseUser, .member(.owner)),
            (.shares, .member(.viewer)),
            (.subscriptions, .member(.viewer)),
            // Records of any database, as the console's records browser reads and changes them (a
            // user's private or shared database is read as that user, by an owner giving a reason,
            // and audited: `userDatabase`).
            (.queryRecords, .member(.viewer)),
            (.lookupRecords, .member(.viewer)),
            (.listZones, .member(.viewer)),
            (.modifyRecords, developmentOrOwner(.body(default: .development))),
            (.requestAssetUploads, developmentOrOwner(.body(default: .development))),
            // Custom roles' members.
            (.roles, .member(.viewer)),
            (.roleMembers, .member(.viewer)),
            (.addRoleMember, developmentOrOwner(.body(default: .development))),
            (.removeRoleMember, developmentOrOwner(.query(default: .development))),
            // Pushes to devices: the APNs credential is an owner's to set (its key is never shown again).
            (.push, .member(.viewer)),
            (.setAPNs, .member(.owner)),
            (.removeAPNs, .member(.owner)),
            // Quotas, usage, the audit log, the request log and its telemetry.
            (.quota, .member(.viewer)),
            (.setQuota, .member(.owner)),
            (.usage, .member(.viewer)),
            (.audit, .member(.viewer)),
            (.logs, .member(.viewer)),
            (.telemetry, .member(.viewer)),
            (.verifyUsage, .superuser),
            (.stats, .superuser),
            // Schema: development is the developers', production changes only by an owner's deploy.
            (.validateSchema, .signedIn),
            (.schema, .member(.viewer)),
            (.schemaDiff, .member(.viewer)),
            (.schemaHistory, .member(.viewer)),
            (.importSchema, .member(.developer)),
            (.resetSchema, .member(.developer)),
            (.deploySchema, .member(.owner)),
            (.buildIndexes, .member(.owner)),
        ]
        return Dictionary(table, uniquingKeysWith: { first, _ in first })
    }()

    /// Reading or changing an app user's private or shared database through the records routes
    /// (`records/query`, `records/lookup`, `zones/list`, `records/modify`, `assets/upload` with `database` private
    /// or shared), on top of the route's own requirement: an owner's, and the call gives a
    /// `reason`, which the audit log keeps with the read.
    public static let userDatabase = ManagementRequirement.member(.owner)

    /// `METHOD path` (the path as the router has it, `:name` for parameters) → requirement.
    public static let routes: [String: ManagementRequirement] = Dictionary(uniqueKeysWithValues: requirements.map { ($0.key.key, $0.value) })

    /// What the server does with a request.
    public enum Decision: Sendable, Equatable {
        case allowed
        /// No credential, or one that is not valid.
        case unauthenticated
        /// The caller is not in the container's team: answered as a container that does not exist.
        case notFound
        /// The caller may not; the reason names the role needed.
        case denied(String)
    }

    /// The decision for `requirement`: `caller` (`nil` when no valid credential came), their
    /// role in the path's container (`nil` when not a member or no container), the environment
    /// the request acts on, and whether the path's `:operator` is the caller.
    public static func decide(_ requirement: ManagementRequirement, caller: ManagementCaller?, role: TeamRole?,
                              environment: ContainerEnvironment?, container: String = "", targetsSelf: Bool = false) -> Decision {
        if requirement == .open { return .allowed }
        guard let caller else { return .unauthenticated }
        switch requirement {
        case .open, .signedIn:
            return .allowed
        case .superuser:
            return caller.isSuperuser ? .allowed : .denied("this needs a superuser; ask one (or use the admin token)")
        case .selfOrSuperuser:
            return caller.isSuperuser || targetsSelf ? .allowed : .denied("only a superuser may do this for another operator")
        case .member, .perEnvironment:
            if caller.isSuperuser { return .allowed }
            guard let role else { return .notFound }
            guard let needed = requirement.role(in: environment), role < needed else { return .allowed }
            let scope: String
            if case .perEnvironment = requirement, let environment { scope = " for \(environment.rawValue)" } else { scope = "" }
            return .denied("this needs the \(needed) role in container '\(container)'\(scope); you are its \(role): ask one of its owners")
        }
    }
}

/// One route of the management API: its method and path (`:name` for a parameter), named once
/// here, and used by name by its handler and by the console.
public struct ManagementRoute: Hashable, Sendable {
    public let method: String
    public let path: String

    init(_ method: String, _ path: String) {
        self.method = method
        self.path = path
    }

    /// `METHOD path`, as `ManagementAccess.routes` is keyed.
    public var key: String { "\(method) \(path)" }
    /// Who may use it.
    public var requirement: ManagementRequirement { ManagementAccess.requirements[self] ?? .superuser }
    /// The names of its path's parameters, in order.
    public var parameterNames: [String] { path.split(separator: "/").filter { $0.hasPrefix(":") }.map { String($0.dropFirst()) } }

    private static let base = ManagementAccess.base
    private static let container = base + "/containers/:container"

    public static let login = ManagementRoute("POST", base + "/login")
    public static let logout = ManagementRoute("POST", base + "/logout")
    public static let whoami = ManagementRoute("GET", base + "/whoami")
    public static let operators = ManagementRoute("GET", base + "/operators")
    public static let addOperator = ManagementRoute("POST", base + "/operators")
    public static let removeOperator = ManagementRoute("DELETE", base + "/operators/:operator")
    public static let disableOperator = ManagementRoute("POST", base + "/operators/:operator/disable")
    public static let enableOperator = ManagementRoute("POST", base + "/operators/:operator/enable")
    public static let operatorPassword = ManagementRoute("POST", base + "/operators/:operator/password")
    public static let revokeOperatorCredentials = ManagementRoute("POST", base + "/operators/:operator/revoke")
    public static let serverAudit = ManagementRoute("GET", base + "/audit")
    public static let createContainer = ManagementRoute("POST", base + "/containers")
    public static let containers = ManagementRoute("GET", base + "/containers")
    public static let team = ManagementRoute("GET", container + "/team")
    public static let addTeamMember = ManagementRoute("POST", container + "/team")
    public static let setTeamRole = ManagementRoute("PATCH", container + "/team/:operator")
    public static let removeTeamMember = ManagementRoute("DELETE", container + "/team/:operator")
    public static let tokens = ManagementRoute("GET", base + "/tokens")
    public static let createToken = ManagementRoute("POST", container + "/tokens")
    public static let updateToken = ManagementRoute("PATCH", container + "/tokens/:token")
    public static let revokeToken = ManagementRoute("POST", container + "/tokens/:token/revoke")
    public static let keys = ManagementRoute("GET", container + "/keys")
    public static let addKey = ManagementRoute("POST", container + "/keys")
    public static let revokeKey = ManagementRoute("POST", container + "/keys/:key/revoke")
    public static let users = ManagementRoute("GET", container + "/users")
    public static let user = ManagementRoute("GET", container + "/users/:user")
    public static let disableUser = ManagementRoute("POST", container + "/users/:user/disable")
    public static let enableUser = ManagementRoute("POST", container + "/users/:user/enable")
    public static let exportUser = ManagementRoute("GET", container + "/users/:user/export")
    public static let eraseUser = ManagementRoute("POST", container + "/users/:user/erase")
    public static let shares = ManagementRoute("GET", container + "/shares")
    public static let subscriptions = ManagementRoute("GET", container + "/subscriptions")
    public static let queryRecords = ManagementRoute("POST", container + "/records/query")
    public static let lookupRecords = ManagementRoute("POST", container + "/records/lookup")
    public static let listZones = ManagementRoute("POST", container + "/zones/list")
    public static let modifyRecords = ManagementRoute("POST", container + "/records/modify")
    public static let requestAssetUploads = ManagementRoute("POST", container + "/assets/upload")
    public static let roles = ManagementRoute("GET", container + "/roles")
    public static let roleMembers = ManagementRoute("GET", container + "/roles/:role/members")
    public static let addRoleMember = ManagementRoute("POST", container + "/roles/:role/members")
    public static let removeRoleMember = ManagementRoute("DELETE", container + "/roles/:role/members/:user")
    public static let push = ManagementRoute("GET", container + "/push")
    public static let setAPNs = ManagementRoute("POST", container + "/push/apns")
    public static let removeAPNs = ManagementRoute("DELETE", container + "/push/apns")
    public static let quota = ManagementRoute("GET", container + "/quota")
    public static let setQuota = ManagementRoute("PATCH", container + "/quota")
    public static let usage = ManagementRoute("GET", container + "/usage")
    public static let audit = ManagementRoute("GET", container + "/audit")
    public static let logs = ManagementRoute("GET", container + "/logs")
    public static let telemetry = ManagementRoute("GET", container + "/telemetry")
    public static let verifyUsage = ManagementRoute("GET", base + "/usage/verify")
    public static let stats = ManagementRoute("GET", base + "/stats")
    public static let validateSchema = ManagementRoute("POST", base + "/schema/validate")
    public static let schema = ManagementRoute("GET", container + "/schema")
    public static let schemaDiff = ManagementRoute("GET", container + "/schema/diff")
    public static let schemaHistory = ManagementRoute("GET", container + "/schema/history")
    public static let importSchema = ManagementRoute("POST", container + "/schema/import")
    public static let resetSchema = ManagementRoute("POST", container + "/schema/reset")
    public static let deploySchema = ManagementRoute("POST", container + "/schema/deploy")
    public static let buildIndexes = ManagementRoute("POST", container + "/schema/indexes/build")
}
