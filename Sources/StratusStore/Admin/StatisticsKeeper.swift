import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Keeps PostgreSQL's planner statistics on the service's tables current, so that no request is
/// planned on statistics that no longer describe its tables.
///
/// Every pooled session plans each prepared statement once (`plan_cache_mode =
/// force_generic_plan`), and PostgreSQL makes those plans again only when a table's statistics
/// change. A new deployment (or a restored backup) has statistics from when its tables were
/// empty, and autovacuum analyzes on its own schedule: until it does, lookups are planned as
/// scans of a few pages and run many times slower than after an `ANALYZE`.
///
/// The keeper reads PostgreSQL's own counters (`pg_stat_user_tables`, one small query) every
/// `interval` and analyzes a table as soon as the rows changed since its last analyze reach the
/// rows it had then (the table doubled, or was rewritten) and at least `minimumChanges`: from
/// empty to 1e6 rows that is about twenty `ANALYZE`s, each invalidating the cached plans so the
/// next execution plans again on true numbers. Autovacuum still does the finer, later analyzes.
/// With several server processes on one database, a transaction-scoped advisory lock lets one
/// of them analyze a table at a time.
///
/// On a Citus coordinator the tables hold no rows; their shards on the workers do, each with its
/// own counters and statistics, and each worker plans the statements it is sent on them. There the
/// keeper reads the shards' counters on every worker (`run_command_on_workers`) and analyzes, on
/// its worker, each shard that doubled: the same rule, per shard.
public struct StatisticsKeeper: Sendable {
    /// The tables whose plans depend on their size and distribution.
    public static let tables = ["records", "index_entries", "zones", "record_references"]
    let database: Database
    let logger: Logger
    /// How often the counters are read.
    public var interval: Duration
    /// Fewer changed rows than this never trigger an analyze (a small table plans well anyway).
    public var minimumChanges: Int64

    public init(database: Database, logger: Logger, interval: Duration = .seconds(1), minimumChanges: Int64 = 500) {
        self.database = database
        self.logger = logger
        self.interval = interval
        self.minimumChanges = minimumChanges
    }

    /// Checks every `interval` until the task is cancelled. Failures are logged and retried at the
    /// next check; a refusal to analyze (the service's role does not own the tables) stops it.
    public func run() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
                let analyzed = try await analyzeStaleTables()
                Self.checks.add(1, ordering: .relaxed)
                if !analyzed.isEmpty { Self.analyses.add(analyzed.count, ordering: .relaxed) }
            } catch is CancellationError {
                return
            } catch where Database.sqlState(error) == "42501" {
                logger.warning("cannot ANALYZE the service's tables (the database role does not own them); planner statistics are left to autovacuum")
                return
            } catch {
                logger.debug("statistics check failed; retrying", metadata: ["stratus.error": "\(String(reflecting: error))"])
            }
        }
    }

    /// The tables that changed by their own size since they were last analyzed, by the counters.
    public func staleTables() async throws -> [String] {
        let rows = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT s.relname::text, s.n_mod_since_analyze, c.reltuples::float8
                FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
                WHERE s.schemaname = current_schema() AND s.relname = ANY(\(Self.tables))
                """, logger: logger)
        }
        return try rows.compactMap { row in
            let (table, changed, tuples) = try row.decode((String, Int64, Double).self)
            return changed >= minimumChanges && Double(changed) >= tuples ? table : nil
        }
    }

    /// Analyzes the stale tables now; returns those this process analyzed (another holding a
    /// table's lock skips it).
    @discardableResult
    public func analyzeStaleTables() async throws -> [String] {
        if database.configuration.citusCoordinator { return try await analyzeStaleShards() }
        var analyzed: [String] = []
        for table in try await staleTables() {
            let done = try await database.transaction { connection in
                try await Database.allowLongStatements(on: connection, logger: logger)
                let lock = try await connection.rows("SELECT pg_try_advisory_xact_lock(\(Self.lockKey), hashtext(\(table)))", logger: logger)
                guard try lock.first?.decode(Bool.self) == true else { return false }
                // The name is one of `tables`, never input.
                try await connection.statement(PostgresQuery(unsafeSQL: "ANALYZE \(table)"), logger: logger)
                return true
            }
            if done {
                analyzed.append(table)
                logger.debug("analyzed a table that had grown", metadata: ["stratus.table": "\(table)"])
            }
        }
        return analyzed
    }

    /// The shards of `tables` on a worker that changed by their own size since their last analyze.
    var staleShardsCondition: String {
        """
        s.schemaname = current_schema() AND s.relname ~ '^(\(Self.tables.joined(separator: "|")))_[0-9]+$'
        AND s.n_mod_since_analyze >= \(minimumChanges) AND s.n_mod_since_analyze >= c.reltuples
        """
    }

    /// The Citus form of `analyzeStaleTables`: one statement per worker finds the stale shards
    /// (nothing more runs while there are none); a second analyzes them there, each under the
    /// worker's advisory lock for that shard, so that several server processes analyze it once.
    /// Returns the shards found stale, as `worker:port/shard`.
    func analyzeStaleShards() async throws -> [String] {
        if let routes = database.citusRoutes { return try await analyzeStaleShards(routes) }
        let find = """
            SELECT coalesce(string_agg(s.relname, ' '), '') FROM pg_stat_user_tables s
            JOIN pg_class c ON c.oid = s.relid WHERE \(staleShardsCondition)
            """
        let analyze = """
            DO $stratus$ DECLARE shard record; BEGIN
            FOR shard IN SELECT s.relid::regclass AS rel, s.relname FROM pg_stat_user_tables s
              JOIN pg_class c ON c.oid = s.relid WHERE \(staleShardsCondition)
            LOOP
              IF pg_try_advisory_xact_lock(\(Self.lockKey), hashtext(shard.relname)) THEN
                EXECUTE format('ANALYZE %s', shard.rel);
              END IF;
            END LOOP; END $stratus$
            """
        let rows = try await database.withConnection { connection in
            try await connection.rows("SELECT nodename, nodeport, success, result FROM run_command_on_workers(\(find))", logger: logger)
        }
        var stale: [String] = []
        for row in rows {
            let (node, port, success, result) = try row.decode((String, Int32, Bool, String).self)
            guard success else {
                logger.debug("statistics check failed on a worker", metadata: ["stratus.worker": "\(node):\(port)", "stratus.error": "\(result)"])
                continue
            }
            stale += result.split(separator: " ").map { "\(node):\(port)/\($0)" }
        }
        guard !stale.isEmpty else { return [] }
        let done = try await database.transaction { connection in
            try await Database.allowLongStatements(on: connection, logger: logger)
            return try await connection.rows("SELECT success, result FROM run_command_on_workers(\(analyze))", logger: logger)
        }
        for row in done {
            let (success, result) = try row.decode((Bool, String).self)
            if !success { logger.debug("analyze failed on a worker", metadata: ["stratus.error": "\(result)"]) }
        }
        logger.debug("analyzed shards that had grown", metadata: ["stratus.shards": "\(stale.joined(separator: ", "))"])
        return stale
    }

    /// `analyzeStaleShards` on each worker's own pool (`CitusRoutes`): one catalog query per
    /// worker, answered there, instead of a `run_command_on_workers` through the coordinator. It
    /// also counts the analyzes of the worker's shards, whoever made them, so that sessions there
    /// drop plans made on older statistics (`CitusWorker.sawAnalyses`).
    func analyzeStaleShards(_ routes: CitusRoutes) async throws -> [String] {
        var stale: [String] = []
        for worker in try await routes.workers(coordinatorDatabase: database) {
            let where_ = "\(worker.node.host):\(worker.node.port)"
            do {
                let (found, analyses) = try await worker.pool.transaction { connection in
                    // Citus hides the shards from the catalog of a worker's ordinary sessions.
                    try await connection.statement("SET LOCAL citus.override_table_visibility = off", logger: logger)
                    // From pg_class and the counters' functions, not pg_stat_user_tables: a worker
                    // holds thousands of relations, and the view cost 2.3 ms to plan against 0.2.
                    let rows = try await connection.rows(PostgresQuery(unsafeSQL: """
                        SELECT coalesce(string_agg(c.relname, ' ') FILTER (WHERE pg_stat_get_mod_since_analyze(c.oid) >= \(minimumChanges)
                                   AND pg_stat_get_mod_since_analyze(c.oid) >= c.reltuples), ''),
                               coalesce(sum(pg_stat_get_analyze_count(c.oid) + pg_stat_get_autoanalyze_count(c.oid)), 0)::int8
                        FROM pg_class c
                        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
                          AND c.relname ~ '^(\(Self.tables.joined(separator: "|")))_[0-9]+$'
                        """), logger: logger)
                    let (names, count) = try rows[0].decode((String, Int64).self)
                    return (names.split(separator: " ").map(String.init), count)
                }
                worker.sawAnalyses(analyses)
                guard !found.isEmpty else { continue }
                try await worker.pool.transaction { connection in
                    try await Database.allowLongStatements(on: connection, logger: logger)
                    for shard in found {
                        let lock = try await connection.rows("SELECT pg_try_advisory_xact_lock(\(Self.lockKey), hashtext(\(shard)))", logger: logger)
                        guard try lock.first?.decode(Bool.self) == true else { continue }
                        // The name is a shard of one of `tables`, as the catalog spells it.
                        try await connection.statement(PostgresQuery(unsafeSQL: "ANALYZE \"\(shard)\""), logger: logger)
                    }
                }
                stale += found.map { "\(where_)/\($0)" }
            } catch is CancellationError {
                throw CancellationError()
            } catch {
                logger.debug("statistics check failed on a worker", metadata: ["stratus.worker": "\(where_)", "stratus.error": "\(String(reflecting: error))"])
            }
        }
        if !stale.isEmpty { logger.debug("analyzed shards that had grown", metadata: ["stratus.shards": "\(stale.joined(separator: ", "))"]) }
        return stale
    }

    /// Checks made and tables (or, on Citus, shards) analyzed by this process's keepers (`/metrics`).
    public static let checks = Atomic<Int>(0)
    public static let analyses = Atomic<Int>(0)

    /// The first key of the advisory locks (`hashtext('stratus.analyze')`, fixed).
    static let lockKey: Int32 = 0x5354_4154
}
