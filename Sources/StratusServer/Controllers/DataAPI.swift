import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import StratusCore
import StratusStore

/// A data-API request after authentication: who calls, which database, the body.
struct DataRequest {
    var caller: Caller
    var scope: DatabaseScope
    var body: [String: JSON]
    let authenticator: Authenticator
    /// Whether what it is refused counts in the container's meters (`stratus usage`): a client's
    /// request does, an operator's through the management API does not.
    var metered = true

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
            return DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: .public, owner: .nobody)
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
           owner != "__defaultOwner__", owner != "_defaultOwner", owner != caller.user?.rawValue {
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
            members["ownerRecordName"] = .string(user.rawValue)
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
    var handler: @Sendable (DataAPI, DataRequest) async throws -> JSON

    /// Every data endpoint: `DataAPI` answers them, ahead of the router, and is their only
    /// registration.
    static let all: [DataRoute] = {
        var routes: [DataRoute] = [
            DataRoute(method: .post, path: DataOperation.recordsModify.rawValue, hasBody: true) { try await $0.records.modifyRecords($1) },
            DataRoute(method: .post, path: DataOperation.recordsLookup.rawValue, hasBody: true) { try await $0.records.lookupRecords($1) },
            DataRoute(method: .post, path: DataOperation.recordsQuery.rawValue, hasBody: true) { try await $0.records.queryRecords($1) },
            DataRoute(method: .post, path: DataOperation.recordsChanges.rawValue, hasBody: true) { try await $0.changes.recordChanges($1) },
            DataRoute(method: .post, path: DataOperation.recordsResolve.rawValue, hasBody: true) { try await $0.shares.resolveShares($1, accept: false) },
            DataRoute(method: .post, path: DataOperation.recordsAccept.rawValue, hasBody: true) { try await $0.shares.resolveShares($1, accept: true) },
            DataRoute(method: .get, path: DataOperation.zonesList.rawValue, hasBody: false) { try await $0.zones.listZones($1) },
            DataRoute(method: .post, path: DataOperation.zonesList.rawValue, hasBody: false) { try await $0.zones.listZones($1) },
            DataRoute(method: .post, path: DataOperation.zonesLookup.rawValue, hasBody: true) { try await $0.zones.lookupZones($1) },
            DataRoute(method: .post, path: DataOperation.zonesModify.rawValue, hasBody: true) { try await $0.zones.modifyZones($1) },
            DataRoute(method: .post, path: DataOperation.zonesChanges.rawValue, hasBody: true) { try await $0.changes.zoneListChanges($1, legacy: true) },
            DataRoute(method: .post, path: DataOperation.changesDatabase.rawValue, hasBody: true) { try await $0.changes.zoneListChanges($1, legacy: false) },
            DataRoute(method: .post, path: DataOperation.changesZone.rawValue, hasBody: true) { try await $0.changes.zoneChanges($1) },
            DataRoute(method: .get, path: DataOperation.subscriptionsList.rawValue, hasBody: false) { try await $0.subscriptions.listSubscriptions($1) },
            DataRoute(method: .post, path: DataOperation.subscriptionsList.rawValue, hasBody: false) { try await $0.subscriptions.listSubscriptions($1) },
            DataRoute(method: .post, path: DataOperation.subscriptionsLookup.rawValue, hasBody: true) { try await $0.subscriptions.lookupSubscriptions($1) },
            DataRoute(method: .post, path: DataOperation.subscriptionsModify.rawValue, hasBody: true) { try await $0.subscriptions.modifySubscriptions($1) },
            DataRoute(method: .post, path: DataOperation.assetsUpload.rawValue, hasBody: true) { try await $0.assets.requestUploads($1) },
            DataRoute(method: .post, path: DataOperation.assetsRereference.rawValue, hasBody: true) { try await $0.assets.rereferenceAssets($1) },
        ]
        for method in [HTTPRequest.Method.get, .post] {
            routes.append(DataRoute(method: method, path: DataOperation.usersCaller.rawValue, hasBody: false, keyOnAnyDatabase: true) { try await $0.users.caller($1) })
            routes.append(DataRoute(method: method, path: DataOperation.usersCurrent.rawValue, hasBody: false) { try await $0.users.currentUser($1) })
            routes.append(DataRoute(method: method, path: DataOperation.usersDiscover.rawValue, hasBody: method == .post) { try await $0.users.discoverUsers($1) })
        }
        routes.append(DataRoute(method: .post, path: DataOperation.usersLookupEmail.rawValue, hasBody: true) { try await $0.users.lookUpUsers($1, byEmail: true) })
        routes.append(DataRoute(method: .post, path: DataOperation.usersLookupID.rawValue, hasBody: true) { try await $0.users.lookUpUsers($1, byEmail: false) })
        for method in [HTTPRequest.Method.get, .post] {
            routes.append(DataRoute(method: method, path: DataOperation.usersLookupContacts.rawValue, hasBody: false) { try $0.users.lookUpContacts($1) })
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

/// The data API (`/database/1/…`), answered ahead of the router: it authenticates the caller,
/// reads the body, admits the request against the rate limits and hands it to the endpoint's
/// controller.
struct DataAPI: Sendable {
    let records: RecordsController
    let zones: ZonesController
    let changes: ChangesController
    let subscriptions: SubscriptionsController
    let shares: SharesController
    let assets: AssetsController
    let users: UsersController
    let authenticator: Authenticator
    let schemas: SchemaStore
    let rateLimiter: RateLimiter
    let bodies: RequestBodies

    /// The data API's controllers on the service's stores, each given what its routes use.
    static func make(records: RecordStore, admin: AdminStore, assets: AssetStore, sealer: TokenSealer, syncSealer: TokenSealer,
                     importedSyncKeys: SyncTokens.ImportedKeys, authenticator: Authenticator, notifier: Notifier, rateLimiter: RateLimiter,
                     replicaReads: ReplicaReads?, queryShapes: QueryShapeNotes, bodies: RequestBodies, configuration: ServerConfiguration,
                     downloadURLBase: String, logger: Logger) -> DataAPI {
        let links = AssetLinks(sealer: sealer, downloadURLBase: downloadURLBase, downloadURLLifetime: configuration.downloadURLLifetime)
        let schemas = SchemaReads(schemas: records.schemas)
        let shares = SharesController(admin: admin, records: records, links: links, publicURL: configuration.publicURL)
        let tokens = SyncTokens(records: records, syncSealer: syncSealer, sealer: sealer, importedSyncKeys: importedSyncKeys)
        return DataAPI(
            records: RecordsController(records: records, sealer: sealer, replicaReads: replicaReads, shares: shares, schemas: schemas,
                                       links: links, queryShapes: queryShapes, rateLimiter: rateLimiter),
            zones: ZonesController(records: records, notifier: notifier, shares: shares, logger: logger),
            changes: ChangesController(records: records, tokens: tokens, replicaReads: replicaReads, shares: shares, schemas: schemas, links: links),
            subscriptions: SubscriptionsController(records: records, notifier: notifier, shares: shares, schemas: schemas, logger: logger),
            shares: shares,
            assets: AssetsController(records: records, assets: assets, sealer: sealer, configuration: configuration, schemas: schemas),
            users: UsersController(admin: admin, records: records),
            authenticator: authenticator, schemas: records.schemas, rateLimiter: rateLimiter, bodies: bodies)
    }

    /// The answer to a data-API request, when `request` is one (else `nil`).
    func respond(to request: Request) async throws -> Response? {
        guard let (route, container, environment, database) = DataRoute.match(method: request.method, target: request.head.path ?? "")
                ?? Self.matchLoosely(method: request.method, path: request.uri.path) else {
            return nil
        }
        return try await dataEndpoint(request, container: container, environment: environment, database: database, route: route)
    }

    /// A data-API path with empty segments (a trailing or doubled slash), read as a router reads
    /// paths: without them.
    static func matchLoosely(method: HTTPRequest.Method, path: String) -> (route: DataRoute, container: String, environment: String, database: String)? {
        guard path.hasPrefix("/database/"), path.hasSuffix("/") || path.contains("//") else { return nil }
        return DataRoute.match(method: method, path: "/" + path.split(separator: "/").joined(separator: "/"))
    }
}

extension DataAPI {
    /// Authenticates, reads the body and runs the route's handler.
    func dataEndpoint(_ request: Request, container containerName: String, environment: String, database: String,
                      route: DataRoute) async throws -> Response {
        let hasBody = route.hasBody
        // A signed request's body is read first: its hash is part of what was signed.
        let signedBody = RequestSignature.isPresent(in: request.headers) ? try await bodies.readBody(request) : nil
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
           !(try await schemas.schema(containerID: caller.container.id, environment: caller.environment).roles.isEmpty) {
            caller.roles = try await authenticator.roles(of: user, containerID: caller.container.id, environment: caller.environment)
        }
        var body: [String: JSON] = [:]
        if let signedBody, hasBody {
            body = try bodies.parseObject(signedBody)
        } else if hasBody {
            body = try await bodies.readObject(request)
        }
        try await rateLimiter.admit(caller, body: body)
        let result = try await route.handler(self, DataRequest(caller: caller, scope: scope, body: body, authenticator: authenticator))
        var headers: HTTPFields = [:]
        if let token = caller.webAuthToken, let name = HTTPField.Name("x-apple-cloudkit-session") {
            headers[name] = token
        }
        return .json(result, headers: headers)
    }
}
