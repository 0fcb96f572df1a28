import Foundation
import Logging
import StratusCore
import StratusStore
import Synchronization

/// The request log's writer: every answered request of a container (one that named a known
/// container and environment, `RequestID.State.container`) is appended here on the request's
/// path (one lock, one array append) and written to PostgreSQL about once a second, in batches,
/// on a connection of its own (`AdminStore.writeRequestLog`), so a request never waits for it.
/// Each container-environment keeps its newest `logRequests` rows (`stratus quota set`).
///
/// What waits is bounded (`maximumPending`): while PostgreSQL is out of reach the oldest rows
/// are dropped and counted (`stratus_request_log_rows_total{result="dropped"}`). A crash loses
/// the last second's rows; the log is the operator's record, not the data's.
public final class RequestLog: Sendable {
    /// Rows waiting to be written, at most.
    static let maximumPending = 100_000
    /// How often the waiting rows are written.
    static let interval: Duration = .seconds(1)

    struct Pending {
        var entries: [RequestLogEntry] = []
        /// Callers of `flush()`, resumed once what was appended before their call is written.
        var waiters: [CheckedContinuation<Void, Never>] = []
        /// Whether the writer takes waiters: set under the same lock, so a waiter added is always
        /// resumed (by the next write, or the last one at shutdown), never left behind.
        var running = false
    }

    private let pending = Mutex(Pending())
    private let signals: AsyncStream<Void>
    private let signal: AsyncStream<Void>.Continuation
    let written = Atomic<Int>(0)
    let dropped = Atomic<Int>(0)
    let configuration: DatabaseConfiguration
    let logger: Logger
    /// Each container-environment's `logRequests` limit, as the rate limiter caches limits.
    let keep: @Sendable (ContainerID, ContainerEnvironment) async throws -> Int64

    init(configuration: DatabaseConfiguration, logger: Logger, keep: @escaping @Sendable (ContainerID, ContainerEnvironment) async throws -> Int64) {
        self.configuration = configuration
        self.logger = logger
        self.keep = keep
        (signals, signal) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Adds one answered request (on the request's path: no I/O).
    func append(_ entry: RequestLogEntry) {
        let overflow = pending.withLock { pending -> Int in
            pending.entries.append(entry)
            guard pending.entries.count > Self.maximumPending else { return 0 }
            // A tenth at once: the array is shifted once per many appends, not on each.
            pending.entries.removeFirst(Self.maximumPending / 10)
            return Self.maximumPending / 10
        }
        if overflow > 0 { dropped.add(overflow, ordering: .relaxed) }
    }

    /// Rows appended and not written yet.
    var pendingCount: Int { pending.withLock { $0.entries.count } }

    /// Returns once every row appended before the call is written (or could not be): a reader
    /// of the log sees this process's requests up to its own. At once when the writer is not running.
    func flush() async {
        await withCheckedContinuation { continuation in
            let waits = pending.withLock { pending -> Bool in
                if pending.running { pending.waiters.append(continuation) }
                return pending.running
            }
            if waits { signal.yield() } else { continuation.resume() }
        }
    }

    /// Writes the waiting rows about once a second until the task is cancelled, then once more.
    func run() async {
        var settings = configuration
        settings.maximumConnections = 1
        let database = Database(configuration: settings, logger: logger)
        let store = AdminStore(database: database, logger: logger)
        // Not a child task: the last write, after cancellation, still has its connection.
        let runner = Task { await database.run() }
        let ticker = Task { [signal] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                signal.yield()
            }
        }
        pending.withLock { $0.running = true }
        for await _ in signals {
            await write(store)
            if Task.isCancelled { break }
        }
        // Waiters from here on are not kept; those already added go with the last write below.
        pending.withLock { $0.running = false }
        ticker.cancel()
        // What came in the last second, given a few seconds (a database away does not hold up
        // shutdown): whichever ends first, the write or the wait, resumes this task. (Awaiting the
        // write's `value` in a task group would not do: the group waits for every child, and
        // cancelling the child that awaits does not end the write.)
        let last = Task { await self.write(store) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let once = ResumeOnce(continuation)
            Task { await last.value; once.resume() }
            Task { try? await Task.sleep(for: .seconds(3)); once.resume() }
        }
        last.cancel()
        runner.cancel()
    }

    /// Writes every waiting row in one transaction (on Citus, one per worker); rows that could not
    /// be written wait for the next time (within `maximumPending`).
    func write(_ store: AdminStore) async {
        let (entries, waiters) = pending.withLock { pending in
            defer { pending.entries = []; pending.waiters = [] }
            return (pending.entries, pending.waiters)
        }
        defer { for waiter in waiters { waiter.resume() } }
        guard !entries.isEmpty else { return }
        // Grouped by position, so that no entry is copied (each holds several strings).
        var groups: [Int64: [Int]] = [:]
        for (index, entry) in entries.enumerated() { groups[entry.containerID.rawValue * 4 + Int64(entry.environment.code), default: []].append(index) }
        var failed: [RequestLogEntry] = []
        do {
            var batch: [(indices: [Int], keep: Int64)] = []
            for group in groups.values {
                let first = entries[group[0]]
                batch.append((group, try await keep(first.containerID, first.environment)))
            }
            try await store.metering.writeRequestLog(entries, groups: batch)
            written.add(entries.count, ordering: .relaxed)
        } catch {
            // On Citus, those of the workers that failed; elsewhere all.
            failed = (error as? RowsUnsaved).map { unsaved in unsaved.positions.map { entries[$0] } } ?? entries
            written.add(entries.count - failed.count, ordering: .relaxed)
            logger.debug("the request log could not be written", metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
        guard !failed.isEmpty else { return }
        let lost = pending.withLock { pending -> Int in
            pending.entries = failed + pending.entries
            let over = max(0, pending.entries.count - Self.maximumPending)
            pending.entries.removeFirst(over)
            return over
        }
        if lost > 0 { dropped.add(lost, ordering: .relaxed) }
    }
}

/// A continuation resumed by the first of several callers; the others do nothing.
final class ResumeOnce: Sendable {
    private let continuation: Mutex<CheckedContinuation<Void, Never>?>

    init(_ continuation: CheckedContinuation<Void, Never>) { self.continuation = Mutex(continuation) }

    func resume() {
        continuation.withLock { held in
            defer { held = nil }
            return held
        }?.resume()
    }
}
