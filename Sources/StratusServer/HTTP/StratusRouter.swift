import HTTPTypes
import Hummingbird
import StratusCore

/// The service's HTTP surface: the data API (`DataAPI`) and the web courier's polls answered
/// directly, everything else by Hummingbird's router. The router resolves a path in its trie
/// before any middleware runs, and for the data API's seven-component paths, three of them
/// parameters, that was a visible share of a lookup's CPU.
public struct StratusRouter: HTTPResponderBuilder {
    let dataAPI: DataAPI
    let courier: CourierController
    let cors: CORSPolicy
    let router: Router<BasicRequestContext>

    public func buildResponder() -> StratusResponder {
        StratusResponder(dataAPI: dataAPI, courier: courier, cors: cors, router: router.buildResponder())
    }

    /// Every route, as method and path pattern: the router's and the data API's.
    var routes: [(method: HTTPRequest.Method, path: String)] {
        router.routes.map { ($0.method, $0.path.description) }
            + DataRoute.all.map { ($0.method, "/database/1/{container}/{environment}/{database}/\($0.path)") }
    }
}

public struct StratusResponder: HTTPResponder {
    public typealias Context = BasicRequestContext
    let dataAPI: DataAPI
    let courier: CourierController
    let cors: CORSPolicy
    let router: RouterResponder<BasicRequestContext>

    public func respond(to request: Request, context: Context) async throws -> Response {
        // Browsers: preflight requests, and CORS headers on answers to allowed origins (see CORS.swift).
        guard let origin = request.headers[.origin] else { return try await answer(request, context: context) }
        if AssetsController.isAssetPath(request.uri.path) {
            // Upload and download URLs are capabilities, used without credentials: any page may.
            if request.method == .options { return AssetsController.assetPreflight() }
            var response = try await answer(request, context: context)
            AssetsController.addAssetCORSHeaders(&response)
            return response
        }
        if request.method == .options, CORSPolicy.isCrossOriginPath(request.uri.path) {
            return await cors.preflight(request, origin: origin)
        }
        var response = try await answer(request, context: context)
        await cors.addCORSHeaders(&response, request: request, origin: origin)
        return response
    }

    func answer(_ request: Request, context: Context) async throws -> Response {
        try await ErrorMiddleware<Context>().run(request, context: context) { request, context in
            if let response = try await dataAPI.respond(to: request) { return response }
            // A web courier long poll: the other request a busy client sends most (one per notification).
            if request.method == .get, let (container, environment, token) = CourierController.courierPollPath(request.uri.path) {
                return try await courier.pollCourier(request, container: container, environment: environment, token: token)
            }
            return try await router.respond(to: request, context: context)
        }
    }
}
