import Logging
import NIOCore
import PostgresNIO
import StratusCore
import Synchronization

/// A connection pool that is thrown away and replaced after PostgreSQL has been unreachable.
///
/// Stratus keeps every connection of a pool open (`minimumConnections` = `maximumConnections`:
/// see `DatabaseConfiguration.clientConfiguration`). PostgresNIO's pool (1.33) cannot be trusted
/// with that once a connection attempt has failed: while it keeps retrying one connection it
/// deletes the others that fail, and after PostgreSQL is back the first lease that finds every
/// remaining connection busy trips `precondition(minimumConcurrentConnections <= stats.active)`
/// (`PoolStateMachine.ConnectionGroup.createNewDemandConnectionIfPossible`) and the process dies.
/// Restarting PostgreSQL under load did exactly that (`Deploy/PERFORMANCE-HISTORY.md`).
///
/// So a pool is used only until one of its connection attempts fails. From then on leases are
/// refused at once with TRY_AGAIN_LATER (a request never waits out an outage, and never reaches
/// the broken pool); a supervisor checks with a one-connection client (which cannot fall below
/// its minimum: the connection it retries is the only one) until PostgreSQL answers, then puts a
/// fresh pool in place. The old pool serves the leases it had already handed out and is shut down
/// a little later. A pool with no minimum avoids the crash too, but arms an idle timer on every
/// release, which cost lookups over 40 % of their throughput.
///
/// A failed attempt is seen through the pool's background logger: PostgresNIO reports it there
/// ("Connection creation failed", level info), synchronously, as it happens. `ClusterTests`
/// restarts PostgreSQL under load and would fail if a PostgresNIO update renamed the message.
final class RecoveringPool: Sendable {
    /// One PostgresNIO pool, and how many of its leases are out (asked for and not yet returned).
    final class Pool: Sendable {
        let client: PostgresClient
        let number: Int
        let leases = Atomic<Int>(0)
        /// Set by the task that runs the pool just before it does: a lease before then waits for it
        /// (PostgresNIO warns of a lease from a pool not running yet).
        let started = Atomic<Bool>(false)

        /// Runs the pool until the task is cancelled.
        func run() async {
            started.store(true, ordering: .releasing)
            await client.run()
        }

        init(client: PostgresClient, number: Int) {
            self.client = client
            self.number = number
        }
    }

    private let make: @Sendable (Logger) -> PostgresClient
    private let configuration: DatabaseConfiguration
    private let logger: Logger
    private let state: Mutex<State>
    private let wake: AsyncStream<Void>.Continuation
    private let wakes: AsyncStream<Void>

    private struct State {
        /// Set once, right after `init` has made the first pool's logger (which refers to `self`).
        var current: Pool?
        var usable = true
        /// Pools made so far (each is numbered from 1).
        var made = 1
        /// The newest pool that has failed a connection attempt (a fresh pool may, before it is used).
        var failed = 0
    }

    /// The longest a replaced pool may keep serving the leases it handed out before it is shut down.
    static let retirement: Duration = .seconds(30)

    /// - Parameters:
    ///   - configuration: the pool's server (to check it answers before a fresh pool is made).
    ///   - make: makes a pool with the given background logger.
    init(configuration: DatabaseConfiguration, logger: Logger, make: @escaping @Sendable (Logger) -> PostgresClient) {
        self.make = make
        self.configuration = configuration
        self.logger = logger
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        state = Mutex(State())
        let first = Pool(client: make(watching(number: 1)), number: 1)
        state.withLock { $0.current = first }
    }

    /// Runs `body` with a connection of the current pool; TRY_AGAIN_LATER at once while
    /// PostgreSQL is (or was just) unreachable.
    func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        let (pool, usable) = state.withLock { ($0.current, $0.usable) }
        guard usable, let pool else {
            throw StratusError(.tryAgainLater, "the database is not reachable right now; retry shortly", retryAfter: 1)
        }
        pool.leases.add(1, ordering: .relaxed)
        defer { pool.leases.subtract(1, ordering: .releasing) }
        while !pool.started.load(ordering: .acquiring) { try await Task.sleep(for: .milliseconds(1)) }
        return try await pool.client.withConnection(body)
    }

    /// Whether leases are being refused now (PostgreSQL unreachable, or a fresh pool not in place yet).
    var isRecovering: Bool { !state.withLock { $0.usable } }

    /// A logger for pool `number` that marks it failed on its first failed connection attempt.
    private func watching(number: Int) -> Logger {
        let handler = FailureWatchingLogHandler(wrapping: logger.handler) { [weak self] in
            self?.failed(number: number)
        }
        var watching = Logger(label: logger.label, factory: { _ in handler })
        watching.logLevel = handler.logLevel
        return watching
    }

    private func failed(number: Int) {
        let first = state.withLock { state -> Bool in
            state.failed = max(state.failed, number)
            guard state.current?.number == number, state.usable else { return false }
            state.usable = false
            return true
        }
        guard first else { return }
        logger.warning("PostgreSQL cannot be reached: requests are answered TRY_AGAIN_LATER until it answers again")
        wake.yield()
    }

    /// Runs the pools, and replaces the current one after each outage, until cancelled.
    func run() async {
        guard let first = state.withLock({ $0.current }) else { return }
        var current = (pool: first, task: Task { await first.run() })
        var ending: [Task<Void, Never>] = []
        await withTaskCancellationHandler { [wakes] in
            for await _ in wakes {
                guard let fresh = await replacement(discarding: &ending) else { break }
                // The replaced pool finishes the leases it handed out (most fail at once: their
                // connections died), then shuts down. Until then it would open connections again
                // once PostgreSQL is back, so it is not kept longer than that.
                let old = current
                ending.append(Task {
                    let deadline = ContinuousClock.now + Self.retirement
                    while old.pool.leases.load(ordering: .acquiring) > 0, ContinuousClock.now < deadline {
                        try? await Task.sleep(for: .milliseconds(20))
                    }
                    old.task.cancel()
                    await old.task.value
                })
                current = fresh
            }
        } onCancel: { [wake] in
            wake.finish()
        }
        current.task.cancel()
        for task in ending { task.cancel() }
        await current.task.value
        for task in ending { await task.value }
    }

    /// Waits until PostgreSQL answers a new connection, then makes a fresh pool, runs it, and puts
    /// it in place once it has served a statement with no connection attempt failing (`nil` when
    /// cancelled first). Pools that fail are shut down through `discarded`.
    private func replacement(discarding discarded: inout [Task<Void, Never>]) async -> (pool: Pool, task: Task<Void, Never>)? {
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            try? await Task.sleep(for: .milliseconds(min(1000, 100 * attempt)))
            guard await answers() else { continue }
            let number = state.withLock { state in
                state.made += 1
                return state.made
            }
            let fresh = Pool(client: make(watching(number: number)), number: number)
            let task = Task { await fresh.run() }
            // In place only if none of its connection attempts failed meanwhile (checked and swapped
            // under one lock: a failure after it marks the fresh pool unusable like any other).
            let placed = await serves(fresh.client) && state.withLock { state in
                guard state.failed < number else { return false }
                state.current = fresh
                state.usable = true
                return true
            }
            guard placed else {
                task.cancel()
                discarded.append(task)
                continue
            }
            logger.notice("PostgreSQL answers again: a fresh connection pool serves requests")
            return (fresh, task)
        }
        return nil
    }

    /// Whether `pool` runs `SELECT 1` within five seconds.
    private func serves(_ pool: PostgresClient) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                (try? await pool.withConnection { connection in
                    _ = try await connection.query("SELECT 1", logger: self.logger).collect()
                }) != nil
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(5))
                return false
            }
            let served = await group.next() ?? false
            group.cancelAll()
            return served
        }
    }

    /// Whether a new connection (not pooled) logs in and runs `SELECT 1`.
    private func answers() async -> Bool {
        do {
            let tls: PostgresConnection.Configuration.TLS = configuration.requireTLS
                ? .require(try NIOSSLContext(configuration: .makeClientConfiguration())) : .disable
            var settings = PostgresConnection.Configuration(host: configuration.host, port: configuration.port, username: configuration.username,
                                                            password: configuration.password, database: configuration.database, tls: tls)
            settings.options.connectTimeout = .seconds(5)
            let quiet = Logger(label: "stratus.probe", factory: { _ in SwiftLogNoOpLogHandler() })
            let connection = try await PostgresConnection.connect(configuration: settings, id: 0, logger: quiet)
            let answered = (try? await connection.query("SELECT 1", logger: quiet).collect()) != nil
            try? await connection.close()
            return answered
        } catch {
            return false
        }
    }
}

/// Forwards everything to the handler it wraps, and calls `failed` when PostgresNIO's pool
/// reports a failed connection attempt. It lets `info` messages through to see that report even
/// when the wrapped handler logs only warnings, and drops what the wrapped handler would not log.
struct FailureWatchingLogHandler: LogHandler {
    private var wrapped: any LogHandler
    private let failed: @Sendable () -> Void

    init(wrapping handler: any LogHandler, failed: @escaping @Sendable () -> Void) {
        self.wrapped = handler
        self.failed = failed
    }

    var logLevel: Logger.Level {
        get { min(wrapped.logLevel, .info) }
        set { wrapped.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { wrapped.metadata }
        set { wrapped.metadata = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { wrapped.metadataProvider }
        set { wrapped.metadataProvider = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { wrapped[metadataKey: key] }
        set { wrapped[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        if event.level == .info, event.message.description == "Connection creation failed" { failed() }
        guard event.level >= wrapped.logLevel else { return }
        wrapped.log(event: event)
    }
}
