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

/// The Stratus HTTP service: the CKWS-compatible data API, the auth API and the management API.
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
    /// Development query shapes, noted for deploy plans.
    let queryShapes: QueryShapeNotes
    /// Request bodies, read up to the limit.
    let bodies: RequestBodies
    /// The data API and its controllers.
    let dataAPI: DataAPI
    /// The management API's authorization, for its routes and the console.
    let gate: ManagementGate
    /// Records of any database, for operators.
    let managedRecords: ManagedRecordsController
    /// The management API's functions by route, for the console.
    let managementFunctions = ManagementFunctions()
    /// Rate limits and request metering (shared with the other server processes through PostgreSQL).
    public let rateLimiter: RateLimiter
    /// Notifications for subscriptions, and the web courier polls waiting for them.
    let notifier: Notifier
    /// Each container's answered requests, written in batches (`stratus logs`).
    public let requestLog: RequestLog
    /// Asset bytes (files or large objects).
    let assets: AssetStore
    /// Read replicas, when configured.
    let replicaReads: ReplicaReads?
    /// Web courier tokens recently polled, by container and hash, with when they were read.
    let courierTokens = Mutex<[String: (CourierToken, ContinuousClock.Instant)]>([:])
    /// A bcrypt hash of nothing, verified against when an email is unknown so sign-in takes as long either way.
    let dummyPasswordHash: String

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
        self.dummyPasswordHash = dummyPasswordHash
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
        self.notifier = Notifier(records: records, authenticator: authenticator, rateLimiter: rateLimiter, sealer: syncSealer, logger: logger)
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
        self.gate = ManagementGate(admin: admin, authenticator: authenticator, adminToken: configuration.adminToken)
        self.queryShapes = QueryShapeNotes(schemas: records.schemas, logger: logger)
        self.bodies = RequestBodies(maximumBodyBytes: configuration.maximumBodyBytes)
        self.dataAPI = DataAPI.make(records: records, admin: admin, assets: assets, sealer: sealer, syncSealer: syncSealer,
                                    importedSyncKeys: importedSyncKeys, authenticator: authenticator, notifier: notifier,
                                    rateLimiter: rateLimiter, replicaReads: replicaReads, queryShapes: queryShapes, bodies: bodies,
                                    configuration: configuration, downloadURLBase: configuration.publicURL + AssetsController.downloadPathPrefix, logger: logger)
        self.managedRecords = ManagedRecordsController(admin: admin, authenticator: authenticator, records: dataAPI.records,
                                                       zones: dataAPI.zones)
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
        router.get("/health") { _, _ in try await self.health() }
        router.get("/metrics") { request, _ in try await self.metricsResponse(request) }
        addAuthRoutes(to: router)
        addManagementRoutes(to: router)
        addOperatorRoutes(to: router)
        addManagedRecordRoutes(to: router)
        addCourierRoutes(to: router)
        addSchemaRoutes(to: router)
        dataAPI.assets.addRoutes(to: router)
        addUserDataRoutes(to: router)
        addOpenAPIRoute(to: router)
        addConsoleRoutes(to: router)
        return StratusRouter(app: self, router: router)
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

    func health() async throws -> Response {
        do {
            _ = try await database.withConnection { connection in
                try await connection.statement("SELECT 1 FROM schema_migrations LIMIT 1", logger: logger)
            }
            return .json(["status": "ok", "database": "ok"])
        } catch {
            return .json(["status": "unavailable", "database": "unreachable"], status: .serviceUnavailable)
        }
    }
}
