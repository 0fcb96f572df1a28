import Logging
import PostgresNIO
import StratusCore

/// A change in what a container (and a user's private storage) holds: live records and their bytes.
struct UsageDelta: Sendable, Equatable {
    var records: Int64 = 0
    var bytes: Int64 = 0

    var grows: Bool { records > 0 || bytes > 0 }

    static func + (lhs: UsageDelta, rhs: UsageDelta) -> UsageDelta {
        UsageDelta(records: lhs.records + rhs.records, bytes: lhs.bytes + rhs.bytes)
    }
}

/// What the limits leave free when a write does not fit (`stratus_usage_reserve`).
struct UsageHeadroom: Sendable {
    var records: Int64
    var bytes: Int64
    var userBytes: Int64

    /// Whether growth by `delta` fits.
    func admits(_ delta: UsageDelta) -> Bool {
        delta.records <= records && delta.bytes <= bytes && delta.bytes <= userBytes
    }

    /// The reason a person reads when a write does not fit.
    func refusal(for delta: UsageDelta, recordName: String?) -> StratusError {
        let what = recordName.map { "'\(Names.printable($0))'" } ?? "this record"
        let reason: String
        if delta.records > records {
            reason = "the container's record quota is used up (room for \(max(records, 0)) more)"
        } else if delta.bytes > bytes {
            reason = "the container's storage quota is used up (\(max(bytes, 0)) bytes free, \(delta.bytes) needed)"
        } else {
            reason = "the owner's private storage quota is used up (\(max(userBytes, 0)) bytes free, \(delta.bytes) needed)"
        }
        return StratusError(.quotaExceeded, "\(what) was not saved: \(reason); delete records or ask the operator to raise the limit")
    }
}

/// The counters a database's writes change: its container-environment's, and its owner's.
struct UsageScope: Hashable, Sendable {
    var containerID: ContainerID
    var environment: ContainerEnvironment
    var owner: UserID
}

/// What a write adds to its database's metered usage: reserved (or refused, past a quota) in
/// the write's transaction, from striped counters.
struct UsageMeter: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension UsageMeter {
    /// Makes the counter stripes of `db`'s scopes, each with an equal share of what its limit
    /// leaves free, if they do not exist yet. In a statement of its own, before the write's
    /// transaction: the first writers of a new scope then take stripes of their own instead of
    /// waiting on each other. Remembered per process, so a request pays for this once per scope.
    func ensureUsageScopes(_ db: DatabaseRef) async throws {
        let scope = UsageScope(containerID: db.containerID, environment: db.environment, owner: Self.meteredOwner(db))
        guard !store.usageScopes.withLock({ $0.contains(scope) }) else { return }
        let defaults = QuotaLimits.defaults
        try await database.withConnection { connection in
            try await connection.statement("""
                WITH q AS (
                    SELECT coalesce(max(max_records), \(defaults.maxRecords)) AS r, coalesce(max(max_storage_bytes), \(defaults.maxStorageBytes)) AS b,
                           coalesce(max(user_private_storage_bytes), \(defaults.userPrivateStorageBytes)) AS u
                    FROM quota_limits WHERE container_id = \(db.containerID) AND environment = \(db.environment.code)
                ), scopes AS (
                    SELECT '' AS o, q.r AS r, q.b AS b FROM q
                    UNION ALL
                    SELECT \(scope.owner), 1::bigint << 60, q.u FROM q WHERE \(scope.owner) <> ''
                )
                INSERT INTO usage_counters (container_id, environment, owner, stripe, records_cap, bytes_cap)
                SELECT \(db.containerID)::bigint, \(db.environment.code)::int2, s.o, g, s.r / 16, s.b / 16
                FROM scopes s, generate_series(0, 15) g
                WHERE NOT EXISTS (SELECT 1 FROM usage_counters x WHERE x.container_id = \(db.containerID)
                                  AND x.environment = \(db.environment.code) AND x.owner = s.o)
                ORDER BY s.o, g
                ON CONFLICT DO NOTHING
                """, logger: logger)
        }
        store.usageScopes.withLock { scopes in
            if scopes.count >= 100_000 { scopes.removeAll() }
            scopes.insert(scope)
        }
    }

    /// Whose private storage a database's records count against: the owner of a private database
    /// (shared zones live there), nobody's for the public database.
    static func meteredOwner(_ db: DatabaseRef) -> UserID { db.scope == .private ? db.owner : .nobody }

    /// The stored sizes of the live records among `records`, by name (what their writes replace).
    static func liveSizes(_ records: some Sequence<Record>) -> [String: Int64] {
        var sizes: [String: Int64] = [:]
        for record in records where !record.deleted { sizes[record.recordName] = record.storedSize ?? 0 }
        return sizes
    }

    /// How one planned write changes usage. `liveSizes`: the stored size of each live current record.
    static func usageDelta(of outcome: Result<PlannedWrite, StratusError>, liveSizes: [String: Int64]) -> UsageDelta {
        switch outcome {
        case .success(.save(let record, _)):
            let old = liveSizes[record.recordName]
            // The field data and the bytes of its assets (records.size: `WriteRecords`).
            let size = Int64(record.encodedFields?.count ?? Record.encodeFields(record.fields).count) + record.assetBytes
            return UsageDelta(records: old == nil ? 1 : 0, bytes: size - (old ?? 0))
        case .success(.delete(let name, _)):
            guard let old = liveSizes[name] else { return UsageDelta() }
            return UsageDelta(records: -1, bytes: -old)
        case .success(.alreadyAbsent), .failure:
            return UsageDelta()
        }
    }

    /// Encodes the field data of every planned save once: its size is what quotas count, and
    /// `apply` stores the same bytes.
    static func encodeSaves(_ outcomes: inout [Result<PlannedWrite, StratusError>]) {
        for index in outcomes.indices {
            guard case .success(.save(var record, let isNew)) = outcomes[index], record.encodedFields == nil else { continue }
            record.encodedFields = Record.encodeFields(record.fields)
            outcomes[index] = .success(.save(record, isNew: isNew))
        }
    }

    /// Makes room for the growth the planned writes bring, in the container's and the owner's
    /// quotas, before anything is written (the counter stripes stay locked until commit, so the
    /// write that follows fits). Operations that would pass a limit become `QUOTA_EXCEEDED`: in
    /// request order, the first that fit are kept (writes that shrink usage always are). Returns
    /// whether any operation was refused, and the stripes the write is to count in (-1: the
    /// connection's own, when nothing grows).
    func reserveUsage(_ db: DatabaseRef, outcomes: inout [Result<PlannedWrite, StratusError>], liveSizes: [String: Int64],
                      names: [String?], on connection: PostgresConnection) async throws -> (refused: Bool, stripes: (Int16, Int16)) {
        let deltas = outcomes.map { Self.usageDelta(of: $0, liveSizes: liveSizes) }
        let total = deltas.reduce(UsageDelta(), +)
        guard deltas.contains(where: \.grows) else { return (false, (-1, -1)) }
        let headroom: UsageHeadroom
        switch try await reserve(db, total, on: connection) {
        case .fits(let stripes): return (false, stripes)
        case .full(let free): headroom = free
        }
        // Shrinking writes first (they free room at once), then growth in request order.
        var kept = deltas.filter { !$0.grows }.reduce(UsageDelta(), +)
        for index in outcomes.indices where deltas[index].grows {
            let next = kept + deltas[index]
            if headroom.admits(UsageDelta(records: max(next.records, 0), bytes: max(next.bytes, 0))) {
                kept = next
            } else {
                outcomes[index] = .failure(headroom.refusal(for: deltas[index], recordName: names[index]))
            }
        }
        guard kept.grows else { return (true, (-1, -1)) }
        // The counters are locked by this transaction since the first call: what was free still is.
        guard case .fits(let stripes) = try await reserve(db, kept, on: connection) else {
            throw StratusError(.internalError, "quota reservation changed under its lock")
        }
        return (true, stripes)
    }

    enum Reservation {
        /// The stripes (container, owner; -1 for none) the write counts in, locked.
        case fits((Int16, Int16))
        case full(UsageHeadroom)
    }

    /// `stratus_usage_reserve`: where growth by `delta` counts, or what is free.
    func reserve(_ db: DatabaseRef, _ delta: UsageDelta, on connection: PostgresConnection) async throws -> Reservation {
        let defaults = QuotaLimits.defaults
        let rows = try await connection.rows("""
            SELECT stratus_usage_reserve(\(db.containerID), \(db.environment.code), \(Self.meteredOwner(db)), \(delta.records), \(delta.bytes),
                                         \(defaults.maxRecords), \(defaults.maxStorageBytes), \(defaults.userPrivateStorageBytes))
            """, logger: logger)
        let answer = try rows.first?.decode([Int64].self) ?? []
        if answer.count == 2 { return .fits((Int16(answer[0]), Int16(answer[1]))) }
        guard answer.count == 3 else { throw StratusError(.internalError, "unexpected quota reservation \(answer)") }
        return .full(UsageHeadroom(records: answer[0], bytes: answer[1], userBytes: answer[2]))
    }

    /// Takes records removed by a statement other than `WriteRecords` (a deleted zone) off the counters.
    static func releaseUsage(_ db: DatabaseRef, records: Int64, bytes: Int64, on connection: PostgresConnection, logger: Logger) async throws {
        guard records != 0 || bytes != 0 else { return }
        let owners: [UserID] = meteredOwner(db).isNobody ? [.nobody] : [.nobody, meteredOwner(db)]
        try await connection.statement("""
            INSERT INTO usage_counters AS c (container_id, environment, owner, stripe, records, bytes)
            SELECT \(db.containerID), \(db.environment.code), o, pg_backend_pid() % 16, \(-records), \(-bytes) FROM unnest(\(owners)::text[]) AS o
            ON CONFLICT (container_id, environment, owner, stripe)
            DO UPDATE SET records = c.records + excluded.records, bytes = c.bytes + excluded.bytes
            """, logger: logger)
    }

    /// Whether `error` is `WriteRecords` refusing growth past its counter stripe's cap.
    static func isPastStripeCap(_ error: any Error) -> Bool { Database.sqlState(error) == "SR001" }
}
