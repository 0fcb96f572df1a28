import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore

/// A data-API request after authentication: who calls, which database, the body.
struct DataRequest {
    var caller: Caller
    var scope: DatabaseScope
    var body: [String: JSON]
    let authenticator: Authenticator

    /// Where `AUTHENTICATION_REQUIRED` sends the caller to sign in: made only when needed (it
    /// percent-encodes the API token, which a request that succeeds should not pay for).
    var signInURL: String {
        authenticator.signInURL(container: caller.container.name, environment: caller.environment, apiToken: caller.apiToken)
    }

    /// The caller's security roles when they address the public database; `nil` for a private or
    /// shared one, where roles do not apply.
    var access: RecordAccess? { scope == .public && caller.serverKey == nil ? RecordAccess(user: caller.user, roles: caller.roles) : nil }

    /// The database the caller addresses: public, or the caller's own private database.
    func database(requireUser: Bool) throws(StratusError) -> DatabaseRef {
        switch scope {
        case .public:
            if requireUser { _ = try caller.requireUser(signInURL: signInURL) }
            return DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: .public, owner: "")
        case .private, .shared:
            let user = try caller.requireUser(signInURL: signInURL)
            return DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: scope, owner: user)
        }
    }

    /// The zone named by a `zoneID` dictionary (default zone when absent). Another owner's zone
    /// in the private database is answered exactly like a missing zone.
    func zoneName(_ json: JSON?, key: String = "zoneID") throws(StratusError) -> String {
        guard let json, json != .null else { return Names.defaultZone }
        guard let members = json.objectValue else { throw .badRequest("'\(key)' must be an object like {\"zoneName\": \"…\"}") }
        guard let name = members["zoneName"]?.stringValue else { throw .badRequest("'\(key)' needs a string 'zoneName'") }
        try Names.validateZone(name)
        if let owner = try Wire.string(members["ownerRecordName"], key: "\(key).ownerRecordName"),
           owner != "__defaultOwner__", owner != "_defaultOwner", owner != caller.user {
            throw StratusError(.zoneNotFound, "zone '\(name)' does not exist in this database")
        }
        if scope == .public, name != Names.defaultZone {
            throw StratusError(.zoneNotFound, "the public database has only the default zone '_defaultZone'")
        }
        return name
    }

    /// The `zoneID` dictionary responses carry for a zone of this database.
    func zoneIDJSON(_ name: String) -> JSON {
        var members: [String: JSON] = ["zoneName": .string(name)]
        if scope == .public {
            members["ownerRecordName"] = "_defaultOwner"
        } else if let user = caller.user {
            members["ownerRecordName"] = .string(user)
        }
        return .object(members)
    }
}

/// One data-API endpoint: `/database/1/<container>/<environment>/<database>/<path>`.
struct DataRoute: Sendable {
    var method: HTTPRequest.Method
    /// The path after the database, e.g. `records/lookup` or `users/lookup/email`.
    var path: String
    var hasBody: Bool
    /// Whether a server-to-server key may call it under any database segment (`users/caller`:
    /// clients ask it of whichever database they hold); other endpoints take a key on the public
    /// database only.
    var keyOnAnyDatabase = false
    var handler: @Sendable (StratusApp, DataRequest) async throws -> JSON

    /// Every data endpoint. The router registers them all; `StratusResponder` answers the
    /// well-formed paths itself, from the same table.
    static let all: [DataRoute] = {
        var routes: [DataRoute] = [
            DataRoute(method: .post, path: "records/modify", hasBody: true) { try await $0.modifyRecords($1) },
            DataRoute(method: .post, path: "records/lookup", hasBody: true) { try await $0.lookupRecords($1) },
            DataRoute(method: .post, path: "records/query", hasBody: true) { try await $0.queryRecords($1) },
            DataRoute(method: .post, path: "records/changes", hasBody: true) { try await $0.recordChanges($1) },
            DataRoute(method: .post, path: "records/resolve", hasBody: true) { try await $0.resolveShares($1, accept: false) },
            DataRoute(method: .post, path: "records/accept", hasBody: true) { try await $0.resolveShares($1, accept: true) },
            DataRoute(method: .get, path: "zones/list", hasBody: false) { try await $0.listZones($1) },
            DataRoute(method: .post, path: "zones/list", hasBody: false) { try await $0.listZones($1) },
            DataRoute(method: .post, path: "zones/lookup", hasBody: true) { try await $0.lookupZones($1) },
            DataRoute(method: .post, path: "zones/modify", hasBody: true) { try await $0.modifyZones($1) },
            DataRoute(method: .post, path: "zones/changes", hasBody: true) { try await $0.zoneListChanges($1, legacy: true) },
            DataRoute(method: .post, path: "changes/database", hasBody: true) { try await $0.zoneListChanges($1, legacy: false) },
            DataRoute(method: .post, path: "changes/zone", hasBody: true) { try await $0.zoneChanges($1) },
            DataRoute(method: .get, path: "subscriptions/list", hasBody: false) { try await $0.listSubscriptions($1) },
            DataRoute(method: .post, path: "subscriptions/list", hasBody: false) { try await $0.listSubscriptions($1) },
            DataRoute(method: .post, path: "subscriptions/lookup", hasBody: true) { try await $0.lookupSubscriptions($1) },
            DataRoute(method: .post, path: "subscriptions/modify", hasBody: true) { try await $0.modifySubscriptions($1) },
            DataRoute(method: .post, path: "assets/upload", hasBody: true) { try await $0.requestUploads($1) },
            DataRoute(method: .post, path: "assets/rereference", hasBody: true) { try await $0.rereferenceAssets($1) },
        ]
        for method in [HTTPRequest.Method.get, .post] {
            routes.append(DataRoute(method: method, path: "users/caller", hasBody: false, keyOnAnyDatabase: true) { try await $0.caller($1) })
            routes.append(DataRoute(method: method, path: "users/current", hasBody: false) { try await $0.currentUser($1) })
            routes.append(DataRoute(method: method, path: "users/discover", hasBody: method == .post) { try await $0.discoverUsers($1) })
        }
        routes.append(DataRoute(method: .post, path: "users/lookup/email", hasBody: true) { try await $0.lookUpUsers($1, byEmail: true) })
        routes.append(DataRoute(method: .post, path: "users/lookup/id", hasBody: true) { try await $0.lookUpUsers($1, byEmail: false) })
        for method in [HTTPRequest.Method.get, .post] {
            routes.append(DataRoute(method: method, path: "users/lookup/contacts", hasBody: false) { try $0.lookUpContacts($1) })
        }
        return routes
    }()

    /// The routes by method, each with its path's bytes, for `match`.
    private static let byMethod: [HTTPRequest.Method: [(path: [UInt8], route: DataRoute)]] =
        Dictionary(grouping: all.map { (path: Array($0.path.utf8), route: $0) }, by: \.route.method)

    /// The endpoint `method` and `path` name, with the path's container, environment and
    /// database, when the path is exactly `/database/1/<container>/<environment>/<database>/<group>/<verb>`
    /// (or `…/<group>/<verb>/<detail>`, as `users/lookup/email`)
    /// with no empty component; `nil` for anything else.
    static func match(method: HTTPRequest.Method, path: String) -> (route: DataRoute, container: String, environment: String, database: String)? {
        match(method: method, path: path[...])
    }

    /// `match` on a path without its query (`target` up to its first `?`).
    static func match(method: HTTPRequest.Method, target: String) -> (route: DataRoute, container: String, environment: String, database: String)? {
        let end = target.utf8.firstIndex(of: UInt8(ascii: "?")) ?? target.utf8.endIndex
        return match(method: method, path: target[..<end])
    }

    /// Reads the path's bytes once, without splitting it into an array of parts or building a
    /// key to hash, which showed in a lookup's profile.
    static func match(method: HTTPRequest.Method, path: Substring) -> (route: DataRoute, container: String, environment: String, database: String)? {
        let prefix = "/database/1/".utf8
        guard path.utf8.starts(with: prefix), let routes = byMethod[method] else { return nil }
        var rest = path.utf8.dropFirst(prefix.count)
        var segments: [Substring.UTF8View.SubSequence] = []
        segments.reserveCapacity(3)
        for _ in 0..<3 {
            guard let slash = rest.firstIndex(of: UInt8(ascii: "/")) else { return nil }
            let segment = rest[..<slash]
            guard !segment.isEmpty else { return nil }
            segments.append(segment)
            rest = rest[rest.index(after: slash)...]
        }
        let count = rest.count
        for (bytes, route) in routes where bytes.count == count && rest.elementsEqual(bytes) {
            return (route, String(Substring(segments[0])), String(Substring(segments[1])), String(Substring(segments[2])))
        }
        return nil
    }
}

/// The service's HTTP surface: the data API answered directly, everything else by the router.
/// Hummingbird's router resolves a path in its trie before any middleware runs, and for the data
/// API's seven-component paths, three of them parameters, that was a visible share of a lookup's
/// CPU. Only the exact form `/database/1/<container>/<environment>/<database>/<group>/<verb>`
/// with a known method and endpoint is taken here, with the router's error handling; everything
/// else goes to the router, which registers the same endpoints and answers the rest (a known path
/// with another method is a 404 there, as it was before).
public struct StratusRouter: HTTPResponderBuilder {
    let app: StratusApp
    let router: Router<BasicRequestContext>

    public func buildResponder() -> StratusResponder {
        StratusResponder(app: app, router: router.buildResponder())
    }
}

public struct StratusResponder: HTTPResponder {
    public typealias Context = BasicRequestContext
    let app: StratusApp
    let router: RouterResponder<BasicRequestContext>

    public func respond(to request: Request, context: Context) async throws -> Response {
        // Browsers: preflight requests, and CORS headers on answers to allowed origins (see CORS.swift).
        guard let origin = request.headers[.origin] else { return try await answer(request, context: context) }
        if StratusApp.isAssetPath(request.uri.path) {
            // Upload and download URLs are capabilities, used without credentials: any page may.
            if request.method == .options { return StratusApp.assetPreflight() }
            var response = try await answer(request, context: context)
            StratusApp.addAssetCORSHeaders(&response)
            return response
        }
        if request.method == .options, StratusApp.isCrossOriginPath(request.uri.path) {
            return await app.preflight(request, origin: origin)
        }
        var response = try await answer(request, context: context)
        await app.addCORSHeaders(&response, request: request, origin: origin)
        return response
    }

    func answer(_ request: Request, context: Context) async throws -> Response {
        guard let (route, container, environment, database) = DataRoute.match(method: request.method, target: request.head.path ?? "") else {
            // A web courier long poll: the other request a busy client sends most (one per notification).
            if request.method == .get, let (container, environment, token) = StratusApp.courierPollPath(request.uri.path) {
                return try await ErrorMiddleware<Context>().run(request, context: context) { request, _ in
                    try await app.pollCourier(request, container: container, environment: environment, token: token)
                }
            }
            return try await router.respond(to: request, context: context)
        }
        return try await ErrorMiddleware<Context>().run(request, context: context) { request, _ in
            try await app.dataEndpoint(request, container: container, environment: environment, database: database,
                                       route: route) { try await route.handler(app, $0) }
        }
    }
}

extension StratusApp {
    /// The schema whose grants decide what `access` may read of `records`, reloaded once when the
    /// cached copy lacks one of their types (another process may have added it).
    func accessSchema(_ db: DatabaseRef, for records: [Record]) async throws -> Schema {
        let schema = try await self.records.schemas.schema(containerID: db.containerID, environment: db.environment)
        guard records.contains(where: { schema.recordTypes[$0.recordType] == nil }) else { return schema }
        return try await self.records.schemas.reload(containerID: db.containerID, environment: db.environment)
    }

    /// The records of a page the caller's security roles let them read, in order (public
    /// database; every record elsewhere). Change feeds leave the others out; their cursor moves
    /// past them all the same.
    func readable(_ records: [Record], by request: DataRequest, in db: DatabaseRef) async throws -> [Record] {
        guard let access = request.access, !records.isEmpty else { return records }
        let schema = try await accessSchema(db, for: records)
        return records.filter { access.allows(.read, on: $0.recordType, creator: $0.createdBy, in: schema) }
    }

    /// Restricts a public-database query to what the caller's roles may read: every record of
    /// the type, only their own (`_creator`), or none (ACCESS_DENIED; AUTHENTICATION_REQUIRED
    /// when signing in would give a role that may read). Returns the user the query was narrowed
    /// to, if it was.
    func restrict(_ query: inout Query, for request: DataRequest, in db: DatabaseRef) async throws -> String? {
        guard let access = request.access else { return nil }
        let schema = try await records.schemas.schema(containerID: db.containerID, environment: db.environment)
        if access.allows(.read, on: query.recordType, creator: nil, in: schema) { return nil }
        if let user = access.user, access.readsOnlyOwnRecords(of: query.recordType, in: schema) {
            query.filters.append(QueryFilter(target: .system(.createdUserRecordName), comparator: .equals,
                                             values: [.text(user)], scalar: SystemField.createdUserRecordName.valueType))
            return user
        }
        if access.user == nil, !RecordAccess.roles(granting: .read, on: query.recordType, in: schema).isEmpty {
            _ = try request.caller.requireUser(signInURL: request.signInURL)
        }
        throw RecordAccess.denial(.read, on: query.recordType, recordName: nil, in: schema)
    }

    /// Authenticates, reads the body and runs `handler` for a data endpoint.
    func dataEndpoint(_ request: Request, container containerName: String, environment: String, database: String, route: DataRoute,
                      _ handler: (DataRequest) async throws -> JSON) async throws -> Response {
        let hasBody = route.hasBody
        // A signed request's body is read first: its hash is part of what was signed.
        let signedBody = RequestSignature.isPresent(in: request.headers) ? try await readBody(request) : nil
        var caller = try await authenticator.authenticate(request, containerName: containerName, environmentSegment: environment,
                                                          signedBody: signedBody)
        let scope = try DatabaseScope(segment: database)
        if let state = RequestID.state {
            state.user = caller.user
            state.database = scope
        }
        if caller.serverKey != nil, scope != .public, !route.keyOnAnyDatabase {
            throw StratusError(.accessDenied, "a server-to-server key acts on the public database only; a user's \(scope.rawValue) database needs the user's ckWebAuthToken")
        }
        if scope == .public, caller.serverKey == nil, let user = caller.user,
           !(try await records.schemas.schema(containerID: caller.container.id, environment: caller.environment).roles.isEmpty) {
            caller.roles = try await authenticator.roles(of: user, containerID: caller.container.id, environment: caller.environment)
        }
        var body: [String: JSON] = [:]
        if let signedBody, hasBody {
            body = try parseObject(signedBody)
        } else if hasBody {
            body = try await readObject(request)
        }
        try await admitRequest(caller, body: body)
        let data = DataRequest(caller: caller, scope: scope, body: body,
                               authenticator: authenticator)
        let result = try await handler(data)
        if body["operations"] != nil, let results = result["records"]?.arrayValue {
            let refused = results.reduce(Int64(0)) { $0 + ($1["serverErrorCode"] == "QUOTA_EXCEEDED" ? 1 : 0) }
            rateLimiter.noteRefused(refused, containerID: caller.container.id, environment: caller.environment)
        }
        var headers: HTTPFields = [:]
        if let token = caller.webAuthToken, let name = HTTPField.Name("x-apple-cloudkit-session") {
            headers[name] = token
        }
        return .json(result, headers: headers)
    }

    /// Charges a request to the container's, and the user's (or, without a user, the API token's
    /// and client address's) rate limits: `THROTTLED` past them. A request costs its operations
    /// (or the records it looks up), so batching does not get around a limit.
    func admitRequest(_ caller: Caller, body: [String: JSON]) async throws {
        let limits = try await rateLimiter.limits(containerID: caller.container.id, environment: caller.environment)
        let (containerID, environment) = (caller.container.id, caller.environment)
        let cost = Int64(max(1, body["operations"]?.arrayValue?.count ?? body["records"]?.arrayValue?.count ?? 1))
        let personal: RateLimiter.Key
        if let user = caller.user {
            personal = RateLimiter.Key(kind: .user, containerID: containerID, environment: environment, name: user)
        } else {
            personal = RateLimiter.Key(kind: .client, containerID: containerID, environment: environment,
                                       name: FNV1a.hex(caller.apiToken ?? "") + "@" + (ClientAddress.current ?? ""))
        }
        try rateLimiter.admit((RateLimiter.Key(kind: .container, containerID: containerID, environment: environment, name: ""), limits.requestsPerSecond),
                              (personal, limits.userRequestsPerSecond),
                              cost: cost, containerID: containerID, environment: environment)
    }

    func addDataRoutes(to router: Router<BasicRequestContext>) {
        for route in DataRoute.all {
            router.on("/database/1/:container/:environment/:database/\(route.path)", method: route.method) { request, context in
                try await self.dataEndpoint(request, container: context.parameters.get("container") ?? "",
                                            environment: context.parameters.get("environment") ?? "",
                                            database: context.parameters.get("database") ?? "public", route: route) {
                    try await route.handler(self, $0)
                }
            }
        }
    }
}
