import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Runs concurrent requests of one kind together: requests that arrive while the database is busy
/// with earlier ones of their kind wait, and the next statement serves all that can share it.
///
/// For short reads, what a request costs is mostly the round trip around its statement, on both
/// sides: in PostgreSQL, receiving, binding, starting the executor and sending the answer; in the
/// service, PostgresNIO and the pool. A statement shared by k requests pays those once.
///
/// No request waits for company: with fewer than `maximumStatements` statements of its kind
/// running, a request runs its own at once, so a lone client sees the latency it would without
/// this. Requests that find every slot busy queue; when a statement finishes, its runner wakes the
/// first waiting request, which takes every queued request that can share its statement (up to
/// `keysPerStatement` keys) and runs it. Each statement runs after all its requests arrived, so it
/// sees everything acknowledged before any of them (read-your-writes holds as for a statement of
/// its own). A failed statement fails each of its requests with the same error, as it would have
/// failed each alone (a runner cancelled mid-statement answers them TRY_AGAIN_LATER).
///
/// A statement that is slow on the database side (reading pages from disk, evicting dirty buffers
/// after bulk writes) would hold everyone queued behind it. So once a statement has been executing
/// for `patience` (counted from when it is sent, not while it waits for a pooled connection), the
/// next request to arrive starts another statement with the queue, up to `maximumSlowStatements`
/// at once: the database gets the concurrency it would have without sharing exactly when
/// statements stall. (Ten milliseconds: with less, wall time under mere CPU contention often
/// passed it, and shared queries ran in smaller batches that cost PostgreSQL more per query; a
/// lookup statement of 16 keys executes in well under a millisecond.)
final class StatementSharing<Request: Sendable, Answer: Sendable>: Sendable {
    private enum Wake: Sendable {
        /// The answer to this request, or the statement's error.
        case done(Result<Answer, any Error>)
        /// A slot is free: run the next statement.
        case lead
    }

    private struct Waiter {
        var request: Request
        var continuation: CheckedContinuation<Wake, Never>
    }

    private struct State {
        var queue: [Waiter] = []
        var running = 0
        /// Requests in the running statements.
        var serving = 0
        var statistics = Statistics()
        /// When each running statement was sent, by statement number.
        var sent: [Int: ContinuousClock.Instant] = [:]

        /// Takes a statement slot if one is free and nobody is queued for it.
        mutating func claimSlot(maximum: Int) -> Bool {
            guard queue.isEmpty, running < maximum else { return false }
            running += 1
            return true
        }
    }

    /// Counts since the process started.
    struct Statistics: Sendable, Equatable {
        /// Statements run (or attempted), and the requests they served.
        var statements = 0
        var requests = 0
        /// Right now: statements running, the requests they serve, and requests waiting.
        var running = 0
        var serving = 0
        var queued = 0
    }

    var statistics: Statistics {
        state.withLock { state in
            var statistics = state.statistics
            statistics.running = state.running
            statistics.serving = state.serving
            statistics.queued = state.queue.count
            return statistics
        }
    }

    /// One statement per two cores by default: for lookups on two cores, more statements at a time
    /// made smaller batches, which cost PostgreSQL more per lookup and did fewer lookups.
    static var defaultMaximumStatements: Int { max(1, ProcessInfo.processInfo.activeProcessorCount / 2) }

    /// How many statements of this kind may run at once.
    let maximumStatements: Int
    /// How long a statement may execute before arriving requests start another one, and how
    /// many may then run at once.
    let patience: Duration
    let maximumSlowStatements: Int
    /// The most keys one statement serves (a lone request may bring more and runs alone).
    let keysPerStatement: Int
    private let keys: @Sendable (Request) -> Int
    private let canShare: @Sendable (Request, Request) -> Bool
    private let run: @Sendable ([Request], _ sending: @Sendable () -> Void) async throws -> [Answer]
    private let state = Mutex(State())
    /// False: every request runs a statement of its own at once, without queueing (on a Citus
    /// coordinator: a statement shared by several requests names their containers in arrays,
    /// so Citus cannot route it to one worker).
    let shares: Bool

    /// - Parameters:
    ///   - shares: whether requests share statements at all (see `shares`).
    ///   - keys: what a request adds to a statement, counted against `keysPerStatement`.
    ///   - canShare: whether two requests can be served by one statement.
    ///   - run: one statement for the requests; their answers, in order. It calls `sending`
    ///     when it has a connection, just before the statement goes out.
    init(shares: Bool = true, maximumStatements: Int = defaultMaximumStatements, keysPerStatement: Int,
         patience: Duration = .milliseconds(10), maximumSlowStatements: Int = 8,
         keys: @escaping @Sendable (Request) -> Int = { _ in 1 },
         canShare: @escaping @Sendable (Request, Request) -> Bool = { _, _ in true },
         run: @escaping @Sendable ([Request], _ sending: @Sendable () -> Void) async throws -> [Answer]) {
        self.maximumStatements = max(1, maximumStatements)
        self.patience = patience
        self.maximumSlowStatements = max(self.maximumStatements, maximumSlowStatements)
        self.keysPerStatement = keysPerStatement
        self.keys = keys
        self.canShare = canShare
        self.run = run
        self.shares = shares
    }

    /// The answer to `request`, from a statement of its own or one it shares.
    func answer(_ request: Request) async throws -> Answer {
        if !shares {
            state.withLock { state in
                state.statistics.statements += 1
                state.statistics.requests += 1
            }
            return try await run([request], {})[0]
        }
        if state.withLock({ $0.claimSlot(maximum: maximumStatements) }) {
            return try await lead(request)
        }
        let wake = await withCheckedContinuation { (continuation: CheckedContinuation<Wake, Never>) in
            let leadNow = state.withLock { state in
                if state.claimSlot(maximum: maximumStatements) { return true }
                if state.running < maximumSlowStatements, let oldest = state.sent.values.min(),
                   oldest.duration(to: .now) >= patience {
                    state.running += 1
                    return true
                }
                state.queue.append(Waiter(request: request, continuation: continuation))
                return false
            }
            if leadNow { continuation.resume(returning: .lead) }
        }
        switch wake {
        case .done(let result): return try result.get()
        case .lead: return try await lead(request)
        }
    }

    /// Runs one statement for `own` and the queued requests that can share it, then hands the slot
    /// to the next queued request (or frees it) and answers the others.
    private func lead(_ own: Request) async throws -> Answer {
        let (number, others): (Int, [Waiter]) = state.withLock { state in
            var taken: [Waiter] = []
            var left: [Waiter] = []
            var count = keys(own)
            for waiter in state.queue {
                let size = keys(waiter.request)
                if count + size <= keysPerStatement, canShare(own, waiter.request) {
                    count += size
                    taken.append(waiter)
                } else {
                    left.append(waiter)
                }
            }
            if !taken.isEmpty { state.queue = left }
            state.statistics.statements += 1
            state.statistics.requests += 1 + taken.count
            state.serving += 1 + taken.count
            return (state.statistics.statements, taken)
        }
        let result: Result<[Answer], any Error>
        do {
            let answers = try await run([own] + others.map(\.request)) {
                self.state.withLock { $0.sent[number] = .now }
            }
            guard answers.count == others.count + 1 else {
                throw StratusError(.internalError, "a shared statement answered \(answers.count) of \(others.count + 1) requests")
            }
            result = .success(answers)
        } catch is CancellationError {
            // The runner's own task was cancelled (server shutdown); the requests it carried were
            // not, and get an answer they can retry rather than an internal error.
            result = .failure(StratusError(.tryAgainLater, "the request was interrupted; retry shortly", retryAfter: 1))
        } catch {
            result = .failure(error)
        }
        let next: Waiter? = state.withLock { state in
            state.serving -= 1 + others.count
            state.sent[number] = nil
            if !state.queue.isEmpty { return state.queue.removeFirst() }
            state.running -= 1
            return nil
        }
        next?.continuation.resume(returning: .lead)
        for (index, waiter) in others.enumerated() {
            waiter.continuation.resume(returning: .done(result.map { $0[index + 1] }))
        }
        return try result.get()[0]
    }
}

/// A read whose statement is built at run time (`Prepared.Dynamic`), shared with others of the
/// same SQL through `Prepared.Shared` when all its values are scalars.
struct DynamicRead: Sendable {
    var sql: String
    var binds: Prepared.Binds

    /// A request's rows, and how many leading cells of each are the shared statement's own.
    struct Rows: Sendable {
        var rows: [PostgresRow]
        var skipping: Int
    }

    static func canShare(_ a: DynamicRead, _ b: DynamicRead) -> Bool {
        Prepared.Shared.canShare(a.binds) && Prepared.Shared.canShare(b.binds) && a.binds.types == b.binds.types && a.sql == b.sql
    }

    /// One statement for `requests` (all shareable with the first when there are several).
    static func run(_ requests: [DynamicRead], on connection: PostgresConnection, logger: Logger) async throws -> [Rows] {
        if requests.count == 1 {
            return [Rows(rows: try await Prepared.Dynamic.rows(requests[0].sql, requests[0].binds, on: connection, logger: logger, shapes: .feeds),
                         skipping: 0)]
        }
        let sql = Prepared.Shared.sql(requests[0].sql, types: requests[0].binds.types)
        let rows = try await Prepared.Dynamic.rows(sql, try Prepared.Shared.binds(requests.map(\.binds)), on: connection, logger: logger,
                                                   shapes: .feeds)
        return try Prepared.Shared.grouped(rows, count: requests.count).map { Rows(rows: $0, skipping: 1) }
    }
}
