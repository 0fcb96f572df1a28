import Foundation
import PostgresNIO
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct MigrationTests {
    /// The binary carries exactly the files of Migrations/ (the build plugin embeds them).
    @Test func embeddedMigrationsAreTheFilesOfTheMigrationsFolder() throws {
        let files = try Migration.load(from: TestCluster.repositoryRoot.appendingPathComponent("Migrations"))
        let embedded = try Migration.embedded()
        #expect(embedded.map(\.version) == files.map(\.version))
        #expect(embedded.map(\.checksum) == files.map(\.checksum))
        #expect(embedded.count >= 5)
        // STRATUS_MIGRATIONS_DIR still overrides them.
        let empty = NSTemporaryDirectory() + "stratus-no-migrations-\(getpid())"
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: empty) }
        #expect(try Migration.shipped(environment: ["STRATUS_MIGRATIONS_DIR": empty]).isEmpty)
        #expect(try Migration.shipped(environment: [:]).map(\.checksum) == files.map(\.checksum))
    }

    @Test func appliesOnceAndRefusesEditedMigrations() async throws {
        let configuration = try await TestCluster.shared.newDatabase()
        let migrations = try Migration.load(from: TestCluster.repositoryRoot.appendingPathComponent("Migrations"))
        #expect(migrations.first?.version == 1)
        try await withDatabase(configuration) { db in
            // The template already applied everything: running again applies nothing.
            let again = try await MigrationRunner(migrations: migrations, logger: TestCluster.logger).run(on: db)
            #expect(again.isEmpty)
            // Concurrent runners serialise on the advisory lock and both succeed.
            async let first = MigrationRunner(migrations: migrations, logger: TestCluster.logger).run(on: db)
            async let second = MigrationRunner(migrations: migrations, logger: TestCluster.logger).run(on: db)
            let (a, b) = try await (first, second)
            #expect(a.isEmpty && b.isEmpty)
            // An edited landed migration is refused, naming the file.
            var edited = migrations
            edited[0].sql += "\n-- edited\n"
            do {
                try await MigrationRunner(migrations: edited, logger: TestCluster.logger).run(on: db)
                Issue.record("an edited migration was accepted")
            } catch let error as StratusError {
                #expect(error.reason.contains("0001") || error.reason.contains("1_initial"))
                #expect(error.reason.contains("edited"))
            }
            // A new migration is applied in order and recorded; a failing one leaves nothing behind.
            var extended = migrations
            extended.append(Migration(version: 9998, name: "probe", sql: "CREATE TABLE probe_a (x int);\nINSERT INTO probe_a VALUES (1);"))
            #expect(try await MigrationRunner(migrations: extended, logger: TestCluster.logger).run(on: db) == [9998])
            extended.append(Migration(version: 9999, name: "broken", sql: "CREATE TABLE probe_b (x int);\nSELECT no_such_function();"))
            await #expect(throws: StratusError.self) { try await MigrationRunner(migrations: extended, logger: TestCluster.logger).run(on: db) }
            let leftovers = try await db.withConnection { connection in
                var names: [String] = []
                for try await row in try await connection.query("SELECT tablename FROM pg_tables WHERE tablename LIKE 'probe_%' ORDER BY 1", logger: TestCluster.logger) {
                    names.append(try row.decode(String.self))
                }
                return names
            }
            #expect(leftovers == ["probe_a"], "the failed migration rolled back whole")
        }
    }

    /// A migration's statements take as long as the data needs (an index on a big table): the
    /// runner lifts the pool's statement limit for them, and puts it back for everything after.
    @Test func migrationsOutlastTheStatementLimit() async throws {
        var configuration = try await TestCluster.shared.newDatabase()
        configuration.statementTimeout = .seconds(1)
        let migrations = try Migration.load(from: TestCluster.repositoryRoot.appendingPathComponent("Migrations"))
        try await withDatabase(configuration, maximumConnections: 1) { db in
            var extended = migrations
            extended.append(Migration(version: 9997, name: "slow", sql: "SELECT pg_sleep(1.6);\nCREATE TABLE slow_probe (x int);"))
            let started = ContinuousClock.now
            let applied = try await MigrationRunner(migrations: extended, logger: TestCluster.logger).run(on: db)
            #expect(applied == [9997])
            #expect(ContinuousClock.now - started >= .milliseconds(1500))
            // The same (only) connection has its limit back.
            do {
                _ = try await db.withConnection { try await $0.statement("SELECT pg_sleep(1.6)", logger: TestCluster.logger) }
                Issue.record("a statement after the migrations ran past the 1 s limit")
            } catch let error as StratusError {
                #expect(error.code == .tryAgainLater, "\(error)")
            }
        }
    }
}
