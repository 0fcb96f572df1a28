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
    public var operatorID: Int64?

    public init(isSuperuser: Bool, operatorID: Int64?) {
        self.isSuperuser = isSuperuser
        self.operatorID = operatorID
    }
}

/// Every route of the management API and what it asks of the caller: the one place that says who
/// may do what (`Deploy/REFERENCE.md` prints it as a table; `ManagementAccessTests` and the
/// server's authorisation matrix test hold the server to it). A route missing here does not start.
public enum ManagementAccess {
    public static let base = "/management/1"

    /// `METHOD path` (the path as the router has it, `:name` for parameters) → requirement.
    public static let routes: [String: ManagementRequirement] = {
        let container = "\(base)/containers/:container"
        let developmentOrOwner = { (source: ManagementRequirement.EnvironmentSource) in
            ManagementRequirement.perEnvironment(development: .developer, production: .owner, from: source)
        }
        let table: [(String, String, ManagementRequirement)] = [
            // Operators and their sign-in.
            ("POST", "\(base)/login", .open),
            ("POST", "\(base)/logout", .signedIn),
            ("GET", "\(base)/whoami", .signedIn),
            ("GET", "\(base)/operators", .superuser),
            ("POST", "\(base)/operators", .superuser),
            ("DELETE", "\(base)/operators/:operator", .superuser),
            ("POST", "\(base)/operators/:operator/disable", .superuser),
            ("POST", "\(base)/operators/:operator/enable", .superuser),
            ("POST", "\(base)/operators/:operator/password", .selfOrSuperuser),
            ("GET", "\(base)/audit", .superuser),
            // Containers and their teams.
            ("POST", "\(base)/containers", .superuser),
            ("GET", "\(base)/containers", .signedIn),
            ("GET", "\(container)/team", .member(.viewer)),
            ("POST", "\(container)/team", .member(.owner)),
            ("PATCH", "\(container)/team/:operator", .member(.owner)),
            ("DELETE", "\(container)/team/:operator", .member(.owner)),
            // API tokens and server-to-server keys: development's for developers, production's for owners.
            ("GET", "\(base)/tokens", .signedIn),
            ("POST", "\(container)/tokens", developmentOrOwner(.body(default: nil))),
            ("PATCH", "\(container)/tokens/:token", developmentOrOwner(.target)),
            ("POST", "\(container)/tokens/:token/revoke", developmentOrOwner(.target)),
            ("GET", "\(container)/keys", .member(.viewer)),
            ("POST", "\(container)/keys", developmentOrOwner(.body(default: nil))),
            ("POST", "\(container)/keys/:key/revoke", developmentOrOwner(.target)),
            // Users and their data.
            ("GET", "\(container)/users", .member(.viewer)),
            ("GET", "\(container)/users/:user", .member(.viewer)),
            ("POST", "\(container)/users/:user/disable", .member(.owner)),
            ("POST", "\(container)/users/:user/enable", .member(.owner)),
            ("GET", "\(container)/users/:user/export", .member(.owner)),
            ("POST", "\(container)/users/:user/erase", .member(.owner)),
            ("GET", "\(container)/shares", .member(.viewer)),
            ("GET", "\(container)/subscriptions", .member(.viewer)),
            // Records of any database, as the console's records browser reads and changes them (a
            // user's private or shared database is read as that user, and audited).
            ("POST", "\(container)/records/query", .member(.viewer)),
            ("POST", "\(container)/records/lookup", .member(.viewer)),
            ("POST", "\(container)/zones/list", .member(.viewer)),
            ("POST", "\(container)/records/modify", developmentOrOwner(.body(default: .development))),
            // Custom roles' members.
            ("GET", "\(container)/roles", .member(.viewer)),
            ("GET", "\(container)/roles/:role/members", .member(.viewer)),
            ("POST", "\(container)/roles/:role/members", developmentOrOwner(.body(default: .development))),
            ("DELETE", "\(container)/roles/:role/members/:user", developmentOrOwner(.query(default: .development))),
            // Quotas, usage, the audit log, the request log and its telemetry.
            ("GET", "\(container)/quota", .member(.viewer)),
            ("PATCH", "\(container)/quota", .member(.owner)),
            ("GET", "\(container)/usage", .member(.viewer)),
            ("GET", "\(container)/audit", .member(.viewer)),
            ("GET", "\(container)/logs", .member(.viewer)),
            ("GET", "\(container)/telemetry", .member(.viewer)),
            ("GET", "\(base)/usage/verify", .superuser),
            ("GET", "\(base)/stats", .superuser),
            // Schema: development is the developers', production changes only by an owner's deploy.
            ("POST", "\(base)/schema/validate", .signedIn),
            ("GET", "\(container)/schema", .member(.viewer)),
            ("GET", "\(container)/schema/diff", .member(.viewer)),
            ("GET", "\(container)/schema/history", .member(.viewer)),
            ("POST", "\(container)/schema/import", .member(.developer)),
            ("POST", "\(container)/schema/reset", .member(.developer)),
            ("POST", "\(container)/schema/deploy", .member(.owner)),
            ("POST", "\(container)/schema/indexes/build", .member(.owner)),
        ]
        return Dictionary(table.map { ("\($0.0) \($0.1)", $0.2) }, uniquingKeysWith: { first, _ in first })
    }()

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
