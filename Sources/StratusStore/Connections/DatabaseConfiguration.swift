import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import _ConnectionPoolModule
import StratusCore

/// A database that cannot be used as configured, said so that the operator can fix it.
public struct DatabaseSetupError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// Where the PostgreSQL server is and how to log in.
public struct DatabaseConfiguration: Sendable {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    /// Whether connections use TLS (`sslmode` other than `disable`).
    public var requireTLS: Bool
    /// How far the server's certificate is checked over TLS, as libpq's `sslmode` says.
    public var tlsVerification: TLSVerification = .fullVerification
    /// PEM file of the certificate authorities trusted for the server's certificate (libpq's
    /// `sslrootcert`); nil: the system's.
    public var rootCertificatePath: String?

    /// libpq's `sslmode` values above `disable`: `require` encrypts without checking whom it
    /// speaks to, `verify-ca` checks the certificate against the trusted authorities,
    /// `verify-full` also that it names the host connected to.
    public enum TLSVerification: String, Sendable {
        case none = "require"
        case certificateAuthority = "verify-ca"
        case fullVerification = "verify-full"
    }
    /// Pool size; 8–16 backends is the sweet spot on a 2-core machine (performance.md §2.3).
    public var maximumConnections: Int
    /// How long one statement may wait for a row or table lock before it fails and the request is
    /// answered TRY_AGAIN_LATER (PostgreSQL's `lock_timeout`, set on every pooled session); `nil`
    /// waits for ever. Bounds how long a request can hang behind another transaction, and so how
    /// long a graceful shutdown can wait for it.
    public var lockTimeout: Duration?

    /// How long one statement may run before PostgreSQL cancels it and the request is answered
    /// TRY_AGAIN_LATER (`statement_timeout` on every pooled session); `nil` lets it run for ever.
    /// A statement the planner got badly wrong, or a bug, then costs one failed request instead
    /// of a connection held, and a core spent, for as long as it runs. Work that is long by
    /// nature (migrations, index builds, deleting a zone or a development environment) lifts it
    /// for its own transaction (`Database.allowLongStatements`).
    public var statementTimeout: Duration?

    /// How PostgreSQL plans the service's prepared statements (`plan_cache_mode`). The generic plan
    /// by default (see `clientConfiguration`); on Citus, a custom plan for every execution: Citus
    /// cannot plan a join of distributed tables with parameters as a generic plan ("could not
    /// create distributed plan"), even one that names the container. `stratus serve` and
    /// `stratus migrate` choose it when the database has the citus extension.
    public var planCacheMode = "force_generic_plan"

    /// Whether the database is a Citus coordinator. Writes there store the coordinator's
    /// transaction id (Citus evaluates `pg_current_xact_id()` of a modification on the
    /// coordinator), so change feeds take the coordinator's snapshot, in a statement of its own
    /// before the rows are read on the worker (`RecordStore.readFeed`).
    public var citusCoordinator = false

    /// On a Citus coordinator, whether requests' single-table reads and background writes go
    /// straight to the worker holding their container (`CitusRoutes`), and records writes as
    /// statements Citus routes whole to it (`RoutedWrites`), rather than as before through the
    /// coordinator. On by default;
    /// off (`STRATUS_CITUS_ROUTING=coordinator`) where the workers cannot be reached from the
    /// servers, or do not accept the coordinator's login.
    public var routesToCitusWorkers = true

    /// The `application_name` of the pool's sessions (`pg_stat_activity`), if set: a Citus
    /// worker's pools are `stratus routed`.
    public var applicationName: String?

    /// Settings for a Citus coordinator: a custom plan for every execution, and feeds that read
    /// the coordinator's snapshot (see `planCacheMode`, `citusCoordinator`).
    public mutating func useCitus() {
        planCacheMode = "force_custom_plan"
        citusCoordinator = true
    }

    /// The default lock wait: 10 seconds, far above how long the service's own transactions hold
    /// locks (a whole 100-record modify took ~260 ms at p50 under the batch benchmark's load).
    public static let defaultLockTimeout: Duration = .seconds(10)

    /// The default statement limit: 30 seconds. A request's statements take milliseconds (a
    /// 100-record modify ~260 ms at p50 under load); a lock wait ends first, at `lockTimeout`.
    public static let defaultStatementTimeout: Duration = .seconds(30)

    public init(host: String, port: Int, username: String, password: String?, database: String,
                requireTLS: Bool = false, maximumConnections: Int = 16, lockTimeout: Duration? = DatabaseConfiguration.defaultLockTimeout,
                statementTimeout: Duration? = DatabaseConfiguration.defaultStatementTimeout) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.requireTLS = requireTLS
        self.maximumConnections = maximumConnections
        self.lockTimeout = lockTimeout
        self.statementTimeout = statementTimeout
    }

    /// Parses `postgres://user:password@host:port/database[?sslmode=…&sslrootcert=FILE]`, `sslmode`
    /// as libpq reads it: `disable` (the default), `require`, `verify-ca`, `verify-full`
    /// (`allow` and `prefer` are taken as `require`: this client never falls back to plain).
    public init(url: String) throws(StratusError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme,
              scheme == "postgres" || scheme == "postgresql", let host = components.host, !host.isEmpty
        else {
            throw .badRequest("STRATUS_DATABASE_URL must look like postgres://user:password@host:5432/database")
        }
        let database = components.path.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
        let sslmode = components.queryItems?.first(where: { $0.name == "sslmode" })?.value ?? "disable"
        let verification: TLSVerification?
        switch sslmode {
        case "disable": verification = nil
        case "allow", "prefer", "require": verification = TLSVerification.none
        case "verify-ca": verification = .certificateAuthority
        case "verify-full": verification = .fullVerification
        default: throw .badRequest("sslmode=\(sslmode) in the database URL: use disable, require, verify-ca or verify-full")
        }
        self.init(host: host, port: components.port ?? 5432, username: components.user ?? "postgres",
                  password: components.password?.removingPercentEncoding ?? components.password,
                  database: database.isEmpty ? "postgres" : database, requireTLS: verification != nil)
        if let verification { tlsVerification = verification }
        rootCertificatePath = components.queryItems?.first(where: { $0.name == "sslrootcert" })?.value
        if let path = rootCertificatePath, !FileManager.default.isReadableFile(atPath: path) {
            throw .badRequest("sslrootcert=\(path) in the database URL: no readable file there")
        }
    }

    /// The settings of one connection outside the pool (probes, first contact).
    func connectionSettings() throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS = try tlsConfiguration().map { .require(try NIOSSLContext(configuration: $0)) } ?? .disable
        var settings = PostgresConnection.Configuration(host: host, port: port, username: username, password: password, database: database, tls: tls)
        settings.options.connectTimeout = .seconds(Self.connectTimeout.components.seconds)
        return settings
    }

    /// The TLS settings of a connection: nil without TLS.
    func tlsConfiguration() -> TLSConfiguration? {
        guard requireTLS else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        switch tlsVerification {
        case .none: tls.certificateVerification = .none
        case .certificateAuthority: tls.certificateVerification = .noHostnameVerification
        case .fullVerification: tls.certificateVerification = .fullVerification
        }
        if let rootCertificatePath { tls.trustRoots = .file(rootCertificatePath) }
        return tls
    }

    /// How long a new connection may take to log in. Generous on purpose: a timed-out attempt
    /// makes `RecoveringPool` replace its pool, and when a test suite or a fleet of servers opens
    /// hundreds of connections at once, logging in on a busy 2-core machine took over 5 s (the
    /// earlier limit), so each timeout swapped in a fresh pool that opened its connections again
    /// and the storm fed itself. A server that is down refuses at once; a limit still ends an
    /// attempt at a host that does not answer at all.
    public static let connectTimeout: Duration = .seconds(30)

    /// The same server, another database.
    public func with(database: String) -> DatabaseConfiguration {
        var copy = self
        copy.database = database
        return copy
    }

    func clientConfiguration() -> PostgresClient.Configuration {
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database,
            tls: tlsConfiguration().map { .require($0) } ?? .disable)
        // The pool keeps all its connections open and sends no keep-alive pings: PostgresNIO's pool
        // schedules an idle-timeout and a keep-alive timer (each a task sleeping on a clock) every
        // time a connection is handed back, which cost more CPU than the query itself. A
        // connection that died while idle is found on its next use and answered TRY_AGAIN_LATER.
        configuration.options.maximumConnections = maximumConnections
        configuration.options.minimumConnections = maximumConnections
        configuration.options.keepAliveBehavior = nil
        configuration.options.connectTimeout = Self.connectTimeout
        // The service's statements are written to be planned once per connection: tenant columns
        // lead every index they use, so the plan should not depend on a parameter's value. Left to
        // choose (`auto`), PostgreSQL built fresh custom plans for many change-feed reads (their
        // LIMIT parameter makes the generic estimate depend on the zone's size), and planning
        // cost more than reading. The risk it takes: a value-skewed
        // predicate (a rare against a common indexed value) no longer gets a plan of its own.
        configuration.options.additionalStartupParameters = [("plan_cache_mode", planCacheMode)]
        if let applicationName { configuration.options.additionalStartupParameters.append(("application_name", applicationName)) }
        for (name, limit) in [("lock_timeout", lockTimeout), ("statement_timeout", statementTimeout)] {
            guard let limit else { continue }
            let milliseconds = limit.components.seconds * 1000 + limit.components.attoseconds / 1_000_000_000_000_000
            configuration.options.additionalStartupParameters.append((name, "\(max(milliseconds, 1))ms"))
        }
        return configuration
    }
}
