import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import StratusCore
import StratusStore

/// The service's own endpoints: `GET /health`, `GET /metrics` and `GET /openapi.json` (the
/// OpenAPI 3.1 description of every route, compiled in; open without credentials: it describes
/// the service, and holds nothing of a tenant's).
struct ServiceController: Sendable {
    let database: Database
    /// What `/metrics` accepts beside a superuser's credential (`stratus serve --metrics-token`).
    let metricsToken: String?
    let gate: ManagementGate
    let metrics: Metrics
    let notifier: Notifier
    let requestLog: RequestLog
    let replicaReads: ReplicaReads?
    let logger: Logger

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.get("/health") { _, _ in try await self.health() }
        router.get("/metrics") { request, _ in try await self.metricsResponse(request) }
        router.get("/openapi.json") { _, _ in try self.openAPIResponse() }
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

    /// `GET /metrics`: the server's counters in Prometheus text format (`Metrics`). For the
    /// metrics token (`--metrics-token`, what a Prometheus scrape config carries), the admin
    /// token, or a superuser's operator credential, as `Authorization: Bearer …`.
    func metricsResponse(_ request: Request) async throws -> Response {
        let presented = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let byToken = presented.map { presented in
            metricsToken.map { !$0.isEmpty && TokenSealer.constantTimeEquals(presented, $0) } ?? false
        } ?? false
        if !byToken {
            guard presented != nil else {
                throw StratusError(.authenticationFailed, "missing credential: send 'Authorization: Bearer <metrics token>' (stratus serve --metrics-token), or the admin token")
            }
            let principal = try await gate.principal(authorization: request.headers[.authorization])
            let superuser = switch principal {
            case .adminToken: true
            case .operatorCredential(let credential): credential.operatorInfo.superuser
            }
            guard superuser else {
                throw StratusError(.accessDenied, "the metrics are for superusers and the metrics token; an operator who is not a superuser cannot read them")
            }
        }
        var gauges = Metrics.Gauges(pool: database.usage.snapshot)
        gauges.statisticsChecks = StatisticsKeeper.checks.load(ordering: .relaxed)
        gauges.statisticsAnalyses = StatisticsKeeper.analyses.load(ordering: .relaxed)
        gauges.notificationsHandedOver = notifier.handedOver.load(ordering: .relaxed)
        gauges.notificationsQueued = notifier.queuedTotal.load(ordering: .relaxed)
        gauges.requestLogPending = requestLog.pendingCount
        gauges.requestLogWritten = requestLog.written.load(ordering: .relaxed)
        gauges.requestLogDropped = requestLog.dropped.load(ordering: .relaxed)
        if let replicaReads {
            gauges.replicaReads = replicaReads.servedByReplica.load(ordering: .relaxed)
            gauges.replicaReadsOnPrimary = replicaReads.servedByPrimary.load(ordering: .relaxed)
            let primary = replicaReads.primaryPosition.load(ordering: .relaxed)
            gauges.replicaLag = replicaReads.replicas.map { max(0, primary - $0.replayed.load(ordering: .relaxed)) }
        }
        // One small statement; a database that does not answer leaves these out of the scrape.
        if let row = try? await database.withConnection({ connection in
            try await connection.query("""
                SELECT (SELECT coalesce(sum(n_live_tup), 0)::int8 FROM pg_stat_user_tables WHERE relname = 'notifications' AND schemaname = current_schema()),
                       (SELECT count(*)::int8 FROM schema_index_builds WHERE NOT done),
                       (SELECT coalesce(sum(greatest(total - built, 0)), 0)::int8 FROM schema_index_builds WHERE NOT done),
                       (SELECT count(*)::int8 FROM (SELECT 1 FROM push_outbox LIMIT 1000000) q)
                """, logger: logger).collect()
        }).first, let (queue, builds, left, pushes) = try? row.decode((Int64, Int64, Int64, Int64).self) {
            gauges.pushQueue = pushes
            gauges.queueEstimate = queue
            gauges.indexBuilds = builds
            gauges.indexEntriesLeft = left
        }
        let text = metrics.render(gauges)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// The document as served: parsed once (a broken document fails the first request and the
    /// tests, not a build of a client) and written compactly.
    static let openAPIDocument: ByteBuffer? = {
        guard let text = EmbeddedResources.files.first(where: { $0.name == "openapi.json" })?.text,
              let document = try? JSONParser.parse(Array(text.utf8)) else { return nil }
        return ByteBuffer(string: JSONWriter.string(document))
    }()

    /// `GET /openapi.json`.
    func openAPIResponse() throws -> Response {
        guard let document = Self.openAPIDocument else {
            throw StratusError(.internalError, "the OpenAPI document compiled into this build is not valid JSON")
        }
        return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "public, max-age=300"],
                        body: ResponseBody(byteBuffer: document))
    }
}
