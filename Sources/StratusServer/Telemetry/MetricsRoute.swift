import Hummingbird
import NIOCore
import PostgresNIO
import StratusCore
import StratusStore

extension StratusApp {
    /// `GET /metrics`: the server's counters in Prometheus text format (`Metrics`). For the
    /// metrics token (`--metrics-token`, what a Prometheus scrape config carries), the admin
    /// token, or a superuser's operator credential, as `Authorization: Bearer …`.
    func metricsResponse(_ request: Request) async throws -> Response {
        let presented = request.headers[.authorization].flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let byToken = presented.map { presented in
            configuration.metricsToken.map { !$0.isEmpty && TokenSealer.constantTimeEquals(presented, $0) } ?? false
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
                       (SELECT coalesce(sum(greatest(total - built, 0)), 0)::int8 FROM schema_index_builds WHERE NOT done)
                """, logger: logger).collect()
        }).first, let (queue, builds, left) = try? row.decode((Int64, Int64, Int64).self) {
            gauges.queueEstimate = queue
            gauges.indexBuilds = builds
            gauges.indexEntriesLeft = left
        }
        let text = metrics.render(gauges)
        return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }
}
