import Logging
import NIOCore
import PostgresNIO
import StratusCore
import Synchronization

/// A connection pool that is replaced as soon as one of its connection attempts fails.
///
/// Stratus keeps every connection of a pool open (`minimumConnections` = `maximumConnections`:
/// see `DatabaseConfiguration.clientConfiguration`). PostgresNIO's pool (1.33) cannot be trusted
/// with that once a connection attempt has failed: while it keeps retrying one connection it
/// deletes the others that fail, and after PostgreSQL is back the first lease that finds every
/// remaining connection busy trips `precondition(minimumConcurrentConnections <= stats.active)`
/// (`PoolStateMachine.ConnectionGroup.createNewDemandConnectionIfPossible`) and the process dies.
/// Restarting PostgreSQL under load did exactly that. A pool with no minimum avoids the crash
/// too, but arms an idle timer on every release, which cost lookups much of their throughput.
///
/// So a pool is leased from only until one of its connection attempts fails. Then a fresh pool
/// takes its place at once (a slow connection under load, or one refused by a full
/// `max_connections`, costs nothing more), and the old one finishes the leases it had handed out
/// (the queued ones are served when it reconnects, or fail) before it is shut down. If the fresh
/// pool fails too within ten seconds, a plain connection is tried: if it cannot log in and run
/// `SELECT 1`, PostgreSQL is taken to be unreachable and leases are refused at once with
/// TRY_AGAIN_LATER (a request never waits out an outage) until a plain connection gets in again;
/// if it can, PostgreSQL was only slow or full, and another fresh pool takes over with no refusal.
/// (Only the probe declares an outage: the first version declared one on the second failure
/// alone, and a clean test run, ~380 connections opening at once on 2 cores, timed out logins,
/// swapped pools, opened more connections and refused most of the suite's requests.)
///
/// A failed attempt is seen through the pool's background logger: PostgresNIO reports it there
/// ("Connection creation failed", level info), synchronously, as it happens. `ClusterTests`
/// restarts PostgreSQL under load and fails if the server dies, as it would if a PostgresNIO
/// update renamed the message.
final class RecoveringPool: Sendable {
    /// One PostgresNIO pool, and how many of its leases are out (asked for and not yet returned).
    final class Pool: Sendable {
        let client: PostgresClient
        let number: Int
        let made = ContinuousClock.now
        let leases = Atomic<Int>(0)
        /// Set by the task that runs the pool just before it does: a lease before then waits for it
        /// (PostgresNIO warns of a lease from a pool not running yet).
        let started = Atomic<Bool>(false)

        init(client: PostgresClient, number: Int) {
            self.client = client
            self.number = number
        }

        /// Runs the pool until the task is cancelled. Leases are let through once `run()` has had
        /// a moment to begin (it marks the client running on entry, but its task may start on
        /// another thread a little later: setting `started` first let leases in before it, and
        /// PostgresNIO warned of each, ~140 times in a test run).
        func run() async {
            async let running: Void = client.run()
            try? await Task.sleep(for: .milliseconds(5))
            started.store(true, ordering: .releasing)
            await running
        }
    }

    private let make: @Sendable (Logger) -> PostgresClient
    private let configuration: DatabaseConfiguration
    private let logger: Logger
    private let state: Mutex<State>
    private let wake: AsyncStream<Int>.Continuation
    private let wakes: AsyncStream<Int>

    private struct State {
        /// Set once, right after `init` has made the first pool's logger (which refers to `self`).
        var current: Pool?
        /// False while PostgreSQL is taken to be unreachable.
        var usable = true
        /// Pools made so far (each is numbered from 1).
        var made = 1
        /// The current pool failed and is being replaced.
        var replacing = false
    }

    /// The longest a replaced pool may keep serving the leases it handed out before it is shut down.
    static let retirement: Duration = .seconds(30)
    /// A fresh pool failing within this long of being made means PostgreSQL is unreachable.
    static let outageWindow: Duration = .seconds(10)

    /// - Parameters:
    ///   - configuration: the pool's server (checked with a plain connection during an outage).
    ///   - make: makes a pool with the given background logger.
    init(configuration: DatabaseConfiguration, logger: Logger, make: @escaping @Sendable (Logger) -> PostgresClient) {
        self.make = make
        self.configuration = configuration
        self.logger = logger
        (wakes, wake) = AsyncStream.makeStream(of: Int.self, bufferingPolicy: .unbounded)
        state = Mutex(State())
        let first = Pool(client: make(watching(number: 1)), number: 1)
        state.withLock { $0.current = first }
    }

    /// Runs `body` with a connection of the current pool; TRY_AGAIN_LATER at once while
    /// PostgreSQL is unreachable.
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

    /// Whether leases are being refused now (PostgreSQL unreachable).
    var isRecovering: Bool { !state.withLock { $0.usable } }

    /// A logger for pool `number` that reports its first failed connection attempt.
    private func watching(number: Int) -> Logger {
        let handler = FailureWatchingLogHandler(wrapping: logger.handler) { [weak self] in
            self?.failed(number: number)
        }
        var watching = Logger(label: logger.label, factory: { _ in handler })
        watching.logLevel = handler.logLevel
        return watching
    }

    /// Pool `number` failed to connect: if it is the current one, it is replaced (`run`).
    private func failed(number: Int) {
        let replace = state.withLock { state -> Bool in
            guard state.current?.number == number, !state.replacing else { return false }
            state.replacing = true
            return true
        }
        if replace { wake.yield(number) }
    }

    /// Runs the pools, and replaces the current one whenever it fails, until cancelled.
    func run() async {
        guard let first = state.withLock({ $0.current }) else { return }
        var current = (pool: first, task: Task { await first.run() })
        var ending: [Task<Void, Never>] = []
        await withTaskCancellationHandler { [wakes] in
            for await _ in wakes {
                // A fresh pool failing soon after it was made: PostgreSQL may be unreachable. A
                // plain connection decides: if it gets in, PostgreSQL was only slow (or full) and
                // requests go on waiting in a fresh pool; if not, requests are refused at once
                // until one gets in again.
                if ContinuousClock.now - current.pool.made < Self.outageWindow, current.pool.number > 1, let failure = await probe() {
                    state.withLock { $0.usable = false }
                    logger.warning("PostgreSQL cannot be reached: requests are answered TRY_AGAIN_LATER until it answers again",
                                   metadata: ["stratus.reason": "\(failure)"])
                    guard await waitUntilItAnswers() else { break }
                }
                let number = state.withLock { state in
                    state.made += 1
                    return state.made
                }
                let fresh = Pool(client: make(watching(number: number)), number: number)
                let wasUsable = state.withLock { state in
                    defer {
                        state.current = fresh
                        state.usable = true
                        state.replacing = false
                    }
                    return state.usable
                }
                if !wasUsable { logger.notice("PostgreSQL answers again: a fresh connection pool serves requests") }
                // The replaced pool finishes the leases it handed out (most end at once: their
                // connections died), then shuts down; it is not kept longer, since it would open
                // all its connections again once PostgreSQL is back.
                let old = current
                ending.append(Task {
                    let deadline = ContinuousClock.now + Self.retirement
                    while old.pool.leases.load(ordering: .acquiring) > 0, ContinuousClock.now < deadline {
                        try? await Task.sleep(for: .milliseconds(20))
                    }
                    old.task.cancel()
                    await old.task.value
                })
                current = (fresh, Task { await fresh.run() })
            }
        } onCancel: { [wake] in
            wake.finish()
        }
        current.task.cancel()
        for task in ending { task.cancel() }
        await current.task.value
        for task in ending { await task.value }
    }

    /// Checks every 100 ms–1 s whether PostgreSQL answers a new connection; `false` when cancelled first.
    private func waitUntilItAnswers() async -> Bool {
        var attempt = 0
        while !Task.isCancelled {
            attempt += 1
            try? await Task.sleep(for: .milliseconds(min(1000, 100 * attempt)))
            if await probe() == nil { return true }
        }
        return false
    }

    /// Nil when a new connection (not pooled) logs in and runs `SELECT 1`; otherwise what failed
    /// (logged with the outage: refused, timed out, too many clients, starting up…).
    private func probe() async -> String? {
        do {
            let settings = try configuration.connectionSettings()
            let quiet = Logger(label: "stratus.probe", factory: { _ in SwiftLogNoOpLogHandler() })
            let connection = try await PostgresConnection.connect(configuration: settings, id: 0, logger: quiet)
            do {
                _ = try await connection.query("SELECT 1", logger: quiet).collect()
            } catch {
                try? await connection.close()
                throw error
            }
            try? await connection.close()
            return nil
        } catch let error as PSQLError {
            if let message = error.serverInfo?[.message] {
                return "\(message) (SQLSTATE \(error.serverInfo?[.sqlState] ?? "?"))"
            }
            return "\(error.code)" + (error.underlying.map { ": \($0)" } ?? "")
        } catch {
            return "\(error)"
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
