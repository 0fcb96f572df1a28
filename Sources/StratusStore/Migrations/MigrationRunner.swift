import Crypto
import Foundation
import Logging
import PostgresNIO
import StratusCore

/// One numbered SQL file from `Migrations/`.
public struct Migration: Sendable, Equatable {
    public var version: Int
    public var name: String
    public var sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }

    /// SHA-256 of the file, hex.
    public var checksum: String {
        SHA256.hash(data: Data(sql.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Loads `NNNN_name.sql` files from `directory`, in version order.
    public static func load(from directory: URL) throws -> [Migration] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }
        return try parse(names.map { ($0, try String(contentsOf: directory.appendingPathComponent($0), encoding: .utf8)) })
    }

    /// The migrations compiled into this build (`Migrations/*.sql`, by the EmbedMigrations build
    /// plugin), in version order: the binary migrates from any folder, and as an installed copy.
    public static func embedded() throws -> [Migration] {
        try parse(EmbeddedMigrations.files)
    }

    /// The migrations `stratus serve` and `stratus migrate` apply: those in `STRATUS_MIGRATIONS_DIR`
    /// when it is set (to try migrations without rebuilding), else the embedded ones.
    public static func shipped(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> [Migration] {
        if let folder = environment["STRATUS_MIGRATIONS_DIR"], !folder.isEmpty {
            return try load(from: URL(fileURLWithPath: folder))
        }
        return try embedded()
    }

    /// Migrations from `(file name, text)` pairs, in version order.
    static func parse(_ files: [(name: String, text: String)]) throws -> [Migration] {
        var migrations: [Migration] = []
        for (file, sql) in files {
            let stem = String(file.dropLast(4))
            guard file.hasSuffix(".sql"), let underscore = stem.firstIndex(of: "_"), let version = Int(stem[..<underscore]) else {
                throw StratusError(.internalError, "migration file \(file) is not named NNNN_name.sql")
            }
            migrations.append(Migration(version: version, name: String(stem[stem.index(after: underscore)...]), sql: sql))
        }
        migrations.sort { $0.version < $1.version }
        for (a, b) in zip(migrations, migrations.dropFirst()) where a.version == b.version {
            throw StratusError(.internalError, "two migrations share version \(a.version)")
        }
        return migrations
    }
}

/// Applies migrations in order, each in its own transaction, under an advisory lock, recording
/// each with its checksum. Refuses to run when an applied migration's file has changed.
public struct MigrationRunner: Sendable {
    /// Advisory lock key held while migrating (any value unique to Stratus).
    static let lockKey: Int64 = 0x5354_5241_5455_53

    public var migrations: [Migration]
    public var logger: Logger

    public init(migrations: [Migration], logger: Logger) {
        self.migrations = migrations
        self.logger = logger
    }

    /// Brings the database up to date; returns the versions it applied.
    @discardableResult
    public func run(on database: Database) async throws -> [Int] {
        try await database.withConnection { connection in
            // Another server may hold the migration lock for as long as its migrations take, and a
            // migration may wait for the tables its statements alter and rewrite large ones: no
            // lock or statement timeout here.
            try await connection.statement("SET lock_timeout = 0", logger: logger)
            try await connection.statement("SET statement_timeout = 0", logger: logger)
            try await connection.statement("SELECT pg_advisory_lock(\(Self.lockKey))", logger: logger)
            do {
                let applied = try await apply(on: connection)
                try await connection.statement("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                try await connection.statement("RESET lock_timeout", logger: logger)
                try await connection.statement("RESET statement_timeout", logger: logger)
                return applied
            } catch {
                await connection.cleanUp("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                await connection.cleanUp("RESET lock_timeout", logger: logger)
                await connection.cleanUp("RESET statement_timeout", logger: logger)
                throw error
            }
        }
    }

    private func apply(on connection: PostgresConnection) async throws -> [Int] {
        try await connection.statement("""
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version integer PRIMARY KEY,
                name text NOT NULL,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """, logger: logger)
        var recorded: [Int: String] = [:]
        for row in try await connection.rows("SELECT version, checksum FROM schema_migrations", logger: logger) {
            let (version, checksum) = try row.decode((Int, String).self)
            recorded[version] = checksum
        }
        var applied: [Int] = []
        for migration in migrations {
            if let checksum = recorded[migration.version] {
                guard checksum == migration.checksum else {
                    throw StratusError(.internalError, "migration \(migration.version)_\(migration.name).sql was edited after it was applied (checksum differs); restore it and add a new migration instead")
                }
                continue
            }
            logger.info("applying migration", metadata: ["stratus.migration": "\(migration.version)_\(migration.name)"])
            do {
                try await connection.statement("BEGIN", logger: logger)
                for statement in SQLScript.split(migration.sql) {
                    try await connection.statement(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.statement("""
                    INSERT INTO schema_migrations (version, name, checksum) VALUES (\(migration.version), \(migration.name), \(migration.checksum))
                    """, logger: logger)
                try await connection.statement("COMMIT", logger: logger)
            } catch {
                await connection.cleanUp("ROLLBACK", logger: logger)
                throw StratusError(.internalError, "migration \(migration.version)_\(migration.name).sql failed: \(String(reflecting: error))", underlying: error)
            }
            applied.append(migration.version)
        }
        for version in recorded.keys where !migrations.contains(where: { $0.version == version }) {
            logger.warning("the database has a migration this build does not know; is this binary older than the database?",
                           metadata: ["stratus.migration": "\(version)"])
        }
        return applied
    }
}
