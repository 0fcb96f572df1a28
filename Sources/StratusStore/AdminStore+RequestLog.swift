import Foundation
import Logging
import PostgresNIO
import StratusCore

/// One answered data-API request, as the request log keeps it.
public struct RequestLogEntry: Sendable, Equatable {
    public var containerID: Int64
    public var environment: ContainerEnvironment
    /// Its number in the container-environment's log: grows in the order rows were written (0 until then).
    public var seq: Int64 = 0
    public var at: Date
    public var database: DatabaseScope?
    /// The operation: `records/lookup`, `zones/modify`, `courier`…
    public var operation: String
    public var status: Int
    public var errorCode: String?
    public var durationMicroseconds: Int
    public var userRecordName: String?
    public var requestID: String
    public var clientAddress: String?

    public init(containerID: Int64, environment: ContainerEnvironment, at: Date, database: DatabaseScope?, operation: String, status: Int,
                errorCode: String?, durationMicroseconds: Int, userRecordName: String?, requestID: String, clientAddress: String?) {
        self.containerID = containerID
        self.environment = environment
        self.at = at
        self.database = database
        self.operation = operation
        self.status = status
        self.errorCode = errorCode
        self.durationMicroseconds = durationMicroseconds
        self.userRecordName = userRecordName
        self.requestID = requestID
        self.clientAddress = clientAddress
    }
}

/// Which rows of the request log to read.
public struct RequestLogFilter: Sendable {
    public var since: Date?
    /// An exact status (`404`) or a class (`400` with `statusClass`: 400–499).
    public var status: Int?
    public var statusClass = false
    public var operation: String?
    public var user: String?
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

extension AdminStore {
    /// Writes log rows, grouped by container-environment (each group's `keep`), in one
    /// transaction (one commit a batch, whatever the containers): each row takes its group's next
    /// number, and rows more than `keep` numbers old are deleted, so at most `keep` stay. The
    /// commit is synchronous: an asynchronous one would leave the primary's WAL position ahead of
    /// what replicas can replay for a moment each second, sending reads to the primary meanwhile.
    public func writeRequestLog(_ groups: [(entries: [RequestLogEntry], keep: Int64)]) async throws {
        let groups = groups.filter { !$0.entries.isEmpty && $0.keep > 0 }
        guard !groups.isEmpty else { return }
        try await database.transaction { connection in
            for (entries, keep) in groups {
                try await self.writeRequestLog(entries, keep: keep, on: connection)
            }
        }
    }

    private func writeRequestLog(_ entries: [RequestLogEntry], keep: Int64, on connection: PostgresConnection) async throws {
        let (containerID, environment) = (entries[0].containerID, entries[0].environment.code)
        // Every row is numbered; only the newest `keep` of the batch are written (the others would be deleted at once).
        let written = Array(entries.suffix(Int(min(keep, Int64(entries.count)))))
        let last = try await connection.rows("""
            INSERT INTO request_log_heads (container_id, environment, next_seq) VALUES (\(containerID), \(environment), \(Int64(entries.count)))
            ON CONFLICT (container_id, environment) DO UPDATE SET next_seq = request_log_heads.next_seq + EXCLUDED.next_seq
            RETURNING next_seq
            """, logger: logger).first?.decode(Int64.self) ?? 0
        // Many rows in one statement, each value bound: a single-shard statement on Citus too.
        let firstSeq = last - Int64(written.count) + 1
        for chunkStart in stride(from: 0, to: written.count, by: 500) {
            let chunk = written[chunkStart..<min(chunkStart + 500, written.count)]
            var bindings = PostgresBindings(capacity: chunk.count * 12)
            var rows: [String] = []
            rows.reserveCapacity(chunk.count)
            for (offset, entry) in chunk.enumerated() {
                let base = bindings.count
                rows.append("(" + (1...12).map { "$\(base + $0)" }.joined(separator: ",") + ")")
                bindings.append(containerID)
                bindings.append(environment)
                bindings.append(firstSeq + Int64(chunkStart + offset))
                bindings.append(entry.at)
                bindings.append(entry.database?.code)
                bindings.append(entry.operation)
                bindings.append(Int16(clamping: entry.status))
                bindings.append(entry.errorCode)
                bindings.append(Int32(clamping: entry.durationMicroseconds))
                bindings.append(entry.userRecordName)
                bindings.append(entry.requestID)
                bindings.append(entry.clientAddress)
            }
            try await connection.statement(PostgresQuery(unsafeSQL: """
                INSERT INTO request_log (container_id, environment, seq, at, database, operation, status, error_code, duration_us,
                                         user_record_name, request_id, client_address)
                VALUES \(rows.joined(separator: ","))
                """, binds: bindings), logger: logger)
        }
        try await connection.statement("""
            DELETE FROM request_log WHERE container_id = \(containerID) AND environment = \(environment) AND seq <= \(last - keep)
            """, logger: logger)
    }

    /// Rows of a container-environment's request log: newest first, or with `after` oldest first.
    public func requestLog(containerID: Int64, environment: ContainerEnvironment, filter: RequestLogFilter) async throws -> [RequestLogEntry] {
        let statusLow = filter.status.map(Int16.init(clamping:))
        let statusHigh = filter.status.map { Int16(clamping: filter.statusClass ? $0 + 99 : $0) }
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT seq, at, database, operation, status, error_code, duration_us, user_record_name, request_id, client_address
                FROM request_log
                WHERE container_id = \(containerID) AND environment = \(environment.code)
                  AND (\(filter.after)::int8 IS NULL OR seq > \(filter.after)) AND (\(filter.before)::int8 IS NULL OR seq < \(filter.before))
                  AND (\(filter.since)::timestamptz IS NULL OR at >= \(filter.since))
                  AND (\(statusLow)::int2 IS NULL OR status BETWEEN \(statusLow) AND \(statusHigh))
                  AND (\(filter.operation)::text IS NULL OR operation = \(filter.operation))
                  AND (\(filter.user)::text IS NULL OR user_record_name = \(filter.user))
                ORDER BY seq \(unescaped: filter.after == nil ? "DESC" : "ASC") LIMIT \(filter.limit)
                """, logger: logger)
        }
        return try rows.map { row in
            let (seq, at, database, operation, status, errorCode, duration, user, requestID, address) =
                try row.decode((Int64, Date, Int16?, String, Int16, String?, Int32, String?, String, String?).self)
            var entry = RequestLogEntry(containerID: containerID, environment: environment, at: at,
                                        database: database.flatMap { code in [DatabaseScope.public, .private, .shared].first { $0.code == code } },
                                        operation: operation, status: Int(status), errorCode: errorCode, durationMicroseconds: Int(duration),
                                        userRecordName: user, requestID: requestID, clientAddress: address)
            entry.seq = seq
            return entry
        }
    }

    /// Requests, errors (status 400 and above) and the median and 95th percentile of their
    /// durations since `since`: per operation (busiest first), and per `bucketSeconds` of time
    /// (oldest first; buckets without requests are left out), for one operation when given.
    public func requestTelemetry(containerID: Int64, environment: ContainerEnvironment, since: Date, bucketSeconds: Int,
                                 operation: String?) async throws -> (operations: [RequestLogSummary], buckets: [RequestLogSummary]) {
        try await database.withConnection { connection in
            let operations = try await connection.rows("""
                SELECT operation, count(*), count(*) FILTER (WHERE status >= 400),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_us), percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_us)
                FROM request_log WHERE container_id = \(containerID) AND environment = \(environment.code) AND at >= \(since)
                GROUP BY operation ORDER BY 2 DESC, 1
                """, logger: logger).map { row in
                let (name, requests, errors, p50, p95) = try row.decode((String, Int64, Int64, Double, Double).self)
                return RequestLogSummary(operation: name, requests: requests, errors: errors, p50Microseconds: p50, p95Microseconds: p95)
            }
            let buckets = try await connection.rows("""
                SELECT (floor(extract(epoch FROM at) / \(bucketSeconds)) * \(bucketSeconds))::int8, count(*), count(*) FILTER (WHERE status >= 400),
                       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_us), percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_us)
                FROM request_log WHERE container_id = \(containerID) AND environment = \(environment.code) AND at >= \(since)
                  AND (\(operation)::text IS NULL OR operation = \(operation))
                GROUP BY 1 ORDER BY 1
                """, logger: logger).map { row in
                let (start, requests, errors, p50, p95) = try row.decode((Int64, Int64, Int64, Double, Double).self)
                return RequestLogSummary(start: Date(timeIntervalSince1970: TimeInterval(start)), requests: requests, errors: errors,
                                         p50Microseconds: p50, p95Microseconds: p95)
            }
            return (operations, buckets)
        }
    }
}
