import Foundation
import Logging
import PostgresNIO
import StratusCore

/// One answered data-API request, as the request log keeps it.
public struct RequestLogEntry: Sendable, Equatable {
    public var containerID: ContainerID
    public var environment: ContainerEnvironment
    /// Its number in the container-environment's log: grows in the order rows were written (0 until then).
    public var seq: Int64 = 0
    public var at: Date
    public var database: DatabaseScope?
    /// The operation: `records/lookup`, `zones/modify`, `courier`…
    public var operation: String
    public var status: Int
    public var errorCode: String?
    /// A failed request's reason (the error dictionary's, at most `maximumReason` characters).
    public var reason: String?
    public var durationMicroseconds: Int
    public var userRecordName: UserID?
    public var requestID: String
    public var clientAddress: String?

    public init(containerID: ContainerID, environment: ContainerEnvironment, at: Date, database: DatabaseScope?, operation: String, status: Int,
                errorCode: String?, reason: String? = nil, durationMicroseconds: Int, userRecordName: UserID?, requestID: String,
                clientAddress: String?) {
        self.containerID = containerID
        self.environment = environment
        self.at = at
        self.database = database
        self.operation = operation
        self.status = status
        self.errorCode = errorCode
        self.reason = reason.map { String($0.prefix(Self.maximumReason)) }
        self.durationMicroseconds = durationMicroseconds
        self.userRecordName = userRecordName
        self.requestID = requestID
        self.clientAddress = clientAddress
    }

    /// The longest reason kept, in characters.
    public static let maximumReason = 500
}

/// Which rows of the request log to read.
public struct RequestLogFilter: Sendable {
    public var since: Date?
    /// An exact status (`404`) or a class (`400` with `statusClass`: 400–499).
    public var status: Int?
    public var statusClass = false
    public var operation: String?
    public var user: UserID?
    /// Only the request with this id.
    public var requestID: String?
    /// Only requests whose operation, error code, reason, request id or user contains this (any case).
    public var text: String?
    /// Only requests answered before this time.
    public var until: Date?
    /// Only rows numbered above this (oldest first: what `--follow` asks for).
    public var after: Int64?
    /// Only rows numbered below this (newest first: the next page back).
    public var before: Int64?
    public var limit = 100

    public init() {}
}

/// Requests, errors and latency of a period, for one operation or one time bucket.
public struct RequestLogSummary: Sendable, Equatable {
    /// The operation, or for a time bucket its start.
    public var operation: String?
    public var start: Date?
    public var requests: Int64
    public var errors: Int64
    public var p50Microseconds: Double
    public var p95Microseconds: Double
}

extension MeteringStore {
    /// Writes log rows, grouped by container-environment (each group: its entries' positions in
    /// `entries`, oldest first, and its `keep`), in one transaction (one commit a batch, whatever
    /// the containers; on Citus, one per worker: `Database.transactionPerCitusWorker`, and
    /// ``RowsUnsaved`` names the entries of a worker that failed): each group's requests take its
    /// next numbers and are stored as one row of arrays, and rows whose requests are all more
    /// than `keep` numbers old are deleted. The commit is synchronous: an asynchronous one would
    /// leave the primary's WAL position ahead of what replicas can replay for a moment each
    /// second, sending reads to the primary meanwhile.
    public func writeRequestLog(_ entries: [RequestLogEntry], groups: [(indices: [Int], keep: Int64)]) async throws {
        let groups = groups.filter { !$0.indices.isEmpty }
        do {
            try await database.transactionPerCitusWorker(groups.map { entries[$0.indices[0]].containerID }) { positions, routed, connection in
                for (indices, keep) in positions.lazy.map({ groups[$0] }) {
                    let first = entries[indices[0]]
                    guard keep > 0 else {
                        // Logging off: what was kept goes too.
                        try await connection.statement("""
                            DELETE FROM request_log WHERE container_id = \(first.containerID) AND environment = \(first.environment.code)
                            """, logger: self.logger)
                        continue
                    }
                    // Every request is numbered; only the newest `keep` of the batch are written (the others would be past the limit at once).
                    let written = indices.suffix(Int(min(keep, Int64(indices.count)))).lazy
                    let at = written.map { entries[$0].at }
                    let batch = WriteRequestLog(containerID: first.containerID, environment: first.environment.code,
                                                count: Int64(indices.count), written: Int64(at.count), keep: keep,
                                                firstAt: at.min() ?? Date(), lastAt: at.max() ?? Date(),
                                                at: .timestamps(at), databases: .int16s(written.map { entries[$0].database?.code ?? 0 }),
                                                operations: .texts(written.map { entries[$0].operation }),
                                                statuses: .int16s(written.map { Int16(clamping: entries[$0].status) }),
                                                codes: .texts(written.map { entries[$0].errorCode ?? "" }),
                                                durations: .int32s(written.map { Int32(clamping: entries[$0].durationMicroseconds) }),
                                                users: .texts(written.map { entries[$0].userRecordName?.rawValue ?? "" }),
                                                ids: .texts(written.map { entries[$0].requestID }),
                                                addresses: .texts(written.map { entries[$0].clientAddress ?? "" }),
                                                reasons: .texts(written.map { entries[$0].reason ?? "" }))
                    if routed {
                        try await batch.runRouted(on: connection, logger: self.logger)
                    } else {
                        _ = try await connection.rows(batch, logger: self.logger)
                    }
                }
            }
        } catch let unsaved as RowsUnsaved {
            // Positions of groups, as the caller knows entries.
            throw RowsUnsaved(positions: unsaved.positions.flatMap { groups[$0].indices }.sorted(), underlying: unsaved.underlying)
        }
    }

    /// The requests of a container-environment's log `filter` asks for (newest first, or with
    /// `after` oldest first), among its newest `keep`.
    public func requestLog(containerID: ContainerID, environment: ContainerEnvironment, keep: Int64, filter: RequestLogFilter) async throws -> [RequestLogEntry] {
        let statusLow = filter.status.map(Int16.init(clamping:))
        let statusHigh = filter.status.map { Int16(clamping: filter.statusClass ? $0 + 99 : $0) }
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT c.first_seq + e.n - 1, e.at, e.db, e.op, e.st, e.err, e.dur, e.usr, e.rid, e.addr, coalesce(e.why, '')
                FROM request_log c
                CROSS JOIN LATERAL unnest(c.at, c.database, c.operation, c.status, c.error_code, c.duration_us, c.user_record_name, c.request_id,
                                          c.client_address, c.reason) WITH ORDINALITY AS e(at, db, op, st, err, dur, usr, rid, addr, why, n)
                WHERE c.container_id = \(containerID) AND c.environment = \(environment.code)
                  AND c.last_seq > (SELECT coalesce(max(next_seq), 0) FROM request_log_heads
                                    WHERE container_id = \(containerID) AND environment = \(environment.code)) - \(keep)
                  AND (\(filter.after)::int8 IS NULL OR c.last_seq > \(filter.after)) AND (\(filter.before)::int8 IS NULL OR c.first_seq < \(filter.before))
                  AND (\(filter.since)::timestamptz IS NULL OR c.last_at >= \(filter.since))
                  AND (\(filter.until)::timestamptz IS NULL OR c.first_at < \(filter.until))
                  AND c.first_seq + e.n - 1 > (SELECT coalesce(max(next_seq), 0) FROM request_log_heads
                                               WHERE container_id = \(containerID) AND environment = \(environment.code)) - \(keep)
                  AND (\(filter.after)::int8 IS NULL OR c.first_seq + e.n - 1 > \(filter.after))
                  AND (\(filter.before)::int8 IS NULL OR c.first_seq + e.n - 1 < \(filter.before))
                  AND (\(filter.since)::timestamptz IS NULL OR e.at >= \(filter.since))
                  AND (\(statusLow)::int2 IS NULL OR e.st BETWEEN \(statusLow) AND \(statusHigh))
                  AND (\(filter.operation)::text IS NULL OR e.op = \(filter.operation))
                  AND (\(filter.user)::text IS NULL OR e.usr = \(filter.user))
                  AND (\(filter.until)::timestamptz IS NULL OR e.at < \(filter.until))
                  AND (\(filter.requestID)::text IS NULL OR e.rid = \(filter.requestID))
                  AND (\(filter.text)::text IS NULL OR strpos(lower(concat_ws(' ', e.op, e.err, e.why, e.rid, e.usr)), lower(\(filter.text))) > 0)
                ORDER BY 1 \(unescaped: filter.after == nil ? "DESC" : "ASC") LIMIT \(filter.limit)
                """, logger: logger)
        }
        return try rows.map { row in
            let (seq, at, database, operation, status, errorCode, duration, user, requestID, address, reason) =
                try row.decode((Int64, Date, Int16, String, Int16, String, Int32, String, String, String, String).self)
            var entry = RequestLogEntry(containerID: containerID, environment: environment, at: at,
                                        database: [DatabaseScope.public, .private, .shared].first { $0.code == database },
                                        operation: operation, status: Int(status), errorCode: errorCode.isEmpty ? nil : errorCode,
                                        reason: reason.isEmpty ? nil : reason, durationMicroseconds: Int(duration), userRecordName: user.isEmpty ? nil : UserID(user), requestID: requestID,
                                        clientAddress: address.isEmpty ? nil : address)
            entry.seq = seq
            return entry
        }
    }

    /// Forgets a user in the request log (their erasure): their requests stay, without their
    /// record name or client address.
    public func forgetInRequestLog(containerID: ContainerID, user: UserID, on connection: PostgresConnection) async throws {
        try await connection.statement("""
            UPDATE request_log SET
                client_address = ARRAY(SELECT CASE WHEN u = \(user) THEN '' ELSE a END FROM unnest(user_record_name, client_address) WITH ORDINALITY AS x(u, a, n) ORDER BY n),
                user_record_name = array_replace(user_record_name, \(user), '')
            WHERE container_id = \(containerID) AND \(user) = ANY (user_record_name)
            """, logger: logger)
    }

    /// Requests, errors (status 400 and above) and the median and 95th percentile of their
    /// durations since `since`: per operation (busiest first), and per `bucketSeconds` of time
    /// (oldest first; buckets without requests are left out), for one operation when given.
    public func requestTelemetry(containerID: ContainerID, environment: ContainerEnvironment, keep: Int64, since: Date, bucketSeconds: Int,
                                 operation: String?) async throws -> (operations: [RequestLogSummary], buckets: [RequestLogSummary]) {
        // The period's requests among the newest `keep`, as rows.
        let requests = """
            SELECT e.at, e.op, e.st, e.dur FROM request_log c
            CROSS JOIN LATERAL unnest(c.at, c.operation, c.status, c.duration_us) WITH ORDINALITY AS e(at, op, st, dur, n)
            WHERE c.container_id = $1 AND c.environment = $2 AND c.last_at >= $3 AND e.at >= $3
              AND c.first_seq + e.n - 1 > (SELECT coalesce(max(next_seq), 0) FROM request_log_heads WHERE container_id = $1 AND environment = $2) - $4
            """
        return try await database.withConnection { connection in
            var bindings = PostgresBindings()
            bindings.append(containerID)
            bindings.append(environment.code)
            bindings.append(since)
            bindings.append(keep)
            let operations = try await connection.rows(PostgresQuery(unsafeSQL: """
                SELECT op, count(*), count(*) FILTER (WHERE st >= 400),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY dur), percentile_cont(0.95) WITHIN GROUP (ORDER BY dur)
                FROM (\(requests)) r GROUP BY op ORDER BY 2 DESC, 1
                """, binds: bindings), logger: logger).map { row in
                let (name, requests, errors, p50, p95) = try row.decode((String, Int64, Int64, Double, Double).self)
                return RequestLogSummary(operation: name, requests: requests, errors: errors, p50Microseconds: p50, p95Microseconds: p95)
            }
            bindings.append(Int64(bucketSeconds))
            bindings.append(operation)
            let buckets = try await connection.rows(PostgresQuery(unsafeSQL: """
                SELECT (floor(extract(epoch FROM at) / $5) * $5)::int8, count(*), count(*) FILTER (WHERE st >= 400),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY dur), percentile_cont(0.95) WITHIN GROUP (ORDER BY dur)
                FROM (\(requests)) r WHERE $6::text IS NULL OR op = $6 GROUP BY 1 ORDER BY 1
                """, binds: bindings), logger: logger).map { row in
                let (start, requests, errors, p50, p95) = try row.decode((Int64, Int64, Int64, Double, Double).self)
                return RequestLogSummary(start: Date(timeIntervalSince1970: TimeInterval(start)), requests: requests, errors: errors,
                                         p50Microseconds: p50, p95Microseconds: p95)
            }
            return (operations, buckets)
        }
    }
}

/// One container-environment's batch of the request log, in one statement: its numbers taken
/// (`request_log_heads`), the batch stored, and the batches past the limit deleted (the DELETE
/// sees the table as it was before the statement, so never the new batch). Answers how many
/// batches went. Prepared, because planning it cost nearly as much as running it.
///
/// Batches number their requests in order without gaps, so a batch's `first_seq` is past the
/// limit whenever its `last_seq` is, and only the newest such batch can straddle it: bounded by
/// `first_seq` (the primary key's last column), the DELETE reads the batches it deletes and at
/// most one more. Bounded by `last_seq` alone it read every batch kept: up to `keep` of them for
/// a quiet container (a request a second is a batch a second), on every write, so the log's
/// cost grew with its length.
struct WriteRequestLog: PostgresPreparedStatement {
    static let name = "stratus.WriteRequestLog"
    static let sql = """
        WITH head AS (
            INSERT INTO request_log_heads AS h (container_id, environment, next_seq) VALUES ($1, $2, $3)
            ON CONFLICT (container_id, environment) DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq
            RETURNING next_seq),
        added AS (
            INSERT INTO request_log (container_id, environment, first_seq, last_seq, first_at, last_at, at, database, operation, status,
                                     error_code, duration_us, user_record_name, request_id, client_address, reason)
            SELECT $1, $2, next_seq - $4 + 1, next_seq, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17 FROM head),
        gone AS (
            DELETE FROM request_log WHERE container_id = $1 AND environment = $2
              AND first_seq <= (SELECT next_seq FROM head) - $5 AND last_seq <= (SELECT next_seq FROM head) - $5
            RETURNING 1)
        SELECT count(*) FROM gone
        """
    typealias Row = Int64

    var containerID: ContainerID
    var environment: Int16
    /// Requests numbered, and written (the newest `keep` of them).
    var count: Int64
    var written: Int64
    var keep: Int64
    var firstAt: Date
    var lastAt: Date
    /// The entries' fields, one array each (`BinaryArray`: written directly in PostgreSQL's binary form).
    var at: BinaryArray
    var databases: BinaryArray
    var operations: BinaryArray
    var statuses: BinaryArray
    var codes: BinaryArray
    var durations: BinaryArray
    var users: BinaryArray
    var ids: BinaryArray
    var addresses: BinaryArray
    var reasons: BinaryArray

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 17)
        bindings.append(containerID)
        bindings.append(environment)
        bindings.append(count)
        bindings.append(written)
        bindings.append(keep)
        bindings.append(firstAt)
        bindings.append(lastAt)
        bindings.append(at)
        bindings.append(databases)
        bindings.append(operations)
        bindings.append(statuses)
        bindings.append(codes)
        bindings.append(durations)
        bindings.append(users)
        bindings.append(ids)
        bindings.append(addresses)
        bindings.append(reasons)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }

    /// The same as three statements, each touching one table of the one container, for Citus to
    /// route to the shards of the node holding it: a statement with a data-modifying CTE is
    /// planned by the coordinator step by step, its intermediate results sent to every worker.
    /// The DELETE runs after the INSERT here, but cannot take the new batch: its `last_seq` is the
    /// head, never `keep` (at least 1) below it.
    func runRouted(on connection: PostgresConnection, logger: Logger) async throws {
        let head = try await connection.rows("""
            INSERT INTO request_log_heads AS h (container_id, environment, next_seq) VALUES (\(containerID), \(environment), \(count))
            ON CONFLICT (container_id, environment) DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq
            RETURNING next_seq
            """, logger: logger).first!.decode(Int64.self)
        try await connection.statement("""
            INSERT INTO request_log (container_id, environment, first_seq, last_seq, first_at, last_at, at, database, operation, status,
                                     error_code, duration_us, user_record_name, request_id, client_address, reason)
            VALUES (\(containerID), \(environment), \(head - written + 1), \(head), \(firstAt), \(lastAt), \(at), \(databases), \(operations),
                    \(statuses), \(codes), \(durations), \(users), \(ids), \(addresses), \(reasons))
            """, logger: logger)
        try await connection.statement("""
            DELETE FROM request_log WHERE container_id = \(containerID) AND environment = \(environment)
              AND first_seq <= \(head - keep) AND last_seq <= \(head - keep)
            """, logger: logger)
    }
}
