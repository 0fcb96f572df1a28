import Foundation
import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// Runs concurrent `records/lookup`s together: requests that arrive while the database is busy
/// with earlier lookups wait, and the next statement serves all of them at once.
///
/// A one-record lookup is a primary-key probe; what it costs is the round trip around it, on both
/// sides. In PostgreSQL, receiving, binding, starting the executor and sending the answer cost
/// ~90 µs of CPU per statement on this machine, against ~35 µs per key when one statement looks up
/// eight (pgbench, same SQL). In the service, PostgresNIO and the pool took ~30% of the CPU of a
/// lookup. A statement shared by k requests pays those once.
///
/// No request waits for company: with fewer than `maximumStatements` lookup statements running, a
/// request runs its own at once, so a lone client sees the latency it would without this. Requests
/// that find every slot busy queue; when a statement finishes, its runner wakes the first waiting
/// request, which takes the queue (up to `keysPerStatement` names) into the next statement. Each
/// statement runs after all its requests arrived, so it sees everything acknowledged before any of
/// them (read-your-writes holds as for a lookup of its own). A failed statement fails each of its
/// requests with the same error, as it would have failed each alone.
final class LookupCoalescer: Sendable {
    struct Request: Sendable {
        var db: DatabaseRef
        var zone: String
        var names: [String]
    }

    private enum Wake: Sendable {
        /// The answer to this request, or the statement's error.
        case done(Result<[Record]?, any Error>)
        /// A slot is free: run the next statement.
        case lead
    }

    private struct Waiter {
        var request: Request
        var continuation: CheckedContinuation<Wake, Never>
    }

    private struct State {
        var queue: [Waiter] = []
        var head = 0
        var running = 0
        /// Requests in the running statements.
        var serving = 0
        var statistics = Statistics()

        var isEmpty: Bool { head == queue.count }

        /// Takes a statement slot if one is free and nobody is queued for it.
        mutating func claimSlot(maximum: Int) -> Bool {
            guard isEmpty, running < maximum else { return false }
            running += 1
            return true
        }

        mutating func popFirst() -> Waiter? {
            guard !isEmpty else { return nil }
            let waiter = queue[head]
            head += 1
            if head == queue.count {
                queue.removeAll(keepingCapacity: true)
                head = 0
            }
            return waiter
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
            statistics.queued = state.queue.count - state.head
            return statistics
        }
    }

    /// How many lookup statements may run at once: by default one per two cores. On this
    /// machine's two, one statement at a time did 6.2–6.7k lookups/s at 16 connections, two did
    /// 4.6–6.2k and three 3.6–5.0k (smaller batches: PostgreSQL's CPU per lookup went from ~42 to
    /// ~65 and ~90 µs), against 3.6–4.5k without coalescing.
    let maximumStatements: Int
    /// The most record names one statement looks up (a lone request may bring up to 200).
    let keysPerStatement: Int
    private let database: Database
    private let logger: Logger
    private let state = Mutex(State())

    static let defaultMaximumStatements = max(1, ProcessInfo.processInfo.activeProcessorCount / 2)

    init(database: Database, logger: Logger, maximumStatements: Int = defaultMaximumStatements, keysPerStatement: Int = 256) {
        self.database = database
        self.logger = logger
        self.maximumStatements = max(1, maximumStatements)
        self.keysPerStatement = keysPerStatement
    }

    /// The live records `request` names (in no particular order), or `nil` when its zone does
    /// not exist.
    func records(for request: Request) async throws -> [Record]? {
        if state.withLock({ $0.claimSlot(maximum: maximumStatements) }) {
            return try await lead(request)
        }
        let wake = await withCheckedContinuation { (continuation: CheckedContinuation<Wake, Never>) in
            let leadNow = state.withLock { state in
                if state.claimSlot(maximum: maximumStatements) { return true }
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

    /// Runs one statement for `own` and as many queued requests as fit, then hands the slot to the
    /// next queued request (or frees it) and answers the others.
    private func lead(_ own: Request) async throws -> [Record]? {
        let others: [Waiter] = state.withLock { state in
            var taken: [Waiter] = []
            var keys = max(own.names.count, 1)
            while !state.isEmpty {
                let next = state.queue[state.head]
                let size = max(next.request.names.count, 1)
                guard keys + size <= keysPerStatement else { break }
                keys += size
                taken.append(state.popFirst()!)
            }
            state.statistics.statements += 1
            state.statistics.requests += 1 + taken.count
            state.serving += 1 + taken.count
            return taken
        }
        let result: Result<[[Record]?], any Error>
        do {
            let requests = [own] + others.map(\.request)
            result = .success(try await database.withConnection { connection in try await Self.run(requests, on: connection, logger: logger) })
        } catch {
            result = .failure(error)
        }
        let next: Waiter? = state.withLock { state in
            state.serving -= 1 + others.count
            if let waiter = state.popFirst() { return waiter }
            state.running -= 1
            return nil
        }
        next?.continuation.resume(returning: .lead)
        for (index, waiter) in others.enumerated() {
            waiter.continuation.resume(returning: .done(result.map { $0[index + 1] }))
        }
        return try result.get()[0]
    }

    /// One statement for `requests` on `connection`: per request, in order, its live records or
    /// `nil` when its zone does not exist. A lone request runs `Prepared.Lookup`, several run
    /// `Prepared.LookupMany`.
    static func run(_ requests: [Request], on connection: PostgresConnection, logger: Logger) async throws -> [[Record]?] {
        if requests.count == 1 {
            let request = requests[0]
            let rows = try await connection.rows(Prepared.Lookup(db: request.db, zone: request.zone, names: request.names), logger: logger)
            if rows.isEmpty { return [nil] }
            var records: [Record] = []
            for row in rows {
                var reader = RowReader(row)
                if let record = try liveRecord(&reader) { records.append(record) }
            }
            return [records]
        }
        let rows = try await connection.rows(Prepared.LookupMany(requests), logger: logger)
        var answers = [[Record]?](repeating: nil, count: requests.count)
        for row in rows {
            var reader = RowReader(row)
            let index = Int(try reader.next(Int32.self))
            guard answers.indices.contains(index) else {
                throw StratusError(.internalError, "a lookup row names request \(index) of \(requests.count)")
            }
            var records = answers[index] ?? []
            if let record = try liveRecord(&reader) { records.append(record) }
            answers[index] = records
        }
        return answers
    }

    /// The record in the rest of a lookup row; `nil` when there is none (the zone matched, no
    /// record did) or it is a tombstone.
    private static func liveRecord(_ reader: inout RowReader) throws -> Record? {
        var probe = reader
        guard try probe.nextCell().bytes != nil else { return nil }
        let record = try RecordStore.storedRecord(&reader)
        return record.deleted ? nil : record
    }
}
