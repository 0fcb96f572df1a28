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
