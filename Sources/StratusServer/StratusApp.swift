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
    /// Seals sync tokens (`TokenSealer.syncKey`); tokens sealed with `sealer` before it existed are still opened.
    let syncSealer: TokenSealer
    /// The sync-token keys of servers a container was imported from, by container (`ContainerArchive`).
    let importedSyncKeys = Mutex<[Int64: [RecordStore.ImportedSyncKey]]>([:])
    let authenticator: Authenticator
    /// Changes other server processes make to what this one caches.
    let invalidations: Invalidations
    let configuration: ServerConfiguration
    /// Where asset download URLs start (`publicURL` and the download path), made once.
    let downloadURLBase: String
    let logger: Logger
    /// Requests, latencies and errors counted for `GET /metrics`.
    public let metrics = Metrics()
    /// The service's long-lived parts while they run (`BackgroundWork`'s pieces; `stratus serve`
    /// adds the HTTP server and the database pools): what an overrunning shutdown names.
    public let running: RunningParts
    /// Development query shapes: when each was last noted, and those not yet written (see `noteQueryShape`).
    struct QueryShapeState {
        var seen: [SchemaStore.QueryShape: Date] = [:]
        var pending: [SchemaStore.QueryShape] = []
        var flushScheduled = false
        /// Flushes writing shapes they have taken off `pending`.
        var writing = 0
    }
    let queryShapes = Mutex(QueryShapeState())
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
    /// The management API's responder, for the console's in-process calls.
    let consoleBox = ManagementResponder()

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
        self.syncSealer = TokenSealer(secret: TokenSealer.syncKey(from: secret))
        self.authenticator = Authenticator(admin: admin, sealer: sealer, configuration: configuration)
        self.configuration = configuration
        self.downloadURLBase = configuration.publicURL + Self.downloadPathPrefix
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
        let (authenticator, schemas, rateLimiter, notifier) = (self.authenticator, self.records.schemas, self.rateLimiter, self.notifier)
        invalidations.subscribe { [weak self] event in
            if event == .all { self?.importedSyncKeys.withLock { $0 = [:] } }
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
        router.add(middleware: ErrorMiddleware())
        router.get("/health") { _, _ in try await self.health() }
        router.get("/metrics") { request, _ in try await self.metricsResponse(request) }
        addDataRoutes(to: router)
        addAuthRoutes(to: router)
        addManagementRoutes(to: router)
        addOperatorRoutes(to: router)
        addManagedRecordRoutes(to: router)
        addCourierRoutes(to: router)
        addSchemaRoutes(to: router)
        addAssetRoutes(to: router)
        addUserDataRoutes(to: router)
        addOpenAPIRoute(to: router)
        addConsoleRoutes(to: router, box: consoleBox)
        consoleBox.responder.withLock { $0 = router.buildResponder() }
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

    /// Reads a request body whole. Bodies over the limit get 413 before they are read (by
    /// `Content-Length`) or as soon as the limit is passed (chunked).
    func readBody(_ request: Request) async throws -> ByteBuffer {
        let limit = configuration.maximumBodyBytes
        if let length = request.headers.first(.contentLength).flatMap({ Int($0) }), length > limit {
            throw StratusError.bodyTooLarge(limit: limit)
        }
        // Read piece by piece rather than with `collect(upTo:)`: its layers of async calls cost
        // twice the executor checks, and the HTTP channel hands over each body as one piece.
        var pieces = request.body.makeAsyncIterator()
        guard var body = try await pieces.next() else { return ByteBuffer() }
        guard body.readableBytes <= limit else { throw StratusError.bodyTooLarge(limit: limit) }
        while var piece = try await pieces.next() {
            guard piece.readableBytes <= limit - body.readableBytes else { throw StratusError.bodyTooLarge(limit: limit) }
            body.writeBuffer(&piece)
        }
        return body
    }

    /// Parses a JSON body, whatever its content type.
    func parseJSON(_ buffer: ByteBuffer) throws(StratusError) -> JSON {
        do {
            let result: Result<JSON, JSONParser.Failure> = buffer.withUnsafeReadableBytes { bytes in
                Result { () throws(JSONParser.Failure) -> JSON in try JSONParser.parse(bytes) }
            }
            return try result.get()
        } catch {
            throw StratusError.badRequest(error.description)
        }
    }

    /// Reads and parses a JSON body, whatever its content type.
    func readJSON(_ request: Request) async throws -> JSON {
        try parseJSON(try await readBody(request))
    }

    /// Parses a JSON body that must be an object.
    func parseObject(_ buffer: ByteBuffer) throws(StratusError) -> [String: JSON] {
        let body = try parseJSON(buffer)
        guard let members = body.objectValue else { throw StratusError.badRequest("the body must be a JSON object, not \(body.kindName)") }
        return members
    }

    /// Reads a JSON body that must be an object.
    func readObject(_ request: Request) async throws -> [String: JSON] {
        try parseObject(try await readBody(request))
    }
}
