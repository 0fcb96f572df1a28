import ArgumentParser
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import StratusCommandLine
import StratusCore
import StratusServer
import StratusStore

/// Options naming the database: an external server by URL, or the embedded cluster's folder.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db (env STRATUS_DATABASE_URL). Unset: an embedded cluster under --data-dir.")
    var databaseURL: String?

    @Option(name: .customLong("data-dir"), help: "Folder for the embedded PostgreSQL cluster and local state (env STRATUS_DATA_DIR, default ./.stratus).")
    var dataDir: String?

    var resolvedDataDir: String { setting(dataDir, "STRATUS_DATA_DIR", default: ".stratus")! }

    /// The database configuration and, for the embedded cluster, its handle (to stop it later).
    func open(logger: Logger) throws -> (DatabaseConfiguration, EmbeddedPostgres?) {
        if let url = setting(databaseURL, "STRATUS_DATABASE_URL") {
            return (try DatabaseConfiguration(url: url), nil)
        }
        let cluster = try EmbeddedPostgres.start(directory: resolvedDataDir, logger: logger)
        return (cluster.configuration, cluster)
    }
}

/// Where asset bytes are kept: `stratus serve`'s options, which the commands that read or write
/// assets directly (`container export|import`) take too.
struct AssetOptions: ParsableArguments {
    @Option(name: .customLong("asset-store"), help: "Where asset bytes are kept: 'files' (under --asset-dir) or 'postgres' (large objects in the database, backed up with it) (env STRATUS_ASSET_STORE, default files). Several server processes with 'files' must share the folder.") var assetStore: String?
    @Option(name: .customLong("asset-dir"), help: "Folder of the files asset store, and of uploads being received (env STRATUS_ASSET_DIR, default <data-dir>/assets).") var assetDir: String?

    func storage(dataDir: String) throws -> AssetStorage {
        let folder = setting(assetDir, "STRATUS_ASSET_DIR", default: dataDir + "/assets")!
        switch setting(assetStore, "STRATUS_ASSET_STORE", default: "files")! {
        case "files": return .files(directory: folder)
        case "postgres": return .postgres(stagingDirectory: folder + "/staging")
        case let other: throw ValidationError("--asset-store (STRATUS_ASSET_STORE) must be 'files' or 'postgres'; got '\(other)'")
        }
    }
}

func makeLogger(_ level: String?) -> Logger {
    var logger = Logger(label: "stratus")
    logger.logLevel = setting(level, "STRATUS_LOG_LEVEL", default: "info").flatMap(Logger.Level.init(rawValue:)) ?? .info
    return logger
}

/// The migrations compiled into this build, or those in `STRATUS_MIGRATIONS_DIR` when it is set.
func loadMigrations() throws -> [Migration] {
    try Migration.shipped()
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the service (migrates the database first).",
        discussion: Help.text("""
            With no database configured, Stratus creates and runs its own PostgreSQL cluster under
            --data-dir (as the 'postgres' account when started as root) and stops it on SIGINT/SIGTERM.
            When STRATUS_ADMIN_TOKEN is unset, a random admin token is written to <data-dir>/admin-token.
            """))

    @Option(help: "Address to listen on (env STRATUS_HOST, default 127.0.0.1).") var host: String?
    @Option(help: "Port to listen on (env STRATUS_PORT, default 8080).") var port: Int?
    @Option(name: .customLong("admin-token"), help: "Token the management API requires (env STRATUS_ADMIN_TOKEN).") var adminToken: String?
    @Option(name: .customLong("max-body-bytes"), help: "Largest request body accepted (env STRATUS_MAX_BODY_BYTES, default 8388608).") var maxBodyBytes: Int?
    @Option(name: .customLong("public-url"), help: "URL clients reach this server at, for sign-in redirects (env STRATUS_PUBLIC_URL).") var publicURL: String?
    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error (env STRATUS_LOG_LEVEL, default info). At debug, each request is logged once answered.") var logLevel: String?
    @Option(name: .customLong("log-format"), help: "text, or json: one JSON object per line, with a request's id as stratus.request_id (env STRATUS_LOG_FORMAT, default text).") var logFormat: String?
    @Option(name: .customLong("bcrypt-cost"), help: "bcrypt work factor for user passwords, 4–16 (env STRATUS_BCRYPT_COST, default 12; each step doubles the CPU a sign-up or sign-in costs).") var bcryptCost: Int?
    @Option(name: .customLong("idle-timeout"), help: "Seconds a connection may sit idle, or send nothing of a request it started, before it is closed (env STRATUS_IDLE_TIMEOUT, default 60).") var idleTimeout: Int?
    @Option(name: .customLong("statement-timeout"), help: "Seconds one database statement may run before it is cancelled and the request answered TRY_AGAIN_LATER; 0 never cancels (env STRATUS_STATEMENT_TIMEOUT, default 30). Migrations, index builds and zone deletions are not limited.") var statementTimeout: Int?
    @Option(name: .customLong("lock-timeout"), help: "Seconds a request may wait for data another request has locked before it is answered TRY_AGAIN_LATER; 0 waits for ever (env STRATUS_LOCK_TIMEOUT, default 10).") var lockTimeout: Int?
    @Option(name: .customLong("statistics-interval"), help: "Seconds between checks of the planner statistics of the service's tables: a table that grew by its own size since PostgreSQL last analyzed it is analyzed at once; 0 leaves it to autovacuum (env STRATUS_STATISTICS_INTERVAL, default 1).") var statisticsInterval: Int?
    @Option(name: .customLong("session-lifetime"), help: "Seconds a sign-in (web auth token) lasts at most, however often it is used (env STRATUS_SESSION_LIFETIME, default 2592000: 30 days).") var sessionLifetime: Int?
    @Option(name: .customLong("session-idle-timeout"), help: "Seconds a sign-in may go unused before it ends (env STRATUS_SESSION_IDLE_TIMEOUT, default 604800: 7 days).") var sessionIdleTimeout: Int?
    @Option(name: .customLong("max-connections-per-address"), help: "Most connections one client address may hold open at once; more are answered THROTTLED and closed (env STRATUS_MAX_CONNECTIONS_PER_ADDRESS, default 1024).") var maxConnectionsPerAddress: Int?
    @Option(name: .customLong("shutdown-timeout"), help: "Seconds SIGTERM/SIGINT waits for requests in flight before it cancels them; what still runs 5 s later, or at a second SIGTERM/SIGINT, is logged and the process exits with status 1 (env STRATUS_SHUTDOWN_TIMEOUT, default 30).") var shutdownTimeout: Int?
    @OptionGroup var assets: AssetOptions
    @Option(name: .customLong("max-asset-bytes"), help: "Largest asset one upload may carry (env STRATUS_MAX_ASSET_BYTES, default 52428800: 50 MiB).") var maxAssetBytes: Int64?
    @Option(name: .customLong("replica-urls"), help: "PostgreSQL streaming replicas, comma-separated postgres:// URLs: queries and custom zones' change feeds go to one that has replayed every acknowledged write, else to the primary (env STRATUS_REPLICA_URLS).") var replicaURLs: String?
    @Option(name: .customLong("tls-cert"), help: "PEM file of the server's TLS certificate, then its intermediates: the port speaks HTTPS (TLS 1.2 and 1.3) instead of HTTP (env STRATUS_TLS_CERT). Needs --tls-key. SIGHUP reads both files again; connections already open keep theirs.") var tlsCert: String?
    @Option(name: .customLong("tls-key"), help: "PEM file of the TLS certificate's private key, unencrypted (env STRATUS_TLS_KEY).") var tlsKey: String?
    @Option(name: .customLong("redirect-http-port"), help: "Also listen on this port in plain HTTP and redirect every request there to https (308, same path) (env STRATUS_REDIRECT_HTTP_PORT). Needs --tls-cert, or a proxy in front that serves https.") var redirectHTTPPort: Int?
    @Option(name: .customLong("hsts-max-age"), help: "Seconds browsers are told to use only https for this host (Strict-Transport-Security), sent when the public URL is https; 0 sends none (env STRATUS_HSTS_MAX_AGE, default 31536000: a year).") var hstsMaxAge: Int?
    @Option(name: .customLong("trusted-proxies"), help: "Addresses and CIDR blocks of load balancers in front (comma-separated, e.g. 10.0.0.0/8,::1): from these, the client's address is read from X-Forwarded-For, and their connections are not held to --max-connections-per-address (env STRATUS_TRUSTED_PROXIES, default none: the connection's address).") var trustedProxies: String?
    @Option(name: .customLong("metrics-token"), help: "A token that reads GET /metrics (Prometheus text) and nothing else, for a scrape job; the admin token reads it too (env STRATUS_METRICS_TOKEN).") var metricsToken: String?
    @Option(name: .customLong("apns-host"), help: "HOST:PORT every APNs push goes to, instead of Apple's hosts (api.sandbox.push.apple.com:443 for devices registered in development, api.push.apple.com:443 in production) (env STRATUS_APNS_HOST).") var apnsHost: String?
    @Option(name: .customLong("push-ca-file"), help: "PEM file of certificate authorities trusted for push hosts beside the system's (env STRATUS_PUSH_CA_FILE).") var pushCAFile: String?
    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let format = setting(logFormat, "STRATUS_LOG_FORMAT", default: "text")!
        guard format == "text" || format == "json" else { throw ValidationError("--log-format (STRATUS_LOG_FORMAT) must be text or json; got '\(format)'") }
        let logger = makeLogger(logLevel)
        let assetStorage = try assets.storage(dataDir: database.resolvedDataDir)
        let assetLimitText = setting(maxAssetBytes.map(String.init), "STRATUS_MAX_ASSET_BYTES", default: String(ServerConfiguration.defaultMaximumAssetBytes))!
        guard let assetLimit = Int64(assetLimitText), assetLimit >= 1 else {
            throw ValidationError("--max-asset-bytes (STRATUS_MAX_ASSET_BYTES) must be a whole number of bytes, at least 1; got '\(assetLimitText)'")
        }
        let host = setting(self.host, "STRATUS_HOST", default: "127.0.0.1")!
        let portText = setting(self.port.map(String.init), "STRATUS_PORT", default: "8080")!
        guard let port = Int(portText), (0...65535).contains(port) else { throw ValidationError("--port must be 0–65535") }
        let bodyText = setting(maxBodyBytes.map(String.init), "STRATUS_MAX_BODY_BYTES", default: String(ServerConfiguration.defaultMaximumBodyBytes))!
        guard let maxBody = Int(bodyText), maxBody >= 1024 else { throw ValidationError("--max-body-bytes must be at least 1024") }
        let costText = setting(bcryptCost.map(String.init), "STRATUS_BCRYPT_COST", default: "12")!
        guard let cost = UInt8(costText), (4...16).contains(cost) else { throw ValidationError("--bcrypt-cost must be 4–16") }
        let idle = try seconds(idleTimeout, "STRATUS_IDLE_TIMEOUT", default: 60, option: "--idle-timeout", allowZero: false)
        let lockWait = try seconds(lockTimeout, "STRATUS_LOCK_TIMEOUT", default: 10, option: "--lock-timeout", allowZero: true)
        let statementLimit = try seconds(statementTimeout, "STRATUS_STATEMENT_TIMEOUT", default: 30, option: "--statement-timeout", allowZero: true)
        let lifetime = try seconds(sessionLifetime, "STRATUS_SESSION_LIFETIME", default: 30 * 86_400, option: "--session-lifetime", allowZero: false, maximum: 366 * 86_400)
        let idleLimit = try seconds(sessionIdleTimeout, "STRATUS_SESSION_IDLE_TIMEOUT", default: 7 * 86_400, option: "--session-idle-timeout", allowZero: false, maximum: 366 * 86_400)
        let statistics = try seconds(statisticsInterval, "STRATUS_STATISTICS_INTERVAL", default: 1, option: "--statistics-interval", allowZero: true)
        let shutdown = try seconds(shutdownTimeout, "STRATUS_SHUTDOWN_TIMEOUT", default: 30, option: "--shutdown-timeout", allowZero: false)
        let migrations = try loadMigrations()

        var admin = setting(adminToken, "STRATUS_ADMIN_TOKEN")
        if admin == nil {
            admin = try localAdminToken(dataDir: database.resolvedDataDir, create: true)
            logger.notice("STRATUS_ADMIN_TOKEN is unset; the CLI on this machine reads the generated one", metadata: ["stratus.admin_token_file": "\(database.resolvedDataDir)/admin-token"])
        }
        if !Subprocess.closesInheritedDescriptors {
            logger.warning("this C library lacks posix_spawn_file_actions_addclosefrom_np (glibc 2.34+): programs the server starts (pg_ctl) inherit its open connections, and a connection it closes while one runs stays open for the client until that program exits")
        }
        var (configuration, cluster) = try database.open(logger: logger)
        defer { cluster?.stop() }
        configuration.lockTimeout = lockWait == 0 ? nil : .seconds(lockWait)
        configuration.statementTimeout = statementLimit == 0 ? nil : .seconds(statementLimit)
        if try await Database.hasCitus(configuration, logger: logger) {
            configuration.useCitus()
            let missing = try await Database.missingCitusFunctions(configuration, logger: logger)
            guard missing.isEmpty else {
                throw CLIError("the Citus coordinator lacks \(missing.joined(separator: ", ")), which change feeds call on the workers: run its CREATE FUNCTION and create_distributed_function statements from Deploy/citus/distribute.sql on the coordinator, then start again")
            }
            switch setting(nil, "STRATUS_CITUS_ROUTING", default: "workers")! {
            case "workers": configuration.routesToCitusWorkers = true
            case "coordinator": configuration.routesToCitusWorkers = false
            case let other: throw ValidationError("STRATUS_CITUS_ROUTING must be 'workers' (reads go straight to the worker holding their container, writes commit there in one phase) or 'coordinator' (everything through the coordinator); got '\(other)'")
            }
            logger.notice("the database is a Citus coordinator: statements get a plan of their own each time (Citus cannot run generic plans of joins), change feeds read the coordinator's snapshot, and \(configuration.routesToCitusWorkers ? "lookups and queries go straight to the worker holding their container, where records writes commit in one phase" : "lookups, queries and writes go through the coordinator (STRATUS_CITUS_ROUTING=coordinator)")")
        }
        let db = Database(configuration: configuration, logger: logger)
        let tls = try tlsCertificate(logger: logger)
        let publicURL = setting(publicURL, "STRATUS_PUBLIC_URL", default: "\(tls == nil ? "http" : "https")://\(host):\(port)")!
        var serverConfiguration = ServerConfiguration(adminToken: admin, maximumBodyBytes: maxBody, bcryptCost: cost, publicURL: publicURL)
        serverConfiguration.tls = tls
        serverConfiguration.metricsToken = setting(metricsToken, "STRATUS_METRICS_TOKEN")
        do {
            serverConfiguration.trustedProxies = try TrustedProxies(parsing: setting(trustedProxies, "STRATUS_TRUSTED_PROXIES") ?? "")
        } catch let error as TrustedProxiesError {
            throw ValidationError("--trusted-proxies (STRATUS_TRUSTED_PROXIES): \(error.description)")
        }
        let hsts = try seconds(hstsMaxAge, "STRATUS_HSTS_MAX_AGE", default: ServerConfiguration.defaultStrictTransportSecurity,
                               option: "--hsts-max-age", allowZero: true, maximum: 2 * 31_536_000)
        if publicURL.lowercased().hasPrefix("https://"), hsts > 0 { serverConfiguration.strictTransportSecurity = hsts }
        let redirectText = setting(redirectHTTPPort.map(String.init), "STRATUS_REDIRECT_HTTP_PORT")
        let redirectPort = try redirectText.map { text in
            guard let value = Int(text), (0...65535).contains(value), value != port else {
                throw ValidationError("--redirect-http-port (STRATUS_REDIRECT_HTTP_PORT) must be a port 0–65535 other than --port; got '\(text)'")
            }
            return value
        }
        serverConfiguration.statisticsInterval = statistics == 0 ? nil : .seconds(statistics)
        serverConfiguration.sessionLifetime = .seconds(lifetime)
        serverConfiguration.sessionIdleTimeout = .seconds(idleLimit)
        let perAddressText = setting(maxConnectionsPerAddress.map(String.init), "STRATUS_MAX_CONNECTIONS_PER_ADDRESS",
                                     default: String(ServerConfiguration.defaultMaximumConnectionsPerAddress))!
        guard let perAddress = Int(perAddressText), perAddress >= 1, perAddress <= 1_000_000 else {
            throw ValidationError("--max-connections-per-address (STRATUS_MAX_CONNECTIONS_PER_ADDRESS) must be a whole number from 1 to 1000000; got '\(perAddressText)'")
        }
        serverConfiguration.maximumConnectionsPerAddress = perAddress
        serverConfiguration.assetStorage = assetStorage
        let replicas = (setting(replicaURLs, "STRATUS_REPLICA_URLS") ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        for url in replicas {
            do { _ = try DatabaseConfiguration(url: url) } catch { throw ValidationError("--replica-urls (STRATUS_REPLICA_URLS): \(error.reason)") }
        }
        serverConfiguration.replicaURLs = replicas
        if let host = setting(apnsHost, "STRATUS_APNS_HOST") {
            let parts = host.split(separator: ":")
            guard parts.count == 2, !parts[0].isEmpty, let port = Int(parts[1]), (1...65535).contains(port) else {
                throw ValidationError("--apns-host (STRATUS_APNS_HOST) must be HOST:PORT, such as api.push.apple.com:443; got '\(host)'")
            }
            serverConfiguration.push.apnsHost = host
        }
        if let caFile = setting(pushCAFile, "STRATUS_PUSH_CA_FILE") {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw ValidationError("--push-ca-file (STRATUS_PUSH_CA_FILE): cannot read '\(caFile)'")
            }
            serverConfiguration.push.caFile = caFile
        }
        serverConfiguration.maximumAssetBytes = assetLimit
        let parts = RunningParts()
        let embedded = cluster
        let watchdog = ShutdownWatchdog(deadline: .seconds(shutdown), parts: parts, logger: logger) { embedded?.stop() }
        defer { watchdog.disarm() }
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { await parts.run("database pools") { await db.run() } }
            defer { group.cancelAll() }
            try await MigrationRunner(migrations: migrations, logger: logger).run(on: db)
            let stratus = try await StratusApp.make(database: db, configuration: serverConfiguration, running: parts, logger: logger)
            let app = Application(router: stratus.router(), server: stratus.httpServer(idleTimeout: .seconds(idle)),
                                  configuration: .init(address: .hostname(host, port: port), serverName: "Stratus"),
                                  services: [stratus.background], logger: logger)
            var services: [any Service] = [NamedService("HTTP server", app, in: parts)]
            if let redirectPort {
                let redirect = Application(responder: HTTPSRedirectResponder(publicURL: publicURL, httpsPort: port), server: .http1(configuration: .init(idleTimeout: .seconds(10))),
                                           configuration: .init(address: .hostname(host, port: redirectPort), serverName: "Stratus"), logger: logger)
                services.append(NamedService("HTTP-to-HTTPS redirect", redirect, in: parts))
                logger.notice("plain HTTP on port \(redirectPort) redirects to https")
            }
            let reloads = tls.map { Self.reloadOnHangup($0, logger: logger) }
            defer { reloads?.cancel() }
            // On SIGTERM/SIGINT the server stops accepting, finishes the requests in flight and
            // closes idle connections; past the deadline, what is left is cancelled. The watchdog,
            // last so that it hears of the shutdown first, ends the process if that still hangs.
            watchdog.count(requestsIn: stratus.metrics)
            services.append(watchdog)
            var group = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
            group.maximumGracefulShutdownDuration = .seconds(shutdown)
            try await ServiceGroup(configuration: group).run()
        }
    }
}

extension Serve {
    /// The certificate of `--tls-cert` and `--tls-key`, or nil when neither is set.
    func tlsCertificate(logger: Logger) throws -> TLSCertificate? {
        let certificate = setting(tlsCert, "STRATUS_TLS_CERT"), key = setting(tlsKey, "STRATUS_TLS_KEY")
        switch (certificate, key) {
        case (nil, nil):
            return nil
        case let (certificate?, key?):
            do {
                let tls = try TLSCertificate(certificatePath: certificate, keyPath: key)
                logger.notice("serving HTTPS", metadata: ["stratus.certificate": "\(tls.summary)"])
                return tls
            } catch let error as TLSSetupError {
                throw ValidationError(error.description)
            }
        default:
            throw ValidationError("--tls-cert (STRATUS_TLS_CERT) and --tls-key (STRATUS_TLS_KEY) go together: give both, or neither for plain HTTP")
        }
    }

    /// Reads the certificate and key again on each SIGHUP (a renewed certificate); a pair that
    /// does not load is logged and the one in use stays.
    static func reloadOnHangup(_ tls: TLSCertificate, logger: Logger) -> any DispatchSourceSignal {
        signal(SIGHUP, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGHUP, queue: .global())
        source.setEventHandler {
            do {
                try tls.reload()
                logger.notice("reloaded the TLS certificate on SIGHUP", metadata: ["stratus.certificate": "\(tls.summary)"])
            } catch {
                logger.error("SIGHUP: the TLS certificate was not reloaded; the one in use stays", metadata: ["stratus.error": "\(error)"])
            }
        }
        source.resume()
        return source
    }
}

/// A whole number of seconds from an option or its environment variable.
private func seconds(_ value: Int?, _ variable: String, default fallback: Int, option: String, allowZero: Bool, maximum: Int = 86_400) throws -> Int {
    let text = setting(value.map(String.init), variable, default: String(fallback))!
    guard let seconds = Int(text), seconds >= (allowZero ? 0 : 1), seconds <= maximum else {
        throw ValidationError("\(option) (\(variable)) must be a whole number of seconds, \(allowZero ? 0 : 1)–\(maximum); got '\(text)'")
    }
    return seconds
}

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Apply pending migrations and exit.")

    @OptionGroup var database: DatabaseOptions
    @Option(name: .customLong("log-level")) var logLevel: String?

    func run() async throws {
        let logger = makeLogger(logLevel)
        let migrations = try loadMigrations()
        var (configuration, cluster) = try database.open(logger: logger)
        defer { cluster?.stopIfStarted() }
        if try await Database.hasCitus(configuration, logger: logger) { configuration.useCitus() }
        let db = Database(configuration: configuration, logger: logger)
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { await db.run() }
            defer { group.cancelAll() }
            let applied = try await MigrationRunner(migrations: migrations, logger: logger).run(on: db)
            print(applied.isEmpty ? "database is up to date (\(migrations.count) migrations)" : "applied migrations \(applied.map(String.init).joined(separator: ", "))")
        }
    }
}
