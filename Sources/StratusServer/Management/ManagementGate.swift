import Foundation
import HTTPTypes
import Hummingbird
import StratusCore
import StratusStore

/// Who a management request comes from, once authenticated and authorised for its route.
struct ManagementGrant: Sendable {
    enum Principal: Sendable {
        /// `STRATUS_ADMIN_TOKEN`: the bootstrap superuser.
        case adminToken
        /// An operator's credential (from `stratus login`).
        case operatorCredential(OperatorCredential)
    }

    /// `nil` on an open route (signing in).
    var principal: Principal?
    /// The container the path names, on routes that need membership.
    var containerInfo: ContainerInfo?
    /// The caller's role in it (`nil` for a superuser who is not in its team).
    var role: TeamRole?

    var caller: ManagementCaller? {
        switch principal {
        case .adminToken?: ManagementCaller(isSuperuser: true, operatorID: nil)
        case .operatorCredential(let credential)?: ManagementCaller(isSuperuser: credential.operatorInfo.superuser,
                                                                    operatorID: credential.operatorInfo.operatorID)
        case nil: nil
        }
    }

    var isSuperuser: Bool { caller?.isSuperuser ?? false }

    var credential: OperatorCredential? {
        if case .operatorCredential(let credential)? = principal { return credential }
        return nil
    }

    /// The audit log's name for the caller: `operator ada@example.com (credential 12)` or `admin token`.
    var actor: AuditActor {
        switch principal {
        case .operatorCredential(let credential)?:
            AuditActor(credential: "operator \(credential.operatorInfo.email) (credential \(credential.credentialID))", address: ClientAddress.current)
        case .adminToken?: AuditActor(credential: "admin token", address: ClientAddress.current)
        case nil: AuditActor(credential: "anonymous", address: ClientAddress.current)
        }
    }

    /// The path's container (routes that need membership always have one).
    var container: ContainerInfo {
        get throws(StratusError) {
            guard let containerInfo else { throw StratusError(.internalError, "this route has no container") }
            return containerInfo
        }
    }
}

/// The management API's one authorization check, for its HTTP routes and for the console alike:
/// who the caller is (`principal`), and whether `ManagementAccess` lets them act (`authorize`),
/// which gives the `ManagementGrant` a management function acts under.
struct ManagementGate: Sendable {
    /// Operator credentials start with this, so they are told apart from the admin token (and
    /// secret scanners can recognise them).
    static let operatorCredentialPrefix = "sto_"

    let admin: AdminStore
    let authenticator: Authenticator
    /// `STRATUS_ADMIN_TOKEN`, when the server has one.
    let adminToken: String?

    /// Decides by `requirement` for `principal` (read on every request: by `principal(authorization:)`
    /// for a route, with the console's session for a page; so a revoked credential, a disabled
    /// operator or a team change holds at once on every server process; the team role is read
    /// here each time). `container` is the container the call names;
    /// `environment` tells, once the caller is known to be in its team, which environment the
    /// call acts on (for a requirement that depends on it); `targetOperator`, the operator a
    /// self-or-superuser call names.
    func authorize(_ requirement: ManagementRequirement, principal: ManagementGrant.Principal, container containerName: String = "",
                   targetOperator: String? = nil,
                   environment: (ManagementRequirement.EnvironmentSource, ContainerInfo) async throws -> ContainerEnvironment? = { _, _ in nil })
        async throws -> ManagementGrant {
        var grant = ManagementGrant()
        if requirement == .open { return grant }
        grant.principal = principal
        guard let caller = grant.caller else { throw StratusError(.authenticationFailed, "missing credential") }
        var acting: ContainerEnvironment?
        var targetsSelf = false
        switch requirement {
        case .member, .perEnvironment:
            let container = try await authenticator.container(named: containerName)
            grant.containerInfo = container
            if let operatorID = caller.operatorID {
                grant.role = try await admin.operatorStore.teamRole(containerID: container.id, operatorID: operatorID)
            }
            // A non-member learns nothing more (not even whether the body is valid).
            if !caller.isSuperuser, grant.role == nil { throw Self.notFound(container: containerName) }
            if case .perEnvironment(_, _, let source) = requirement, !caller.isSuperuser {
                acting = try await environment(source, container)
            }
        case .selfOrSuperuser:
            if let operatorID = caller.operatorID, let targetOperator, let named = try await admin.operatorStore.operatorAccount(targetOperator.lowercased()) {
                targetsSelf = named.info.operatorID == operatorID
            }
        case .open, .signedIn, .superuser:
            break
        }
        switch ManagementAccess.decide(requirement, caller: caller, role: grant.role, environment: acting, container: containerName,
                                       targetsSelf: targetsSelf) {
        case .allowed: return grant
        case .notFound: throw Self.notFound(container: containerName)
        case .unauthenticated: throw StratusError(.authenticationFailed, "missing credential")
        case .denied(let reason): throw StratusError(.accessDenied, reason)
        }
    }

    /// The environment a body names (`environment`), else `fallback`.
    static func environment(in body: [String: JSON], default fallback: ContainerEnvironment?) throws(StratusError) -> ContainerEnvironment {
        guard let text = try Wire.string(body["environment"], key: "environment") else {
            guard let fallback else { throw StratusError.badRequest("missing required key 'environment' (development or production)") }
            return fallback
        }
        return try ContainerEnvironment(segment: text)
    }

    /// What a missing container answers: a container whose team the caller is not in answers the same.
    static func notFound(container name: String) -> StratusError {
        StratusError(.notFound, "container '\(name)' does not exist; create it with 'stratus container create \(name)'")
    }

    /// The caller of a management call: the admin token or an operator credential, as sent in
    /// `Authorization: Bearer` (the whole header's value).
    func principal(authorization header: String?) async throws -> ManagementGrant.Principal {
        guard let header, header.hasPrefix("Bearer "), header.count > 7 else {
            throw StratusError(.authenticationFailed, "missing credential: sign in with 'stratus login', or send 'Authorization: Bearer <operator credential or admin token>'")
        }
        return try await principal(bearer: String(header.dropFirst(7)))
    }

    /// The caller a bearer credential names (`nil`: none presented).
    func principal(bearer presented: String?) async throws -> ManagementGrant.Principal {
        guard let presented, !presented.isEmpty else {
            throw StratusError(.authenticationFailed, "missing credential: sign in with 'stratus login', or send 'Authorization: Bearer <operator credential or admin token>'")
        }
        if presented.hasPrefix(Self.operatorCredentialPrefix) {
            guard presented.utf8.count <= 200, let credential = try await admin.operatorStore.operatorCredential(hash: TokenSealer.hash(presented)) else {
                throw StratusError(.authenticationFailed, "the operator credential is not valid; sign in again with 'stratus login'")
            }
            switch credential.refusal() {
            case "revoked"?:
                throw StratusError(.authenticationFailed, "this operator credential was revoked (signed out, password changed or account disabled); sign in again with 'stratus login'")
            case let refusal?:
                throw StratusError(.authenticationFailed, "this operator credential has \(refusal == "idle" ? "gone unused too long" : "expired"); sign in again")
            case nil:
                break
            }
            if credential.operatorInfo.disabledAt != nil {
                throw StratusError(.authenticationFailed, "the operator account \(credential.operatorInfo.email) is disabled; ask a superuser")
            }
            return .operatorCredential(credential)
        }
        guard let expected = adminToken, !expected.isEmpty else {
            throw StratusError(.authenticationFailed, "that is not an operator credential, and this server has no admin token (STRATUS_ADMIN_TOKEN); sign in with 'stratus login'")
        }
        guard TokenSealer.constantTimeEquals(presented, expected) else {
            throw StratusError(.authenticationFailed, "the admin token is wrong")
        }
        return .adminToken
    }
}
