import ArgumentParser
import Foundation
import Logging
import StratusCommandLine
import StratusCore
import StratusServer
import StratusStore

/// `stratus container export` and `stratus container import`: a container's backup, and its
/// restore into another server (or the same one, after the container was deleted).
///
/// They speak to PostgreSQL directly, as `stratus migrate` does (the database's URL, or the
/// embedded cluster under --data-dir, which they borrow from a running `stratus serve` and leave
/// running): a backup must not need the service up, and a container's data does not fit in one
/// management-API answer.
extension ContainerCommand {
    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a container's data to a file: a consistent snapshot, taken while the service runs.",
            discussion: Help.text("""
                Everything of the container (or of one environment, with --environment; the users, API
                tokens, roles and audit log are always included): schemas, zones, records with their
                tombstones, shares, subscriptions, quotas, usage meters, and asset bytes. Read in one
                snapshot, so a write committed during the export is wholly in or wholly out.

                Sync tokens the server issued stay valid after 'stratus container import' into another
                server: the file carries this server's sync-token key (it seals only sync tokens, which
                grant nothing by themselves). It also holds every user's data and password hashes: keep
                it as you keep the database's backups. Sessions and web courier tokens are not carried:
                after an import into another server, users sign in again.

                Example: stratus container export --container iCloud.com.example.Notes --output notes.stratus
                """))
        @Option(help: "Container identifier.") var container: String
        @Option(help: "Only this environment's data: development or production (default: both).") var environment: String?
        @Option(help: "The file to write (must not exist; created readable by you alone).") var output: String
        @OptionGroup var database: DatabaseOptions
        @OptionGroup var assets: AssetOptions
        @Option(name: .customLong("log-level"), help: "Log level (env STRATUS_LOG_LEVEL, default warning).") var logLevel: String?

        func run() async throws {
            try await runAdmin {
                let environment = try environment.map { text in
                    guard let value = ContainerEnvironment(rawValue: text) else {
                        throw ValidationError("--environment must be 'development' or 'production'; got '\(text)'")
                    }
                    return value
                }
                guard !FileManager.default.fileExists(atPath: output) else {
                    throw CLIError("\(output) already exists; choose another file name (an export never overwrites one)")
                }
                guard FileManager.default.createFile(atPath: output, contents: nil, attributes: [.posixPermissions: 0o600]),
                      let handle = FileHandle(forWritingAtPath: output) else {
                    throw CLIError("cannot create \(output); check the folder and its permissions")
                }
                var finished = false
                defer {
                    try? handle.close()
                    if !finished { try? FileManager.default.removeItem(atPath: output) }
                }
                let storage = try assets.storage(dataDir: database.resolvedDataDir)
                let summary = try await withDirectDatabase(database, logLevel: logLevel) { db, logger in
                    let secret = try await AdminStore(database: db, logger: logger).serverSecret(named: "tokens")
                    let archive = ContainerArchive(database: db, assets: AssetStore(storage: storage, database: db, logger: logger), logger: logger)
                    let bar = ProgressBar(verb: "exporting")
                    defer { bar.end() }
                    return try await archive.export(container: container, environment: environment, syncKey: TokenSealer.syncKey(from: secret),
                                                    write: { try handle.write(contentsOf: Data($0.utf8)) }, progress: bar.update)
                }
                try handle.synchronize()
                finished = true
                let size = (try? FileManager.default.attributesOfItem(atPath: output)[.size] as? Int64) ?? 0
                print("wrote \(output): container \(summary.containerName)\(environment.map { " (\($0.rawValue))" } ?? ""), "
                      + "\(summary.records) records, \(summary.assets) assets (\(summary.assetBytes) bytes), \(summary.rows) rows in all, \(size) bytes")
            }
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Restore a container from a 'stratus container export' file.",
            discussion: Help.text("""
                Creates the container under its name (refused when one of that name exists here) with
                everything the file holds, in one transaction: all of it or, on any error, nothing.
                Clients keep syncing from the sync tokens they hold: the exporting server's tokens are
                accepted for this container, and writes made here after the import follow every
                imported change. Users sign in again (sessions are not carried). Running servers see
                the container at once.

                Both servers must be at the same Stratus version (migration); the file says which.

                Example: stratus container import --input notes.stratus --database-url postgres://…/stratus
                """))
        @Option(help: "The export file to read.") var input: String
        @OptionGroup var database: DatabaseOptions
        @OptionGroup var assets: AssetOptions
        @Option(name: .customLong("log-level"), help: "Log level (env STRATUS_LOG_LEVEL, default warning).") var logLevel: String?

        func run() async throws {
            try await runAdmin {
                let lines = try ContainerArchive.Lines(path: input)
                let storage = try assets.storage(dataDir: database.resolvedDataDir)
                let restored = try await withDirectDatabase(database, logLevel: logLevel) { db, logger in
                    let archive = ContainerArchive(database: db, assets: AssetStore(storage: storage, database: db, logger: logger), logger: logger)
                    let bar = ProgressBar(verb: "importing")
                    defer { bar.end() }
                    return try await archive.restore(from: lines, actor: AuditActor(credential: "stratus container import", client: operatorName()),
                                                     progress: bar.update)
                }
                print("imported container \(restored.containerName): \(restored.records) records, \(restored.assets) assets, \(restored.rows) rows in all"
                      + (restored.xidShift > 0 ? "; the exporting server's sync tokens are accepted (change positions moved down by \(restored.xidShift))" : ""))
            }
        }
    }
}

/// Runs `body` with a database pool of the command's own (migrating nothing), turning the
/// service's errors into one line for the terminal.
func withDirectDatabase<T: Sendable>(_ options: DatabaseOptions, logLevel: String?,
                                     _ body: @escaping @Sendable (Database, Logger) async throws -> T) async throws -> T {
    let logger = makeLogger(logLevel ?? setting(nil, "STRATUS_LOG_LEVEL", default: "warning"))
    let (configuration, cluster) = try options.open(logger: logger)
    defer { cluster?.stopIfStarted() }
    var settings = configuration
    settings.maximumConnections = 2
    let db = Database(configuration: settings, logger: logger)
    do {
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await db.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(db, logger)
        }
    } catch let error as StratusError {
        throw CLIError(error.reason)
    } catch let error as CLIError {
        throw error
    } catch {
        throw CLIError(String(reflecting: error))
    }
}

/// A progress bar on standard error: redrawn in place on a terminal, a line per tenth otherwise.
final class ProgressBar: @unchecked Sendable {
    private let verb: String
    private let terminal = isatty(STDERR_FILENO) != 0
    private var lastTenth = -1
    private var lastDraw = Date.distantPast
    private var drawn = false

    init(verb: String) { self.verb = verb }

    func update(_ done: Int, _ total: Int) {
        let fraction = total > 0 ? min(1, Double(done) / Double(total)) : 1
        if terminal {
            guard Date().timeIntervalSince(lastDraw) > 0.1 || done == total else { return }
            lastDraw = Date()
            let width = 30
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
            FileHandle.standardError.write(Data("\r\(verb) [\(bar)] \(Int(fraction * 100))%  \(done) of \(total) rows".utf8))
            drawn = true
        } else {
            let tenth = Int(fraction * 10)
            guard tenth > lastTenth else { return }
            lastTenth = tenth
            FileHandle.standardError.write(Data("\(verb): \(tenth * 10)% (\(done) of \(total) rows)\n".utf8))
        }
    }

    func end() {
        if terminal, drawn { FileHandle.standardError.write(Data("\n".utf8)) }
    }
}
