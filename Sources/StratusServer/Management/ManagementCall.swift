import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore
import Synchronization

/// One call of the management API, however it arrives: a request to its route, or a console
/// page. Its handler gets who calls (`grant`, from `ManagementGate`) and the call's arguments.
struct ManagementCall: Sendable {
    /// A call's arguments.
    struct Input: Sendable {
        /// The path's parameters (`container`, `token`, `user`, …), as the path carries them.
        var parameters: [String: String] = [:]
        /// The query's parameters, decoded.
        var query: [String: String] = [:]
        /// The body: as sent, or (from the console) the object itself.
        var body: Body = .bytes(ByteBuffer())

        enum Body: Sendable {
            case bytes(ByteBuffer)
            case object([String: JSON])
        }

        init(parameters: [String: String] = [:], query: [String: String] = [:], body: Body = .bytes(ByteBuffer())) {
            self.parameters = parameters
            self.query = query
            self.body = body
        }

        /// A request's arguments: the route's path parameters and the query (the body is read later).
        init(_ request: Request, _ context: BasicRequestContext, route: ManagementRoute) {
            for name in route.parameterNames { parameters[name] = context.parameters.get(name) }
            for (name, value) in request.uri.queryParameters where query[String(name)] == nil { query[String(name)] = String(value) }
        }

        /// A path parameter, percent-decoded (`ada%40example.com` is `ada@example.com`).
        func decodedParameter(_ name: String) -> String? {
            parameters[name].map { $0.removingPercentEncoding ?? $0 }
        }

        /// The body as a JSON object.
        func object(_ bodies: RequestBodies) throws(StratusError) -> [String: JSON] {
            switch body {
            case .bytes(let buffer): try bodies.parseObject(buffer)
            case .object(let members): members
            }
        }
    }

    /// Named values, read as Hummingbird's parameters are (`get`).
    struct Values: Sendable {
        let values: [String: String]
        func get(_ name: String) -> String? { values[name] }
    }

    let grant: ManagementGrant
    let input: Input
    let bodies: RequestBodies

    /// The path's parameters, as the path carries them.
    var parameters: Values { Values(values: input.parameters) }
    /// The query's parameters, decoded.
    var queryParameters: Values { Values(values: input.query) }

    /// The body as a JSON object (BAD_REQUEST when it is not one).
    func object() throws(StratusError) -> [String: JSON] { try input.object(bodies) }
}

/// What a management function answers: a JSON value and its status (and headers).
struct ManagementReply: Sendable {
    var json: JSON
    var status: HTTPResponse.Status = .ok
    var headers: HTTPFields = [:]

    static func json(_ value: JSON, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) -> ManagementReply {
        ManagementReply(json: value, status: status, headers: headers)
    }

    /// A refusal that carries more than the error dictionary (`details`).
    static func failure(_ error: StratusError, details: [String: JSON]) -> ManagementReply {
        RequestID.state?.errorCode = error.code.name
        RequestID.state?.reason = error.reason
        return ManagementReply(json: error.dictionary(uuid: newUUID(), details: details), status: HTTPResponse.Status(code: error.code.httpStatus))
    }
}

/// The management API's functions by route, for the console to call as the routes do.
final class ManagementFunctions: Sendable {
    typealias Function = @Sendable (ManagementCall) async throws -> ManagementReply
    private let table = Mutex<[ManagementRoute: Function]>([:])

    func register(_ route: ManagementRoute, _ function: @escaping Function) { table.withLock { $0[route] = function } }
    func function(_ route: ManagementRoute) -> Function? { table.withLock { $0[route] } }
}

extension ManagementCall.Input {
    /// The `:token` path parameter: a token's id or prefix.
    func tokenParameter() throws(StratusError) -> String {
        let token = decodedParameter("token") ?? ""
        guard !token.isEmpty, token.utf8.count <= 64, token.unicodeScalars.allSatisfy({ Names.isPrintable($0) }) else {
            throw StratusError.badRequest("give the token's id (from 'stratus token list') or its prefix")
        }
        return token
    }
}

extension ManagementCall {
    /// The `environment` query parameter (development when absent).
    func environmentParameter() throws(StratusError) -> ContainerEnvironment {
        try ContainerEnvironment(segment: input.query["environment"] ?? "development")
    }

    /// The `:user` path parameter: a user record name or an email address.
    func userParameter() throws(StratusError) -> String {
        let user = pathParameter("user")
        guard !user.isEmpty, user.utf8.count <= 254, user.unicodeScalars.allSatisfy(Names.isPrintable) else {
            throw .badRequest("give the user's record name (_ and 32 hex digits) or email address")
        }
        return user
    }

    /// A path parameter, percent-decoded (empty when absent).
    func pathParameter(_ name: String) -> String {
        input.decodedParameter(name) ?? ""
    }

    /// The `user` query parameter (a user record name or an email address) as a user record name;
    /// `nil` when absent, `NOT_FOUND` when no such user exists.
    func userFilter(_ admin: AdminStore, containerID: ContainerID, environment: ContainerEnvironment) async throws -> UserID? {
        guard let given = queryParameters.get("user").map({ String($0) }) else { return nil }
        guard Names.isPrintableName(given, maximumBytes: 320) else {
            throw StratusError.badRequest("give the user's record name (_ and 32 hex digits) or email address")
        }
        guard let found = try await admin.users(containerID: containerID, environment: environment, user: given).first else {
            throw StratusError(.notFound, "no user '\(Names.printable(given))' in this container; give a user record name or an email address")
        }
        return found.userRecordName
    }
}
