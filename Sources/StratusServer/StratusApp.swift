import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdBcrypt
import HummingbirdCore
import NIOPosix
import NIOCore
import Logging
import StratusCore
import StratusStore
import Synchronization

/// The Stratus HTTP service, put together: configuration → pools → stores → controllers →
/// router. It answers no request itself: each route family is a controller holding what its
/// routes use (the data API's in `DataAPI`, the management API's by area, the auth API, the web
/// courier, the console, the service's own endpoints).
public final class StratusApp: Sendable {
    let database: Database
    let admin: AdminStore
    let records: RecordStore
    let sealer: TokenSealer
    /// The sync-token keys of servers a container was imported from, by container (`ContainerArchive`).
    let importedSyncKeys = SyncTokens.ImportedKeys()
    let authenticator: Authenticator
    /// Changes other server processes make to what this one caches.
    let invalidations: Invalidations
    let configuration: ServerConfiguration
    let logger: Logger
    /// Requests, latencies and errors counted for `GET /metrics`.
    public let metrics = Metrics()
    /// The service's long-lived parts while they run (`BackgroundWork`'s pieces; `stratus serve`
    /// adds the HTTP server and the database pools): what an overrunning shutdown names.
    public let running: RunningParts
    /// The data API and its controllers.
    let dataAPI: DataAPI
    /// The management API's registration and authorization, for its routes and the console.
    let managementAPI: ManagementAPI
    let courier: CourierController
    let cors: CORSPolicy
    let auth: AuthController
    let console: ConsoleController
    /// Rate limits and request metering (shared with the other server processes through PostgreSQL).
    public let rateLimiter: RateLimiter
    /// Notifications for subscriptions, and the web courier polls waiting for them.
    let notifier: Notifier
    /// Sends the pushes to devices the notifier queues.
    let pushes: PushDispatcher
    /// Each container's answered requests, written in batches (`stratus logs`).
    public let requestLog: RequestLog
    /// Asset bytes (files or large objects).
    let assets: AssetStore
    /// Read replicas, when configured.
    let replicaReads: ReplicaReads?
    let passwords: Passwords

    /// Wires the stores into the service. Reads (or creates) the server secret that signs tokens.
    /// `running`: where its background work registers while it runs (`stratus serve` shares it
    /// with its shutdown watchdog).
    public static func make(database: Database, configuration: ServerConfiguration, running: RunningParts = RunningParts(),
                            logger: Logger) async throws -> StratusApp {
        let admin = AdminStore(database: database, logger: logger)
        let secret = try await admin.serverSecret(named: "tokens")
        let cost = configuration.bcryptCost
        let dummy = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(UUID().uuidString, cost: cost) }
        return StratusApp(database: database, admin: admin, secret: secret, configuration: configuration, logger: logger, dummyPasswordHash: dummy,
                          running: running)
    }

    init(database: Database, admin: AdminStore, secret: [UInt8], configuration: ServerConfiguration, logger: Logger, dummyPasswordHash: String,
         running: RunningParts = RunningParts()) {
        self.running = running
        self.database = database
        self.admin = admin
        self.records = RecordStore(database: database, logger: logger)
        self.sealer = TokenSealer(secret: secret)
        // Seals sync tokens; tokens sealed with `sealer` before it existed are still opened.
        let syncSealer = TokenSealer(secret: TokenSealer.syncKey(from: secret))
        self.authenticator = Authenticator(admin: admin, sealer: sealer, configuration: configuration)
        self.configuration = configuration
        self.logger = logger
        self.invalidations = Invalidations(configuration: database.configuration, logger: logger)
        self.rateLimiter = RateLimiter(admin: admin, configuration: database.configuration, logger: logger)
        let vapid = VAPIDKeys(secret: secret)
        self.pushes = PushDispatcher(subscriptions: records.subscriptions, rateLimiter: rateLimiter, secret: secret, vapid: vapid,
                                     publicURL: configuration.publicURL, settings: configuration.push, metrics: metrics, logger: logger)
        self.notifier = Notifier(records: records, authenticator: authenticator, rateLimiter: rateLimiter, sealer: syncSealer, pushes: pushes,
                                 logger: logger)
        let limits = self.rateLimiter
        self.requestLog = RequestLog(configuration: database.configuration, logger: logger) { containerID, environment in
            try await limits.limits(containerID: containerID, environment: environment).logRequests
        }
        self.assets = AssetStore(storage: configuration.assetStorage, database: database, logger: logger)
        do {
            self.replicaReads = configuration.replicaURLs.isEmpty ? nil : try ReplicaReads(primary: database, urls: configuration.replicaURLs, logger: logger)
        } catch {
            logger.error("the read replicas' URLs are not valid; every read goes to the primary", metadata: ["stratus.error": "\(error)"])
            self.replicaReads = nil
        }
        let gate = ManagementGate(admin: admin, authenticator: authenticator, adminToken: configuration.adminToken)
        let queryShapes = QueryShapeNotes(schemas: records.schemas, logger: logger)
        let bodies = RequestBodies(maximumBodyBytes: configuration.maximumBodyBytes)
        self.dataAPI = DataAPI.make(records: records, admin: admin, assets: assets, sealer: sealer, syncSealer: syncSealer,
                                    importedSyncKeys: importedSyncKeys, authenticator: authenticator, notifier: notifier,
                                    rateLimiter: rateLimiter, replicaReads: replicaReads, queryShapes: queryShapes, bodies: bodies,
                                    configuration: configuration, downloadURLBase: configuration.publicURL + AssetsController.downloadPathPrefix, logger: logger)
        self.managementAPI = ManagementAPI(gate: gate, bodies: bodies)
        self.passwords = Passwords(admin: admin, dummyPasswordHash: dummyPasswordHash, bcryptCost: configuration.bcryptCost)
        self.courier = CourierController(records: records, notifier: notifier, authenticator: authenticator, rateLimiter: rateLimiter, bodies: bodies,
                                         metrics: metrics, publicURL: configuration.publicURL, vapid: vapid)
        self.cors = CORSPolicy(authenticator: authenticator)
        self.auth = AuthController(admin: admin, authenticator: authenticator, passwords: passwords, bodies: bodies, rateLimiter: rateLimiter,
                                   users: dataAPI.users)
        self.console = ConsoleController(api: managementAPI, admin: admin, passwords: passwords, bodies: bodies, sealer: sealer, adminToken: configuration.adminToken,
                                         publicURL: configuration.publicURL)
        let (authenticator, schemas, rateLimiter, notifier) = (self.authenticator, self.records.schemas, self.rateLimiter, self.notifier)
        invalidations.subscribe { [weak self] event in
            if event == .all { self?.importedSyncKeys.byContainer.withLock { $0 = [:] } }
            authenticator.invalidate(event)
            schemas.invalidate(event)
            rateLimiter.invalidate(event)
            notifier.invalidate(event)
        }
        records.observeChanges(notifier)
    }

    /// Every endpoint: the router, with the data API answered ahead of it (see `StratusRouter`).
    public func router() -> StratusRouter {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: RouterErrors())
        ServiceController(database: database, metricsToken: configuration.metricsToken, gate: managementAPI.gate, metrics: metrics, notifier: notifier,
                          requestLog: requestLog, replicaReads: replicaReads, logger: logger).addRoutes(to: router)
        auth.addRoutes(to: router)
        addManagementRoutes(to: router)
        courier.addRoutes(to: router)
        dataAPI.assets.addRoutes(to: router)
        console.addRoutes(to: router)
        return StratusRouter(dataAPI: dataAPI, courier: courier, cors: cors, router: router)
    }

    /// The management API's routes, by area.
    func addManagementRoutes(to router: Router<BasicRequestContext>) {
        let api = managementAPI
        ContainerManagement(api: api, admin: admin, records: records, authenticator: authenticator, rateLimiter: rateLimiter, assets: assets,
                            replicaReads: replicaReads, shares: dataAPI.shares).addRoutes(to: router)
        RoleManagement(api: api, admin: admin, schemas: records.schemas, authenticator: authenticator).addRoutes(to: router)
        LogManagement(api: api, admin: admin, requestLog: requestLog, rateLimiter: rateLimiter).addRoutes(to: router)
        KeyManagement(api: api, admin: admin, authenticator: authenticator).addRoutes(to: router)
        PushManagement(api: api, admin: admin, subscriptions: records.subscriptions, pushes: pushes, vapid: pushes.providers.vapid).addRoutes(to: router)
        OperatorManagement(api: api, admin: admin, passwords: passwords).addRoutes(to: router)
        SchemaManagement(api: api, records: records, queryShapes: dataAPI.records.queryShapes).addRoutes(to: router)
        UserDataManagement(api: api, admin: admin, records: records, authenticator: authenticator, notifier: notifier,
                           links: dataAPI.records.links).addRoutes(to: router)
        ManagedRecordsController(admin: admin, authenticator: authenticator, records: dataAPI.records, zones: dataAPI.zones, assets: dataAPI.assets)
            .addRoutes(to: router, api: api)
    }

    /// The HTTP/1.1 server `stratus serve` runs (see `StratusHTTPChannel`). Connections idle for
    /// `idleTimeout` with no request in flight are closed.
    public func httpServer(idleTimeout: Duration?) -> HTTPServerBuilder {
        let responder = router().buildResponder()
        let channel = StratusHTTPChannel(responder: responder, maximumBodyBytes: configuration.maximumBodyBytes,
                                         idleTimeout: idleTimeout.map { TimeAmount($0) },
                                         serverHeaders: HTTPWire.serverHeaders(name: "Stratus", strictTransportSecurity: configuration.strictTransportSecurity),
                                         connections: ConnectionCounts(limit: configuration.maximumConnectionsPerAddress),
                                         tls: configuration.tls, trustedProxies: configuration.trustedProxies, metrics: metrics,
                                         requestLog: requestLog)
        return HTTPServerBuilder { _ in channel }
    }
}
