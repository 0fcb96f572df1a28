import Foundation
import HTTPTypes
import Hummingbird
import StratusCore
import StratusStore

/// The management API's registration and calls: each management function is registered once
/// (`manage`), on its route and for the console (`call`), and both pass `ManagementGate` first.
struct ManagementAPI: Sendable {
    let gate: ManagementGate
    let bodies: RequestBodies
    /// The functions by route, for the console.
    let functions = ManagementFunctions()

    /// Registers a management function: on its route, where every request is authenticated and
    /// authorised by `ManagementAccess` (through `ManagementGate`) before `function` runs, and
    /// for the console (`functions`), which calls it through the same check.
    func manage(_ router: Router<BasicRequestContext>, _ route: ManagementRoute, _ function: @escaping ManagementFunctions.Function) {
        guard ManagementAccess.requirements[route] != nil else {
            preconditionFailure("\(route.key) is not in ManagementAccess.requirements: say there who may use it")
        }
        guard let method = HTTPRequest.Method(route.method) else { preconditionFailure("\(route.key) has no HTTP method") }
        functions.register(route, function)
        router.on(RouterPath(route.path), method: method) { request, context -> Response in
            var input = ManagementCall.Input(request, context, route: route)
            let principal = route.requirement == .open ? nil : try await self.gate.principal(authorization: request.headers[.authorization])
            var bodyRead = false
            // The body is read once the caller may see an answer about it (a non-member learns
            // nothing from it), or before, when it names the environment the role depends on.
            let grant = try await self.authorize(route, principal: principal, input) { source in
                guard case .body = source else { return input }
                input.body = .object(try self.bodies.parseObject(try await self.bodies.readBody(request)))
                bodyRead = true
                return input
            }
            if !bodyRead { input.body = .bytes(try await self.bodies.readBody(request)) }
            let reply = try await function(ManagementCall(grant: grant, input: input, bodies: self.bodies))
            return .json(reply.json, status: reply.status, headers: reply.headers)
        }
    }

    /// A management function called by the console as `principal`, authorised as its route is.
    func call(_ route: ManagementRoute, as principal: ManagementGrant.Principal, _ input: ManagementCall.Input) async throws -> ManagementReply {
        guard let function = functions.function(route) else { throw StratusError(.internalError, "\(route.key) has no function") }
        let grant = try await authorize(route, principal: principal, input) { _ in input }
        return try await function(ManagementCall(grant: grant, input: input, bodies: bodies))
    }

    /// `ManagementGate.authorize` for a call of `route`: the container and operator its input
    /// names, and the environment from its query, its body (`withBody` gives the input with it)
    /// or the token or key it names.
    func authorize(_ route: ManagementRoute, principal: ManagementGrant.Principal?, _ input: ManagementCall.Input,
                   withBody: (ManagementRequirement.EnvironmentSource) async throws -> ManagementCall.Input) async throws -> ManagementGrant {
        let requirement = route.requirement
        if requirement == .open { return ManagementGrant() }
        guard let principal else { throw StratusError(.authenticationFailed, "missing credential") }
        return try await gate.authorize(requirement, principal: principal, container: input.parameters["container"] ?? "",
                                        targetOperator: input.decodedParameter("operator")) { source, container in
            try await self.environment(from: source, try await withBody(source), container: container)
        }
    }

    /// The environment a call acts on, for a route whose role depends on it. For a token or key
    /// the path names: production when any it names is production's, development when none is
    /// found (the function then answers NOT_FOUND).
    func environment(from source: ManagementRequirement.EnvironmentSource, _ input: ManagementCall.Input,
                     container: ContainerInfo) async throws -> ContainerEnvironment {
        switch source {
        case .query(let fallback):
            return try input.query["environment"].map { try ContainerEnvironment(segment: $0) } ?? fallback
        case .body(let fallback):
            return try ManagementGate.environment(in: try input.object(bodies), default: fallback)
        case .target:
            let environments: Set<ContainerEnvironment>
            if input.parameters["token"] != nil {
                environments = try await gate.admin.apiTokenEnvironments(containerID: container.id, idOrPrefix: try input.tokenParameter())
            } else {
                environments = try await gate.admin.serverKeyEnvironments(containerID: container.id, idOrPrefix: (input.decodedParameter("key") ?? "").lowercased())
            }
            return environments.contains(.production) ? .production : .development
        }
    }
}
