import Foundation
import Logging
import PostgresNIO
import StratusCore

/// What a container-environment holds and has been asked, as metered (`stratus usage`).
public struct UsageReport: Sendable {
    public struct Owner: Sendable {
        public var user: String
        public var records: Int64
        public var bytes: Int64
    }
    /// Requests (operations) in a recent period, and how many were refused.
    public struct Requests: Sendable {
        public var requests: Int64 = 0
        public var throttled: Int64 = 0
        public var refused: Int64 = 0
        /// Notifications queued for subscribers.
        public var notifications: Int64 = 0
        /// Notifications dropped past the container-environment's `notificationsPerSecond`.
        public var notificationsDropped: Int64 = 0
        /// Pushes the providers (APNs, Web Push services) accepted.
        public var pushes: Int64 = 0
        /// Sign-up attempts let through (accounts made, and `EXISTS` answers), and refused past a sign-up limit.
        public var signups: Int64 = 0
        public var signupsThrottled: Int64 = 0
    }
    public var records: Int64
    public var bytes: Int64
    public var limits: QuotaLimits
    /// Users by private storage, largest first (at most 10).
    public var topUsers: [Owner]
    public var lastMinute: Requests
    public var lastHour: Requests
    public var lastDay: Requests
}

/// A counter that differs from a recount of the data (`stratus usage --verify`).
public struct UsageDifference: Sendable {
    public var containerID: ContainerID
    public var container: String
    public var environment: Int16
    /// '' for the container-environment's totals, else a user's private storage.
    public var owner: UserID
    public var countedRecords: Int64
    public var meteredRecords: Int64
    public var countedBytes: Int64
    public var meteredBytes: Int64
}

/// What containers use and may use: usage reports and checks, rate-limit counts, quotas and the
/// request log (`admin.metering`).
public struct MeteringStore: Sendable {
    let store: AdminStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension MeteringStore {
    /// The metered usage of a container-environment.
    public func usageReport(containerID: ContainerID, environment: ContainerEnvironment, now: Date = Date()) async throws -> UsageReport {
        try await database.withConnection { connection in
            let settings = try await self.quotaSettings(containerID: containerID, environment: environment, on: connection)
            let totals = try await connection.rows("""
                SELECT coalesce(sum(records), 0)::bigint, coalesce(sum(bytes), 0)::bigint FROM usage_counters
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND owner = ''
                """, logger: self.logger).first!.decode((Int64, Int64).self)
            var owners: [UsageReport.Owner] = []
            for row in try await connection.rows("""
                SELECT owner, sum(records)::bigint, sum(bytes)::bigint FROM usage_counters
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND owner <> ''
                GROUP BY owner HAVING sum(records) > 0 ORDER BY 3 DESC, 1 LIMIT 10
                """, logger: self.logger) {
                let (user, records, bytes) = try row.decode((String, Int64, Int64).self)
                owners.append(.init(user: user, records: records, bytes: bytes))
            }
            let second = Int64(now.timeIntervalSince1970)
            var periods = [UsageReport.Requests(), UsageReport.Requests(), UsageReport.Requests()]
            for row in try await connection.rows("""
                SELECT bucket, requests, throttled, refused, notifications, notifications_dropped, signups, signups_throttled, pushes FROM request_counts
                WHERE container_id = \(containerID) AND environment = \(environment.code) AND bucket > \(second - 86_400)
                """, logger: self.logger) {
                let (bucket, requests, throttled, refused, notifications, dropped, signups, signupsThrottled, pushes)
                    = try row.decode((Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64, Int64).self)
                for (index, span) in [Int64(60), 3_600, 86_400].enumerated() where bucket > second - span {
                    periods[index].requests += requests
                    periods[index].throttled += throttled
                    periods[index].refused += refused
                    periods[index].notifications += notifications
                    periods[index].notificationsDropped += dropped
                    periods[index].signups += signups
                    periods[index].signupsThrottled += signupsThrottled
                    periods[index].pushes += pushes
                }
            }
            return UsageReport(records: totals.0, bytes: totals.1, limits: settings.limits, topUsers: owners,
                               lastMinute: periods[0], lastHour: periods[1], lastDay: periods[2])
        }
    }

    /// Recounts live records and bytes from the data, per container-environment and per user's
    /// private database, and returns every counter that differs (none: the meters are exact).
    /// One statement, so one snapshot: writes in flight change both sides or neither.
    public func verifyUsage(containerID: ContainerID?, environment: ContainerEnvironment?) async throws -> [UsageDifference] {
        var binds = PostgresBindings()
        var filters: [String] = []
        if let containerID {
            binds.append(containerID)
            filters.append("container_id = $\(binds.count)")
        }
        if let environment {
            binds.append(environment.code)
            filters.append("environment = $\(binds.count)")
        }
        let filter = filters.isEmpty ? "true" : filters.joined(separator: " AND ")
        let zoneFilter = filters.isEmpty ? "true" : filters.map { "z." + $0 }.joined(separator: " AND ")
        return try await database.transaction { connection in
            try await Database.allowLongStatements(on: connection, logger: self.logger)
            var differences: [UsageDifference] = []
            for row in try await connection.rows(PostgresQuery(unsafeSQL: """
                WITH live AS (
                    -- Recounted from the data, not from records.size: the field data plus the
                    -- stored size of each distinct asset the record holds.
                    SELECT z.container_id, z.environment, z.database_scope, z.owner,
                           octet_length(r.fields) + coalesce((SELECT sum(a.size) FROM asset_references ar
                               JOIN assets a ON a.container_id = ar.container_id AND a.checksum = ar.checksum
                               WHERE ar.container_id = r.container_id AND ar.zone_id = r.zone_id AND ar.record_name = r.record_name), 0) AS size
                    FROM records r JOIN zones z ON z.container_id = r.container_id AND z.zone_id = r.zone_id
                    WHERE NOT r.deleted AND \(zoneFilter)
                ), counted AS (
                    SELECT container_id, environment, '' AS owner, count(*) AS records, sum(size) AS bytes FROM live GROUP BY 1, 2
                    UNION ALL
                    SELECT container_id, environment, owner, count(*), sum(size) FROM live WHERE database_scope = 2 GROUP BY 1, 2, 3
                ), metered AS (
                    SELECT container_id, environment, owner, sum(records) AS records, sum(bytes) AS bytes
                    FROM usage_counters WHERE \(filter) GROUP BY 1, 2, 3
                )
                SELECT d.*, coalesce(k.name, '?') FROM (
                    SELECT container_id, environment, owner, coalesce(c.records, 0)::bigint, coalesce(m.records, 0)::bigint,
                           coalesce(c.bytes, 0)::bigint, coalesce(m.bytes, 0)::bigint
                    FROM counted c FULL JOIN metered m USING (container_id, environment, owner)
                    WHERE coalesce(c.records, 0) <> coalesce(m.records, 0) OR coalesce(c.bytes, 0) <> coalesce(m.bytes, 0)
                ) d LEFT JOIN containers k ON k.container_id = d.container_id
                ORDER BY 1, 2, 3
                """, binds: binds), logger: self.logger) {
                let (container, environment, owner, countedRecords, meteredRecords, countedBytes, meteredBytes, name) =
                    try row.decode((ContainerID, Int16, String, Int64, Int64, Int64, Int64, String).self)
                differences.append(UsageDifference(containerID: container, container: name, environment: environment, owner: UserID(owner),
                                                   countedRecords: countedRecords, meteredRecords: meteredRecords,
                                                   countedBytes: countedBytes, meteredBytes: meteredBytes))
            }
            return differences
        }
    }
}

/// Rows of a background write (`addRequestCounts`, `writeRequestLog`) that could not be saved
/// (on Citus, their worker's transaction failed) while others were: the positions of the unsaved
/// ones in the entries given.
public struct RowsUnsaved: Error {
    public var positions: [Int]
    public var underlying: any Error
}

/// A container-environment's request counts in one 10-second bucket, to add to `request_counts`.
public struct RequestCounts: Sendable {
    public var containerID: ContainerID
    public var environment: ContainerEnvironment
    public var bucket: Int64
    public var requests: Int64
    public var throttled: Int64
    public var refused: Int64
    public var notifications: Int64
    public var notificationsDropped: Int64
    public var pushes: Int64

    public init(containerID: ContainerID, environment: ContainerEnvironment, bucket: Int64, requests: Int64, throttled: Int64, refused: Int64,
                notifications: Int64 = 0, notificationsDropped: Int64 = 0, pushes: Int64 = 0) {
        self.containerID = containerID
        self.environment = environment
        self.bucket = bucket
        self.requests = requests
        self.throttled = throttled
        self.refused = refused
        self.notifications = notifications
        self.notificationsDropped = notificationsDropped
        self.pushes = pushes
    }
}

extension MeteringStore {
    /// Writes this process's counts of the window starting at `second` and returns, per key, what
    /// the other processes have reported for it and how many of them were active on it (this
    /// window or the one before).
    public func exchangeRateCounts(second: Int64, process: String, keys: [String], counts: [Int64]) async throws -> [String: (count: Int64, processes: Int64)] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                WITH mine AS (
                    INSERT INTO rate_windows (key, window_start, process, count)
                    SELECT k, \(second), \(process), c FROM unnest(\(keys)::text[], \(counts)::int8[]) AS u(k, c)
                    ON CONFLICT (key, window_start, process) DO UPDATE SET count = excluded.count
                )
                SELECT key, coalesce(sum(count) FILTER (WHERE window_start = \(second)), 0)::int8, count(DISTINCT process)::int8
                FROM rate_windows WHERE key = ANY(\(keys)::text[]) AND window_start >= \(second - 1) AND process <> \(process)
                GROUP BY key
                """, logger: logger)
        }
        var others: [String: (Int64, Int64)] = [:]
        for row in rows {
            let (key, count, processes) = try row.decode((String, Int64, Int64).self)
            others[key] = (count, processes)
        }
        return others
    }

    /// Adds request counts to `request_counts`. On Citus, one statement per worker, on that
    /// worker, with the rows of the containers it holds (`Database.transactionPerCitusWorker`):
    /// an `INSERT … SELECT` of rows for many containers is repartitioned by the coordinator
    /// across every worker's shards, which cost more than the requests it counted. A worker that
    /// fails leaves the others' rows saved: ``RowsUnsaved`` names the entries it held.
    public func addRequestCounts(_ entries: [RequestCounts]) async throws {
        try await database.transactionPerCitusWorker(entries.map(\.containerID)) { positions, routed, connection in
            guard !routed else {
                try await connection.statement(Self.requestCountsRows(positions.map { entries[$0] }), logger: logger)
                return
            }
            try await connection.statement("""
                INSERT INTO request_counts AS r (container_id, environment, bucket, requests, throttled, refused, notifications, notifications_dropped, pushes)
                SELECT * FROM unnest(\(entries.map(\.containerID))::int8[], \(entries.map(\.environment.code))::int2[],
                                     \(entries.map(\.bucket))::int8[], \(entries.map(\.requests))::int8[],
                                     \(entries.map(\.throttled))::int8[], \(entries.map(\.refused))::int8[],
                                     \(entries.map(\.notifications))::int8[], \(entries.map(\.notificationsDropped))::int8[],
                                     \(entries.map(\.pushes))::int8[])
                ON CONFLICT (container_id, environment, bucket) DO UPDATE
                SET requests = r.requests + excluded.requests, throttled = r.throttled + excluded.throttled, refused = r.refused + excluded.refused,
                    notifications = r.notifications + excluded.notifications,
                    notifications_dropped = r.notifications_dropped + excluded.notifications_dropped, pushes = r.pushes + excluded.pushes
                """, logger: logger)
        }
    }

    /// `entries` added to `request_counts` as rows of values (each row's cells bound), for a
    /// statement Citus runs on the one worker holding their containers.
    static func requestCountsRows(_ entries: [RequestCounts]) -> PostgresQuery {
        var bindings = PostgresBindings(capacity: entries.count * 9)
        var rows: [String] = []
        rows.reserveCapacity(entries.count)
        for entry in entries {
            let first = bindings.count + 1
            rows.append("(" + (first..<first + 9).map { "$\($0)" }.joined(separator: ", ") + ")")
            bindings.append(entry.containerID.rawValue)
            bindings.append(entry.environment.code)
            for value in [entry.bucket, entry.requests, entry.throttled, entry.refused, entry.notifications, entry.notificationsDropped, entry.pushes] {
                bindings.append(value)
            }
        }
        return PostgresQuery(unsafeSQL: """
            INSERT INTO request_counts AS r (container_id, environment, bucket, requests, throttled, refused, notifications, notifications_dropped, pushes)
            VALUES \(rows.joined(separator: ", "))
            ON CONFLICT (container_id, environment, bucket) DO UPDATE
            SET requests = r.requests + excluded.requests, throttled = r.throttled + excluded.throttled, refused = r.refused + excluded.refused,
                notifications = r.notifications + excluded.notifications,
                notifications_dropped = r.notifications_dropped + excluded.notifications_dropped, pushes = r.pushes + excluded.pushes
            """, binds: bindings)
    }

    /// Drops rate windows older than ten seconds and request counts older than two days.
    public func sweepRateCounts(now second: Int64) async throws {
        try await database.withConnection { connection in
            try await connection.statement("DELETE FROM rate_windows WHERE window_start < \(second - 10)", logger: logger)
            try await connection.statement("DELETE FROM request_counts WHERE bucket < \(second - 2 * 86_400)", logger: logger)
            try await connection.statement("DELETE FROM signup_attempts WHERE window_start < now() - interval '1 hour'", logger: logger)
        }
    }
}
