import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import _ConnectionPoolModule
import StratusCore

/// The service's handle on PostgreSQL: the connection pools, transactions with retries, and the
/// mapping of database failures to ``StratusError``.
public final class Database: Sendable {
    /// The connection pools: one per event loop of the process's event-loop group, each with its
    /// share of `maximumConnections` on that loop, or one pool when there are too few connections
    /// to give each loop two.
    let pools: PerEventLoop<RecoveringPool>
    public let configuration: DatabaseConfiguration
    let logger: Logger

    /// A request's statements go to a pool on its own event loop. Requests run on their HTTP
    /// connection's loop (`StratusHTTPChannel`), so PostgreSQL's replies are read and handed back
    /// on the request's thread instead of waking the other one: more lookups, modifies and
    /// change-feed pages per second than one pool. A statement written to a closed connection
    /// would wait for ever, so a lease that finds its connection closed takes another
    /// (`requireOpen`).
    public init(configuration: DatabaseConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        citusRoutes = configuration.citusCoordinator && configuration.routesToCitusWorkers
            ? CitusRoutes(coordinator: configuration, logger: logger) : nil
        let loops = PerEventLoop<PostgresClient>.groupLoops.count
        guard loops > 1, configuration.maximumConnections >= 2 * loops else {
            pools = PerEventLoop(single: RecoveringPool(configuration: configuration, logger: logger) { logger in
                PostgresClient(configuration: configuration.clientConfiguration(), backgroundLogger: logger)
            })
            return
        }
        pools = PerEventLoop { loop, index, count in
            var share = configuration
            share.maximumConnections = configuration.maximumConnections / count + (index < configuration.maximumConnections % count ? 1 : 0)
            return RecoveringPool(configuration: share, logger: logger) { [share] logger in
                PostgresClient(configuration: share.clientConfiguration(), eventLoopGroup: loop, backgroundLogger: logger)
            }
        }
    }

    /// On a Citus coordinator, the workers' pools and which holds each container (nil elsewhere).
    let citusRoutes: CitusRoutes?

    /// The pool on the caller's event loop (TRY_AGAIN_LATER while PostgreSQL is unreachable).
    private var pool: RecoveringPool { pools.current }
    /// How the pool's connections are used (`/metrics`).
    public let usage = PoolUsage()

    /// Whether requests are being answered TRY_AGAIN_LATER because PostgreSQL was unreachable.
    public var isRecovering: Bool { pools.values.contains { $0.isRecovering } }

    /// Whether the database has the citus extension (Stratus on a Citus coordinator): asked over
    /// one connection of a pool of its own, closed afterwards.
    public static func hasCitus(_ configuration: DatabaseConfiguration, logger: Logger) async throws -> Bool {
        try await withSingleConnection(configuration, logger: logger) { connection in
            try await connection.query("SELECT 1 FROM pg_extension WHERE extname = 'citus'", logger: logger).collect().first != nil
        }
    }

    /// Runs `body` on one connection of its own, not pooled: the first contact of `stratus serve`
    /// and `stratus migrate`, so that a server that refuses them (a certificate that does not
    /// check out, no TLS where the URL asks for it) is reported at once, and plainly, instead of
    /// as an outage after the pool's retries.
    static func withSingleConnection<T: Sendable>(_ configuration: DatabaseConfiguration, logger: Logger,
                                                  _ body: (PostgresConnection) async throws -> T) async throws -> T {
        let quiet = Logger(label: "stratus.probe", factory: { _ in SwiftLogNoOpLogHandler() })
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try configuration.connectionSettings(), id: 0, logger: quiet)
        } catch {
            throw explainConnectFailure(error, configuration)
        }
        do {
            let result = try await body(connection)
            try? await connection.close()
            return result
        } catch {
            try? await connection.close()
            throw error
        }
    }

    /// A first connection's failure said so that the operator can act on it: TLS problems name
    /// the `sslmode` rule at stake; anything else is passed on.
    static func explainConnectFailure(_ error: any Error, _ configuration: DatabaseConfiguration) -> any Error {
        guard let failure = error as? PSQLError else { return error }
        let server = "PostgreSQL at \(configuration.host):\(configuration.port)"
        if failure.code == .sslUnsupported {
            return DatabaseSetupError("\(server) does not offer TLS, which the database URL's sslmode requires: turn ssl on in its postgresql.conf, or use sslmode=disable on a trusted network")
        }
        if let underlying = failure.underlying, String(reflecting: underlying).contains("SSL") {
            let rule = switch configuration.tlsVerification {
            case .fullVerification: "sslmode=verify-full wants a certificate signed by an authority in sslrootcert (or the system's when it is unset) that names '\(configuration.host)'"
            case .certificateAuthority: "sslmode=verify-ca wants a certificate signed by an authority in sslrootcert (or the system's when it is unset)"
            case .none: "sslmode=require checks no certificate, so the handshake itself failed"
            }
            return DatabaseSetupError("\(server): the TLS handshake failed (\(String(reflecting: underlying).prefix(300))); \(rule)")
        }
        return error
    }

    /// What a Citus coordinator lacks of `Deploy/citus/distribute.sql`'s functions that the
    /// service calls (a cluster distributed before they were added), or nil.
    public static func missingCitusFunctions(_ configuration: DatabaseConfiguration, logger: Logger) async throws -> [String] {
        try await withSingleConnection(configuration, logger: logger) { connection in
            try await connection.query("""
                SELECT f FROM unnest(ARRAY['stratus_settle_prepared(bigint)']) f
                WHERE NOT EXISTS (SELECT 1 FROM pg_dist_object WHERE objid = to_regprocedure(f))
                """, logger: logger).collect().map { try $0.decode(String.self) }
        }
    }

    /// Keeps the pools' connections open until the task is cancelled (`PostgresClient.run`), and
    /// replaces a pool after PostgreSQL was unreachable (`RecoveringPool`).
    public func run() async {
        await withDiscardingTaskGroup { group in
            for pool in pools.values { group.addTask { await pool.run() } }
            // The Citus workers' pools, as routes first name them; the stream ends when the task is cancelled.
            if let citusRoutes {
                for await worker in citusRoutes.madePools { group.addTask { await worker.run() } }
            }
        }
    }

    /// The connection the current task already holds, inside `transaction` or `withConnection`.
    ///
    /// Nested calls use it instead of leasing a second connection: a task that waits for a
    /// second lease while holding one deadlocks the pool as soon as every connection is held by
    /// such a task (sixteen concurrent writes to a container whose schema was not cached yet did,
    /// and their open transactions then blocked every other writer of those rows).
    struct Held: Sendable {
        /// The `Database` the connection was leased from: a task working with two (a test's
        /// own pool beside the app's) must not run one's statements on the other's connection.
        var owner: ObjectIdentifier
        var connection: PostgresConnection
        var inTransaction: Bool
    }

    @TaskLocal private static var held: Held?

    /// The connection the current task holds from this database, if any.
    var held: Held? {
        guard let held = Database.held, held.owner == ObjectIdentifier(self) else { return nil }
        return held
    }

    /// Runs `body` in one transaction (READ COMMITTED). Serialization failures and deadlocks
    /// are retried up to three times, then answered `TRY_AGAIN_LATER`. Errors thrown by `body`
    /// roll the transaction back and are rethrown unchanged. Called inside a transaction, `body`
    /// joins it (and the outer transaction retries).
    ///
    /// When the connection fails during `COMMIT`, `settle` (if given) is asked with the body's
    /// value whether it committed (see ``settle(xid:check:)``); without it, or when it cannot
    /// tell, the request is answered TRY_AGAIN_LATER saying the outcome is unknown.
    public func transaction<T: Sendable>(settle: (@Sendable (T) async throws -> Bool)? = nil,
                                         _ body: (PostgresConnection) async throws -> T) async throws -> T {
        if let held {
            if held.inTransaction { return try await body(held.connection) }
            do {
                return try await Database.$held.withValue(Held(owner: held.owner, connection: held.connection, inTransaction: true)) {
                    try await inTransaction(on: held.connection, settle: settle, body)
                }
            } catch {
                throw Database.map(error)
            }
        }
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await usage.count { started in
                    try await pool.withConnection { connection in
                        usage.acquired(since: started)
                        defer { usage.released() }
                        return try await Database.$held.withValue(Held(owner: ObjectIdentifier(self), connection: connection, inTransaction: true)) {
                            try await inTransaction(on: connection, settle: settle, body)
                        }
                    }
                }
            } catch let error as PSQLError where Database.isRetryable(error) && attempt < 4 {
                try await Task.sleep(for: .milliseconds(5 * attempt))
                continue
            } catch let lost as ConnectionLost where attempt < 4 {
                // Refused before a statement was written (the pool handed out a connection
                // PostgreSQL had just closed, or it closed part-way): PostgreSQL ended the session
                // and rolled its transaction back, and no COMMIT went out. Safe to run again, once
                // the pool has seen the close (or it hands out the same connection).
                try? await lost.closed.get()
                continue
            } catch {
                throw Database.map(error)
            }
        }
    }

    /// A statement refused because its connection had closed (see
    /// `PostgresConnection.statement(_:logger:)`): answered TRY_AGAIN_LATER, and a transaction
    /// meeting it is run again on another connection.
    struct ConnectionLost: Error {
        /// The connection's `closeFuture`: the pool learns of the close when it completes.
        let closed: EventLoopFuture<Void>
    }

    /// `body` between BEGIN and COMMIT on `connection`, a connection the task holds outside a
    /// transaction: a failure rolls back and is rethrown as it is; a COMMIT cut off is settled by
    /// `settle`, as in `transaction`.
    func inTransaction<T: Sendable>(on connection: PostgresConnection, settle: (@Sendable (T) async throws -> Bool)?,
                                    _ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            try await connection.statement("BEGIN", logger: logger)
        } catch is CommitUnknown {
            // Nothing was written yet: safe to run again on another connection.
            throw ConnectionLost(closed: connection.closeFuture)
        }
        var result: T?
        do {
            let value = try await body(connection)
            result = value
            // PostgreSQL answers COMMIT of a transaction that a failed statement aborted with
            // ROLLBACK, not an error. Every failure should have been thrown already (`statement`
            // reads every statement's rows), but one that ends a row-returning statement sent with
            // PostgresNIO's own `query` reaches only rows its caller may never read: the tag is the
            // last word on whether anything was saved.
            // (The future-returning `query` collects the result and its tag; its errors stay
            // `PSQLError`s, so a serialization failure at commit is retried as before.)
            try connection.requireOpen()
            let committed: EventLoopFuture<PostgresQueryResult> = connection.query("COMMIT", logger: logger)
            let tag: String
            do {
                tag = try await committed.get().metadata.command
            } catch let error as PSQLError where error.code == .server && !Self.endsSession(error) {
                // Raised at commit (a deferred constraint, a serialization failure): rolled back.
                if Self.isRetryable(error) { throw error }
                throw CommitRefused(failure: CommitWatch.ServerFailure(error))
            } catch {
                // Cut off while committing: PostgreSQL may have committed, or not.
                throw CommitUnknown(failure: (error as? PSQLError).flatMap { $0.code == .server ? CommitWatch.ServerFailure($0) : nil }, underlying: error)
            }
            guard tag == "COMMIT" else {
                throw StratusError(.tryAgainLater, "the database rolled the transaction back (\(tag) at commit): nothing of it was saved; retry",
                                   retryAfter: 1)
            }
            return value
        } catch let unknown as CommitUnknown where result != nil && settle != nil {
            guard try await settle!(result!) else {
                throw StratusError(.tryAgainLater, "the connection to the database failed during the commit, and the change was not saved; retry",
                                   retryAfter: 1, underlying: unknown)
            }
            return result!
        } catch {
            await connection.cleanUp("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Runs `body` with a pooled connection, outside a transaction (or on the connection, and in
    /// the transaction, the task already holds).
    public func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        do {
            if let held { return try await body(held.connection) }
            // A connection found closed when leased is put back and another leased (the pool
            // replaces it); one that closes part-way is not, as its statements commit one by one.
            var attempt = 0
            while true {
                attempt += 1
                let leased: T? = try await usage.count { started in try await pool.withConnection { connection in
                    usage.acquired(since: started)
                    defer { usage.released() }
                    if connection.isClosed, attempt < 4 {
                        // Its channel is down but the pool has not heard yet (it does when the
                        // close future completes, an event-loop turn later): wait for that.
                        try? await connection.closeFuture.get()
                        return nil
                    }
                    return try await Database.$held.withValue(Held(owner: ObjectIdentifier(self), connection: connection, inTransaction: false)) {
                        try await body(connection)
                    }
                } }
                if let leased { return leased }
            }
        } catch {
            throw Database.map(error)
        }
    }

    /// Lifts the statement limit for the rest of the caller's transaction: for work whose size
    /// follows the data (an index build batch, deleting a zone's records), not a request's.
    public static func allowLongStatements(on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.statement("SET LOCAL statement_timeout = 0", logger: logger)
    }

    static func isRetryable(_ error: PSQLError) -> Bool {
        isRetryable(state: error.serverInfo?[.sqlState])
    }

    /// A serialization failure or a deadlock: nothing was saved, and running again may succeed.
    static func isRetryable(state: String?) -> Bool {
        state == "40001" || state == "40P01"
    }

    /// PostgreSQL refused an index entry larger than a B-tree page allows ("index row size …
    /// exceeds …", "index row requires … bytes"). SQLSTATE 54000; a Citus coordinator passes a
    /// worker's on as XX000 when the rows went there by COPY.
    static func isTooLargeToIndex(_ error: PSQLError) -> Bool {
        guard let state = error.serverInfo?[.sqlState], state == "54000" || state == "XX000" else { return false }
        return error.serverInfo?[.message]?.hasPrefix("index row ") == true
    }

    /// The SQLSTATE of a server error, if `error` is one.
    public static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    /// Maps database failures to the errors clients see. Anything unrecognised stays as is
    /// and becomes `INTERNAL_ERROR` at the HTTP boundary.
    static func map(_ error: any Error) -> any Error {
        if error is StratusError { return error }
        if let refused = error as? CommitRefused {
            if isRetryable(state: refused.failure.sqlState) {
                return StratusError(.tryAgainLater, "too many concurrent changes to the same data; nothing was saved; retry", retryAfter: 1, underlying: error)
            }
            return StratusError(.tryAgainLater, "the database refused to commit the change (SQLSTATE \(refused.failure.sqlState)): nothing of it was saved; retry",
                                retryAfter: 1, underlying: error)
        }
        if error is CommitUnknown || error is CommitOutcomeUnknown {
            return StratusError(.tryAgainLater, "the connection to the database failed while the change was being committed, and whether it was saved "
                                + "could not be learned: read it back before retrying",
                                retryAfter: 1, underlying: error)
        }
        if error is ConnectionLost {
            return StratusError(.tryAgainLater, "the connection to the database was lost; retry shortly", retryAfter: 1, underlying: error)
        }
        if let error = error as? ConnectionPoolError {
            // The pool could not open connections for a while (its circuit breaker tripped), or
            // is shutting down: an outage, like a refused connection.
            return StratusError(.tryAgainLater, "the database is not reachable right now; retry shortly", retryAfter: 1, underlying: error)
        }
        if let error = error as? PSQLError {
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .poolClosed, .uncleanShutdown:
                return StratusError(.tryAgainLater, "the database is not reachable right now; retry shortly", retryAfter: 1, underlying: error)
            case .server:
                let state = error.serverInfo?[.sqlState] ?? ""
                if isRetryable(state: state) {
                    return StratusError(.tryAgainLater, "too many concurrent changes to the same data; retry", retryAfter: 1, underlying: error)
                }
                if state.hasPrefix("08") || state == "57P01" || state == "57P03" || state == "53300" {
                    return StratusError(.tryAgainLater, "the database is not available right now; retry shortly", retryAfter: 1, underlying: error)
                }
                if state == "55P03" {
                    return StratusError(.tryAgainLater, "the data is locked by another request that is taking long; retry shortly", retryAfter: 1, underlying: error)
                }
                // A text value with U+0000, which PostgreSQL's text and jsonb cannot hold: only a
                // client puts one there (a name, an email address, a key in a JSON body).
                if state == "22021" || state == "22P05" {
                    return StratusError(.badRequest, "a text value in the request contains a NUL character (U+0000), which Stratus does not store; remove it",
                                        underlying: error)
                }
                // A value of an indexed field too large for a B-tree entry (about 2,700 bytes
                // after compression): only a client puts one there.
                if isTooLargeToIndex(error) {
                    return StratusError(.badRequest, "a value of an indexed (QUERYABLE, SORTABLE or SEARCHABLE) field is too large to index, "
                                        + "about 2,700 bytes after compression at most; shorten it, or keep long text in a field that is not indexed",
                                        underlying: error)
                }
                if state == "57014" {
                    return StratusError(.tryAgainLater, "the request took too long and was cancelled; retry with a smaller request", retryAfter: 1, underlying: error)
                }
                // Citus, while it moves a container's shards to another worker: a statement planned
                // in parts finds the part it already ran gone with the old placement. The
                // transaction is rolled back whole, so the request can be sent again.
                // Citus: a change feed waited 5 seconds for a transaction prepared on its worker
                // (`stratus_settle_prepared`); Citus's recovery resolves one a crash left behind.
                if state == "SP001" {
                    return StratusError(.tryAgainLater, "a write to this app's database server is still being committed; retry shortly", retryAfter: 1, underlying: error)
                }
                if state == "CIINF", error.serverInfo?[.message]?.contains("intermediate result") == true {
                    return StratusError(.tryAgainLater, "this app's data is being moved between database servers; retry shortly", retryAfter: 1, underlying: error)
                }
            default:
                break
            }
        }
        return error
    }
}

extension PostgresConnection {
    /// Runs a query and collects its rows (``statement(_:logger:file:line:)``, read as a query).
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> [PostgresRow] {
        try await statement(query, logger: logger)
    }

    /// Runs a statement and collects its rows: `query`, refused with ``Database/ConnectionLost``
    /// when the connection has closed, and with its rows always read.
    ///
    /// PostgresNIO (1.33) writes a statement to its channel with no promise for the write: once a
    /// closed connection's handlers are gone, the write fails unseen and the statement's answer
    /// never comes, so its caller waits for ever (`ReliabilityTests`, a statement on a connection
    /// whose backend was terminated). Every statement the service sends goes through here, through
    /// the prepared `rows` helper or through the transaction's COMMIT, which check the same. What
    /// is left is a close that lands after this check and has the channel's handlers removed before
    /// the write reaches the event loop: the few instructions between the check and the write's
    /// hand-off (longer only if the thread is preempted right there), where before it was every
    /// pause of the task in between.
    ///
    /// The rows are read even by callers that want none: PostgresNIO answers a row-returning
    /// statement when the rows' description arrives, before it runs, and an error that ends it
    /// while it runs (a statement or lock timeout) reaches only its rows. Unread, the error was
    /// lost and the transaction went on aborted (`ReliabilityTests`, a transaction PostgreSQL
    /// rolled back). `@concurrent` for the reason `rows(_:logger:)` is.
    ///
    /// Outside `BEGIN … COMMIT` a statement is not done when its rows are: it is answered only once
    /// its commit is confirmed (``confirmCommitted(_:logger:)``).
    @discardableResult
    @concurrent public func statement(_ query: PostgresQuery, logger: Logger, file: String = #fileID, line: Int = #line) async throws -> [PostgresRow] {
        try requireOpen()
        let watch = await CommitWatch.of(self, logger: logger)
        var out: [PostgresRow] = []
        for try await row in try await self.query(query, logger: logger, file: file, line: line) { out.append(row) }
        try await confirmCommitted(watch, logger: logger)
        return out
    }

    /// Throws ``Database/ConnectionLost`` when the connection has closed (see `statement`).
    func requireOpen() throws {
        guard !isClosed else { throw Database.ConnectionLost(closed: closeFuture) }
    }

    /// A statement after a failure (ROLLBACK, unlocking): skipped when the connection has closed
    /// (PostgreSQL has ended the session, and with it the transaction and its locks), its own
    /// failure ignored.
    func cleanUp(_ query: PostgresQuery, logger: Logger) async {
        guard !isClosed else { return }
        _ = try? await self.query(query, logger: logger)
    }
}

extension Database {
    /// The primary's current WAL position, in bytes from 0/0 (`pg_current_wal_lsn()`): every
    /// commit acknowledged so far lies at or before it.
    public func currentWALPosition() async throws -> Int64 {
        try await withConnection { connection in
            try await connection.rows("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", logger: logger).first?.decode(Int64.self) ?? .max
        }
    }

    /// How far a streaming replica has replayed the primary's WAL, in bytes from 0/0 (0 when it is not a replica).
    public func replayedWALPosition() async throws -> Int64 {
        try await withConnection { connection in
            try await connection.rows("SELECT coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint, 0)", logger: logger).first?.decode(Int64.self) ?? 0
        }
    }
}
