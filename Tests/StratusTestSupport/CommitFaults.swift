import Foundation
import PostgresNIO
import StratusCore
import StratusStore
import Testing

/// Faults at commit, put into a test's database: a `DEFERRABLE INITIALLY DEFERRED` constraint
/// trigger on each table given runs when a transaction that changed the table commits, and, while
/// armed, raises an error there (`fail`) or sleeps (`stall`) so that the test can terminate the
/// backend in the middle of the commit. What the service wrote is then rolled back after the
/// statement's rows (and `CommandComplete`) went out: the answer must not be a success.
struct CommitFaults: Sendable {
    enum Mode: String, Sendable {
        case fail, stall
    }

    let database: Database

    /// Every table of the service's schema: what the fault matrix arms.
    static func allTables(_ database: Database) async throws -> [String] {
        try await database.withConnection { connection in
            try await connection.statement("""
                SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                  AND c.relname NOT IN ('stratus_test_faults', 'stratus_migrations')
                ORDER BY 1
                """, logger: TestCluster.logger).map { try $0.decode(String.self) }
        }
    }

    /// Adds the fault table, its function and a trigger on each of `tables` (disarmed).
    static func install(on database: Database, tables: [String]) async throws -> CommitFaults {
        try await database.withConnection { connection in
            for statement in [
                "CREATE TABLE IF NOT EXISTS stratus_test_faults (mode text NOT NULL)",
                """
                CREATE OR REPLACE FUNCTION stratus_test_fault() RETURNS trigger LANGUAGE plpgsql AS $$
                DECLARE armed text;
                BEGIN
                    SELECT mode INTO armed FROM stratus_test_faults LIMIT 1;
                    IF armed = 'fail' THEN
                        RAISE EXCEPTION 'stratus test: the commit fails (%)', TG_TABLE_NAME USING ERRCODE = 'P0001';
                    ELSIF armed = 'stall' THEN
                        PERFORM pg_sleep(60);
                    END IF;
                    RETURN NULL;
                END $$
                """,
            ] {
                try await connection.statement(PostgresQuery(unsafeSQL: statement), logger: TestCluster.logger)
            }
            for table in tables {
                try await connection.statement(PostgresQuery(unsafeSQL: """
                    CREATE CONSTRAINT TRIGGER stratus_test_fault AFTER INSERT OR UPDATE OR DELETE ON \(table)
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION stratus_test_fault()
                    """), logger: TestCluster.logger)
            }
        }
        return CommitFaults(database: database)
    }

    func arm(_ mode: Mode) async throws {
        try await database.withConnection { connection in
            try await connection.statement("DELETE FROM stratus_test_faults", logger: TestCluster.logger)
            try await connection.statement("INSERT INTO stratus_test_faults VALUES (\(mode.rawValue))", logger: TestCluster.logger)
        }
    }

    func disarm() async throws {
        try await database.withConnection { connection in
            try await connection.statement("DELETE FROM stratus_test_faults", logger: TestCluster.logger)
        }
        // A backend still asleep in a stalled commit would commit once it wakes.
        _ = try await terminateStalled(wait: false)
    }

    /// Terminates the backends asleep in a stalled commit (waiting up to 20 s for one when
    /// `wait`); how many.
    @discardableResult
    func terminateStalled(wait: Bool = true) async throws -> Int {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let count = try await database.withConnection { connection in
                try await connection.statement("""
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event = 'PgSleep'
                    """, logger: TestCluster.logger).count
            }
            if count > 0 || !wait || ContinuousClock.now > deadline { return count }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// A fingerprint of what the tables hold (for "nothing changed"), leaving out `except`.
    func fingerprint(_ tables: [String], except: Set<String> = []) async throws -> [String: String] {
        try await database.withConnection { connection in
            var prints: [String: String] = [:]
            for table in tables where !except.contains(table) {
                prints[table] = try await connection.statement(PostgresQuery(unsafeSQL: """
                    SELECT count(*)::text || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM \(table) t
                    """), logger: TestCluster.logger).first?.decode(String.self)
            }
            return prints
        }
    }
}
