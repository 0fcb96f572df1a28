import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// One database of a container-environment: the public database, or a user's private one.
public struct DatabaseRef: Sendable, Hashable {
    public var containerID: ContainerID
    public var environment: ContainerEnvironment
    public var scope: DatabaseScope
    /// The owning user's record name; empty for the public database.
    public var owner: UserID

    public init(containerID: ContainerID, environment: ContainerEnvironment, scope: DatabaseScope, owner: UserID) {
        self.containerID = containerID
        self.environment = environment
        self.scope = scope
        self.owner = owner
    }

    /// Whether zone rows track record changes (for `changes/database`).
    var tracksZoneChanges: Bool { scope != .public }
}

/// A zone as stored.
public struct ZoneInfo: Sendable, Equatable {
    public var zoneID: ZoneID
    public var name: String
    public var deleted: Bool
    /// The zone's position in the database change feed.
    public var changeXID: Int64
    public var changeSeq: Int64
}

/// A position in a change feed: rows are ordered by (transaction id, sequence).
public struct ChangePosition: Sendable, Equatable, Comparable {
    public var xid: Int64
    public var seq: Int64

    public init(xid: Int64, seq: Int64) {
        self.xid = xid
        self.seq = seq
    }

    public static let start = ChangePosition(xid: 0, seq: 0)

    public static func < (a: ChangePosition, b: ChangePosition) -> Bool {
        (a.xid, a.seq) < (b.xid, b.seq)
    }
}

/// Fault-injection points for tests (reliability-plan §5). Nothing sets them outside the test suite.
public final class TestHooks: Sendable {
    /// A hook, boxed: a closure kept in a `Mutex` is re-wrapped in reabstraction thunks on every
    /// access, so each call would go through a longer chain.
    private final class Hook: Sendable {
        let run: @Sendable ([String]) async -> Void
        init(_ run: @escaping @Sendable ([String]) async -> Void) { self.run = run }
    }

    private let beforeCommitHook = Mutex<Hook?>(nil)

    private let beforeOptimisticWriteHook = Mutex<Hook?>(nil)

    private let beforeUnreadWriteHook = Mutex<Hook?>(nil)

    /// Called inside a `records/modify` transaction after its writes, just before COMMIT, with the
    /// record names. While it is set, no request takes the shortcut of `modifyOne`: all run in the transaction.
    public var beforeCommit: (@Sendable ([String]) async -> Void)? {
        get { beforeCommitHook.withLock { $0 }?.run }
        set { let hook = newValue.map(Hook.init); beforeCommitHook.withLock { $0 = hook } }
    }

    /// Called in `modifyOne` between its unlocked read and its write, with the record names.
    public var beforeOptimisticWrite: (@Sendable ([String]) async -> Void)? {
        get { beforeOptimisticWriteHook.withLock { $0 }?.run }
        set { let hook = newValue.map(Hook.init); beforeOptimisticWriteHook.withLock { $0 = hook } }
    }

    /// Called in `modifyOne` just before a save that names every field is written without reading
    /// its record (`Prepared.ReplaceRecords`), with the record names.
    public var beforeUnreadWrite: (@Sendable ([String]) async -> Void)? {
        get { beforeUnreadWriteHook.withLock { $0 }?.run }
        set { let hook = newValue.map(Hook.init); beforeUnreadWriteHook.withLock { $0 = hook } }
    }
}

/// Records, zones and change feeds in PostgreSQL.
public final class RecordStore: Sendable {
    /// Fault-injection points used by the test suite.
    public let testHooks = TestHooks()
    let database: Database
    let logger: Logger
    public let schemas: SchemaStore
    /// Ids of default zones, which are never deleted, so they can be cached safely.
    private let defaultZones = Mutex<[DatabaseRef: ZoneID]>([:])
    /// Usage scopes (container-environment, and owner) whose counter stripes this process has seen made.
    let usageScopes = Mutex<Set<UsageScope>>([])
    /// Told of every write's committed record changes (the notifier), when set. An existential,
    /// not a closure: a closure read back out of a `Mutex` on every write was wrapped in one more
    /// reabstraction thunk each time, and writes slowed down as the chain grew (perf, `bench.sh`).
    let changeObserver = Mutex<(any RecordChangeObserver)?>(nil)

    /// Shares, their participants and the shared database.
    public var sharing: SharingStore { SharingStore(store: self) }
    /// Subscriptions, notifications and web courier tokens.
    public var subscriptions: SubscriptionStore { SubscriptionStore(store: self) }
    /// A user's data, for export and erasure.
    public var users: UserDataStore { UserDataStore(store: self) }
    /// Usage reserved by writes.
    var usage: UsageMeter { UsageMeter(store: self) }
    /// Index entries, references and asset references written beside records.
    var indexWrites: IndexWrites { IndexWrites(store: self) }
    /// Share records and shared hierarchies on the modify path.
    var shareWrites: ShareWrites { ShareWrites(store: self) }

    /// Sets the observer told of every write's committed record changes.
    public func observeChanges(_ observer: any RecordChangeObserver) {
        changeObserver.withLock { $0 = observer }
    }

    /// Whether an observer wants record changes.
    var observed: Bool { changeObserver.withLock { $0 != nil } }
    /// Concurrent lookups share statements, and so do concurrent queries of the same shape.
    let lookups: StatementSharing<LookupRequest, [Record]?>
    let queriesByLoop: PerEventLoop<StatementSharing<QueryRequest, QueryPage?>>
    /// Concurrent reads built at run time with scalar values (shared-database lookups) share
    /// statements when their SQL is the same.
    let dynamicReads: StatementSharing<DynamicRead, DynamicRead.Rows>
    /// Concurrent writes' notifications are queued by shared statements, and concurrent web
    /// courier polls take theirs by shared statements: under a stream of notified writes each
    /// costs a fraction of a statement instead of one or two of its own.
    let notificationQueueing: StatementSharing<NotificationQueueing, [UserID: Int]>
    let notificationTaking: StatementSharing<CourierToken, (seq: Int64, payload: String, made: Date)?>
    /// Concurrent writes' pushes are queued by shared statements too.
    let pushQueueing: StatementSharing<PushQueueing, Void>
    /// Concurrent single-record creates in zones written before share statements (`SharedWrite`).
    let creates: StatementSharing<SharedWrite, SharedWrite.Outcome>
    /// Concurrent single-record updates of records just read share statements too.
    let updates: StatementSharing<SharedWrite, SharedWrite.Outcome>
    /// And so do concurrent saves written without reading their records (`Prepared.ReplaceRecords`).
    let replaces: StatementSharing<SharedWrite, SharedWrite.Outcome>
    /// Zones' ids by name, remembered by single-record writes (`modifyOne`, custom zones) and by
    /// lookups routed to a Citus worker (`Lookups.runRouted`).
    let knownZones: KnownZones
    /// The query sharing of the caller's event loop.
    var queries: StatementSharing<QueryRequest, QueryPage?> { queriesByLoop.current }

    public init(database: Database, logger: Logger) {
        self.database = database
        self.logger = logger
        self.schemas = SchemaStore(database: database, logger: logger)
        // A request may name up to 200 records; a statement serves up to 256 names. On Citus no
        // statement is shared: each must name its one container for Citus to route it.
        let shares = !database.configuration.citusCoordinator
        let knownZones = KnownZones()
        self.knownZones = knownZones
        self.lookups = StatementSharing(shares: shares, keysPerStatement: 256, keys: { max($0.names.count, 1) }) { requests, sending in
            if database.citusRoutes != nil, let request = requests.first, requests.count == 1 {
                // On Citus routing to workers: straight to the worker holding the container, as
                // single-table statements (through the coordinator, the one joined statement).
                let known = knownZones.zoneID(request.db, request.zone)
                return try await database.withConnection(routedTo: request.db.containerID) { connection in
                    sending()
                    return [try await Lookups.runRouted(request, known: known, remember: { zoneID in
                        if zoneID != known { knownZones.remember(request.db, request.zone, zoneID: zoneID) }
                    }, on: connection, logger: logger)]
                }
            }
            return try await database.withConnection { connection in
                sending()
                return try await Lookups.run(requests, on: connection, logger: logger)
            }
        }
        self.notificationQueueing = StatementSharing(shares: shares, keysPerStatement: 5_000, keys: { $0.notifications.count }) { requests, sending in
            try await database.withConnection { connection in
                sending()
                return try await SubscriptionStore.queueNotifications(requests, on: connection, logger: logger)
            }
        }
        self.pushQueueing = StatementSharing(shares: shares, keysPerStatement: 5_000, keys: { $0.pushes.count }) { requests, sending in
            try await database.withConnection { connection in
                sending()
                try await SubscriptionStore.queuePushes(requests, on: connection, logger: logger)
                return requests.map { _ in () }
            }
        }
        self.notificationTaking = StatementSharing(shares: shares, keysPerStatement: 128) { requests, sending in
            try await database.withConnection { connection in
                sending()
                return try await SubscriptionStore.takeNotifications(requests, on: connection, logger: logger)
            }
        }
        // Creates run one statement at a time (per two cores, the default), like lookups: with two
        // at once batches were smaller, so each create cost PostgreSQL more and fewer were done;
        // starting a second statement only once several requests queue was no better.
        // (Creates, updates and unread saves each queue on their own: one statement serves one kind.)
        func sharedWrites() -> StatementSharing<SharedWrite, SharedWrite.Outcome> {
            StatementSharing(shares: shares, keysPerStatement: 64) { requests, sending in
                try await database.withConnection { connection in
                    sending()
                    return try await SharedWrite.run(requests, database: database, on: connection, logger: logger)
                }
            }
        }
        self.creates = sharedWrites()
        self.updates = sharedWrites()
        self.replaces = sharedWrites()
        self.dynamicReads = StatementSharing(shares: shares, keysPerStatement: 16, canShare: DynamicRead.canShare) { requests, sending in
            try await database.withConnection { connection in
                sending()
                return try await DynamicRead.run(requests, on: connection, logger: logger)
            }
        }
        // Queries run one statement per core, lookups one per two cores (the default). A query
        // costs PostgreSQL far more than a lookup, so the second statement's overhead matters less
        // than the idle CPU one at a time leaves; lookups with two were no faster and cost more.
        // Queries share within their event loop's connection pool, so a statement and the
        // requests it answers stay on one thread; the slots are split between the pools. That
        // left no CPU idle; lookups shared per loop were no faster for more CPU per lookup, so
        // they share across loops.
        let slots = max(1, ProcessInfo.processInfo.activeProcessorCount / database.pools.values.count)
        self.queriesByLoop = database.pools.map {
            StatementSharing(shares: shares, maximumStatements: slots, keysPerStatement: 16, canShare: QueryRequest.canShare) { requests, sending in
                if !shares, let request = requests.first, requests.count == 1 {
                    // On Citus: straight to the worker holding the container.
                    return try await database.withConnection(routedTo: request.containerID) { connection in
                        sending()
                        return try await RecordStore.runQueries(requests, on: connection, logger: logger)
                    }
                }
                return try await database.withConnection { connection in
                    sending()
                    return try await RecordStore.runQueries(requests, on: connection, logger: logger)
                }
            }
        }
    }

    static let recordColumnNames = ["record_name", "record_type", "change_seq", "fields", "created_at", "created_by", "modified_at",
                                    "modified_by", "deleted", "parent", "share_name", "short_guid"]
    static let recordColumns = recordColumnNames.joined(separator: ", ")
    /// `recordColumns` of the table aliased `alias`.
    static func recordColumns(of alias: String) -> String { recordColumnNames.map { "\(alias).\($0)" }.joined(separator: ", ") }
    /// What `currentRecord` reads: `recordColumns`, the share root and the stored size.
    static let currentColumns = recordColumns + ", share_root, size"

    /// The record in the next cells of `reader` (`currentColumns`) with its
    /// fields decoded (write paths, which merge fields and check share roots).
    static func currentRecord(_ reader: inout RowReader) throws -> Record {
        var record = try storedRecord(&reader)
        record.shareRoot = try reader.next(String?.self)
        record.storedSize = Int64(try reader.next(Int32.self))
        if let encoded = record.encodedFields {
            record.fields = try Record.decodeFields(encoded)
            record.encodedFields = nil
        }
        return record
    }

    /// A record row with its field JSON kept as stored (read paths: responses splice it in).
    static func storedRecord(_ row: PostgresRow) throws -> Record {
        var reader = RowReader(row)
        return try storedRecord(&reader)
    }

    /// The record in the next twelve cells of `reader` (`recordColumns`). The field JSON is taken as
    /// raw bytes (a text column's binary form is its UTF-8): one copy, no String.
    static func storedRecord(_ reader: inout RowReader) throws -> Record {
        let name = try reader.next(String.self), type = try reader.next(String.self), seq = try reader.next(Int64.self)
        let fields = try reader.next(ByteBuffer.self)
        let createdAt = try reader.next(Int64.self), createdBy = try reader.next(UserID.self)
        let modifiedAt = try reader.next(Int64.self), modifiedBy = try reader.next(UserID.self), deleted = try reader.next(Bool.self)
        let parent = try reader.next(String?.self), shareName = try reader.next(String?.self), shortGUID = try reader.next(String?.self)
        return Record(recordName: name, recordType: type, changeSeq: seq, createdAt: createdAt, createdBy: createdBy,
                      modifiedAt: modifiedAt, modifiedBy: modifiedBy, deleted: deleted, encodedFields: fields.getBytes(at: fields.readerIndex, length: fields.readableBytes) ?? [],
                      parent: parent, shareName: shareName, shortGUID: shortGUID)
    }

    // MARK: Zones

    /// The id of a live zone, or `nil` (reads; unlocked). The default zone's row is created when
    /// `createDefault` is set. Writers to a custom zone lock its row with `Prepared.LockZoneAndRecords`.
    func zoneID(_ db: DatabaseRef, name: String, createDefault: Bool, on connection: PostgresConnection) async throws -> ZoneID? {
        if name == Names.defaultZone {
            if let cached = defaultZones.withLock({ $0[db] }) { return cached }
            var rows = try await connection.rows("""
                SELECT zone_id FROM zones WHERE container_id = \(db.containerID) AND environment = \(db.environment.code)
                  AND database_scope = \(db.scope.code) AND owner = \(db.owner) AND zone_name = \(name)
                """, logger: logger)
            if rows.isEmpty, createDefault {
                rows = try await connection.rows("""
                    INSERT INTO zones (container_id, zone_id, environment, database_scope, owner, zone_name, change_xid, change_seq)
                    VALUES (\(db.containerID), nextval('zone_id_seq'), \(db.environment.code), \(db.scope.code), \(db.owner), \(name),
                            pg_current_xact_id()::text::bigint, stratus_change_seq())
                    ON CONFLICT (container_id, environment, database_scope, owner, zone_name) DO UPDATE SET deleted = false
                    RETURNING zone_id
                    """, logger: logger)
            }
            guard let row = rows.first else { return nil }
            let id = try row.decode(ZoneID.self)
            defaultZones.withLock { $0[db] = id }
            return id
        }
        return try await connection.rows(Prepared.FindZone(db: db, zone: name), logger: logger).first
    }

    static func binds(_ values: any PostgresNonThrowingEncodable & Sendable...) -> PostgresBindings {
        var bindings = PostgresBindings(capacity: values.count)
        for value in values { bindings.append(value) }
        return bindings
    }

    static func zoneNotFound(_ name: String) -> StratusError {
        StratusError(.zoneNotFound, "zone '\(Names.printable(name))' does not exist in this database")
    }

    /// The live zones of a database, the default zone first.
    public func listZones(_ db: DatabaseRef) async throws -> [ZoneInfo] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT zone_id, zone_name, deleted, change_xid, change_seq FROM zones
                WHERE container_id = \(db.containerID) AND environment = \(db.environment.code)
                  AND database_scope = \(db.scope.code) AND owner = \(db.owner) AND NOT deleted
                ORDER BY zone_name
                """, logger: logger)
        }
        var zones = try rows.map(Self.zone)
        if !zones.contains(where: { $0.name == Names.defaultZone }) {
            zones.append(ZoneInfo(zoneID: 0, name: Names.defaultZone, deleted: false, changeXID: 0, changeSeq: 0))
        }
        zones.sort { ($0.name == Names.defaultZone ? 0 : 1, $0.name) < ($1.name == Names.defaultZone ? 0 : 1, $1.name) }
        return zones
    }

    static func zone(_ row: PostgresRow) throws -> ZoneInfo {
        var reader = RowReader(row)
        return try zone(&reader)
    }

    /// The zone in the next five cells of `reader` (zone_id, zone_name, deleted, change_xid, change_seq).
    static func zone(_ reader: inout RowReader) throws -> ZoneInfo {
        let id = try reader.next(ZoneID.self), name = try reader.next(String.self), deleted = try reader.next(Bool.self)
        return ZoneInfo(zoneID: id, name: name, deleted: deleted, changeXID: try reader.next(Int64.self), changeSeq: try reader.next(Int64.self))
    }

    /// Looks up zones by name; missing ones are absent from the result. The default zone always exists.
    public func lookupZones(_ db: DatabaseRef, names: [String]) async throws -> [String: ZoneInfo] {
        let zones = try await listZones(db)
        var found: [String: ZoneInfo] = [:]
        for zone in zones where names.contains(zone.name) { found[zone.name] = zone }
        return found
    }

    /// Creates a custom zone (saving an existing zone succeeds and returns it, as CloudKit does).
    public func createZone(_ db: DatabaseRef, name: String) async throws -> ZoneInfo {
        try await database.transaction { connection in
            let rows = try await connection.rows("""
                INSERT INTO zones (container_id, zone_id, environment, database_scope, owner, zone_name, change_xid, change_seq)
                VALUES (\(db.containerID), nextval('zone_id_seq'), \(db.environment.code), \(db.scope.code), \(db.owner), \(name),
                        pg_current_xact_id()::text::bigint, stratus_change_seq())
                ON CONFLICT (container_id, environment, database_scope, owner, zone_name) DO UPDATE
                    SET zone_id = CASE WHEN zones.deleted THEN EXCLUDED.zone_id ELSE zones.zone_id END,
                        change_xid = CASE WHEN zones.deleted THEN EXCLUDED.change_xid ELSE zones.change_xid END,
                        change_seq = CASE WHEN zones.deleted THEN EXCLUDED.change_seq ELSE zones.change_seq END,
                        deleted = false
                RETURNING zone_id, zone_name, deleted, change_xid, change_seq
                """, logger: logger)
            return try Self.zone(rows[0])
        }
    }

    /// Deletes a custom zone and all its records. Returns `nil` when it did not exist.
    public func deleteZone(_ db: DatabaseRef, name: String) async throws -> ZoneInfo? {
        try await database.transaction { connection in
            let rows = try await connection.rows("""
                UPDATE zones SET deleted = true, change_xid = pg_current_xact_id()::text::bigint, change_seq = stratus_change_seq()
                WHERE container_id = \(db.containerID) AND environment = \(db.environment.code) AND database_scope = \(db.scope.code)
                  AND owner = \(db.owner) AND zone_name = \(name) AND NOT deleted
                RETURNING zone_id, zone_name, deleted, change_xid, change_seq
                """, logger: logger)
            guard let row = rows.first else { return nil }
            let zone = try Self.zone(row)
            try await Database.allowLongStatements(on: connection, logger: logger)
            let removed = try await connection.rows("""
                WITH d AS (DELETE FROM records WHERE container_id = \(db.containerID) AND zone_id = \(zone.zoneID) RETURNING deleted, size)
                SELECT count(*) FILTER (WHERE NOT deleted), coalesce(sum(size) FILTER (WHERE NOT deleted), 0)::bigint FROM d
                """, logger: logger).first!.decode((Int64, Int64).self)
            try await UsageMeter.releaseUsage(db, records: removed.0, bytes: removed.1, on: connection, logger: logger)
            try await connection.statement("DELETE FROM index_entries WHERE container_id = \(db.containerID) AND zone_id = \(zone.zoneID)", logger: logger)
            try await connection.statement("DELETE FROM record_references WHERE container_id = \(db.containerID) AND zone_id = \(zone.zoneID)", logger: logger)
            try await connection.statement("DELETE FROM asset_references WHERE container_id = \(db.containerID) AND zone_id = \(zone.zoneID)", logger: logger)
            return zone
        }
    }

    // MARK: Lookup

    /// Live records by name; names that do not exist are absent. `ZONE_NOT_FOUND` for a missing custom zone.
    public func lookup(_ db: DatabaseRef, zone: String, names: [String]) async throws -> [String: Record] {
        // One statement, shared with the lookups running at the same time: the zone row (to tell
        // a missing zone from missing records) joined to the records.
        let request = LookupRequest(db: db, zone: zone, names: names)
        let records: [Record]?
        if database.held == nil {
            records = try await lookups.answer(request)
        } else {
            // Inside a transaction or on a held connection: read on it, as everything else there does.
            records = try await database.withConnection { connection in
                try await Lookups.run([request], on: connection, logger: logger)[0]
            }
        }
        guard let records else {
            if zone == Names.defaultZone { return [:] }
            throw Self.zoneNotFound(zone)
        }
        var found: [String: Record] = [:]
        for record in records { found[record.recordName] = record }
        return found
    }
}

/// Zone ids by database and name, remembered from writes so that a create in a zone written before
/// skips reading the zone (`RecordStore.modifyOne`): `Prepared.InsertRecords` checks that the id
/// is still a live zone of that name, in that database, so a stale or reused id writes nothing and
/// the request goes the long way. Lookups routed to a Citus worker remember and use them too
/// (`Lookups.runRouted`: a stale id finds no row, and the zone is read). At most `capacity`,
/// forgotten all at once when full (a zone not remembered is read, as before).
final class KnownZones: Sendable {
    static let capacity = 50_000

    private struct Key: Hashable {
        var db: DatabaseRef
        var zone: String
    }
    private let ids = Mutex<[Key: ZoneID]>([:])

    func zoneID(_ db: DatabaseRef, _ zone: String) -> ZoneID? {
        ids.withLock { $0[Key(db: db, zone: zone)] }
    }

    func remember(_ db: DatabaseRef, _ zone: String, zoneID: ZoneID) {
        ids.withLock { ids in
            if ids.count >= Self.capacity { ids.removeAll(keepingCapacity: true) }
            ids[Key(db: db, zone: zone)] = zoneID
        }
    }

    func forget(_ db: DatabaseRef, _ zone: String) {
        ids.withLock { _ = $0.removeValue(forKey: Key(db: db, zone: zone)) }
    }
}
