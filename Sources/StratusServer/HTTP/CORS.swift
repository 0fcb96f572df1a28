import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore

/// Cross-origin requests from browsers (CORS) to the data API and the auth endpoints.
///
/// A web app on another origin calls Stratus with its API token (`ckAPIToken`). The token's
/// allowed origins decide: none set, any origin may call; otherwise only those (and Stratus's own
/// pages). An allowed origin gets `Access-Control-Allow-Origin` (its own origin, echoed) on every
/// answer and on preflight (`OPTIONS`) requests; a refused one gets no CORS headers, so the
/// browser withholds the answer, and its requests are refused `ACCESS_DENIED` by the server too.
/// The management API answers no cross-origin requests.
struct CORSPolicy: Sendable {
    let authenticator: Authenticator

    static let exposedHeaders = "x-apple-cloudkit-session, x-apple-request-uuid, retry-after"
    static let preflightMaxAge = "600"

    /// Whether `path` is one browsers may call cross-origin.
    static func isCrossOriginPath(_ path: String) -> Bool {
        path.hasPrefix("/database/1/") || path.hasPrefix("/auth/1/")
    }

    /// Whether `origin` may call with the request's API token: the token exists, is live and
    /// allows it. A request with no API token gets no CORS answer.
    func allowsOrigin(_ origin: String, for request: Request) async -> Bool {
        // `/database/1/<container>/…` or `/auth/1/<container>/…`: the token is looked up in that container.
        let parts = request.uri.path.split(separator: "/", maxSplits: 4, omittingEmptySubsequences: false)
        guard Self.isCrossOriginPath(request.uri.path), parts.count > 3, let tokenText = request.uri.queryParameters.get("ckAPIToken"),
              let container = try? await authenticator.container(named: String(parts[3])),
              let token = try? await authenticator.apiToken(String(tokenText), containerID: container.id), token.revokedAt == nil else { return false }
        return Authenticator.allows(origin: origin, token: token)
    }

    /// The answer to a preflight request.
    func preflight(_ request: Request, origin: String) async -> Response {
        guard await allowsOrigin(origin, for: request) else {
            let error = StratusError(.accessDenied, "cross-origin requests from \(origin) are not allowed with this API token (or it has none); "
                + "allow the origin with 'stratus token update --allowed-origin'")
            return error.response(uuid: newUUID())
        }
        var headers: HTTPFields = [
            .accessControlAllowOrigin: origin, .vary: "Origin",
            .accessControlAllowMethods: "GET, POST, OPTIONS", .accessControlMaxAge: Self.preflightMaxAge,
        ]
        if let requested = request.headers[.accessControlRequestHeaders] {
            headers[.accessControlAllowHeaders] = requested
        }
        return Response(status: .noContent, headers: headers)
    }

    /// Adds the CORS headers to an answer to an allowed origin.
    func addCORSHeaders(_ response: inout Response, request: Request, origin: String) async {
        guard await allowsOrigin(origin, for: request) else { return }
        response.headers[.accessControlAllowOrigin] = origin
        response.headers[.accessControlExposeHeaders] = Self.exposedHeaders
        response.headers[.vary] = "Origin"
    }
}

extension Authenticator {
    /// Whether a request from browser origin `origin` may use `token`.
    static func allows(origin: String, token: APITokenInfo) -> Bool {
        token.allowedOrigins.isEmpty || WebOrigin.normalize(origin).map(token.allowedOrigins.contains) == true
    }

    /// Refuses a browser request from an origin the API token does not allow (Stratus's own
    /// pages, same-origin, always may).
    static func checkOrigin(_ request: Request, token: APITokenInfo) throws(StratusError) {
        guard let origin = request.headers[.origin], !token.allowedOrigins.isEmpty, !allows(origin: origin, token: token) else { return }
        if let host = request.head.authority, let normalized = WebOrigin.normalize(origin),
           normalized.split(separator: "/").last.map(String.init) == host.lowercased() {
            return
        }
        throw StratusError(.accessDenied, "this API token does not allow requests from \(origin); "
            + "add the origin with 'stratus token update --container … --allowed-origin \(origin) TOKEN'")
    }
}
