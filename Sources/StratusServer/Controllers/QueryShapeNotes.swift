import Foundation
import Logging
import StratusCore
import StratusStore
import Synchronization

/// The fields development queries filter and sort on, noted so that a deploy can warn of a
/// production query no index would serve (written off the request path, a second's worth at a
/// time).
final class QueryShapeNotes: Sendable {
    struct State {
        var seen: [SchemaStore.QueryShape: Date] = [:]
        var pending: [SchemaStore.QueryShape] = []
        var flushScheduled = false
        /// Flushes writing shapes they have taken off `pending`.
        var writing = 0
    }

    let schemas: SchemaStore
    let logger: Logger
    let state = Mutex(State())

    init(schemas: SchemaStore, logger: Logger) {
        self.schemas = schemas
        self.logger = logger
    }

    /// Remembers, at most once an hour per process, the fields a development query filtered or sorted on.
    func note(_ query: Query, db: DatabaseRef) {
        guard db.environment == .development else { return }
        var fields: [(String, String)] = []
        for filter in query.filters { if case .field(let name) = filter.target { fields.append((name, filter.comparator.isRange ? "range" : "filter")) } }
        for sort in query.sorts { if case .field(let name) = sort.target { fields.append((name, "sort")) } }
        let now = Date()
        // Written off the request path, a second's worth at a time: with thousands of containers
        // nearly every query would otherwise wait for its own durable commit.
        let schedule = self.state.withLock { state -> Bool in
            if state.seen.count > 100_000 { state.seen.removeAll() }
            for (field, usage) in fields {
                let shape = SchemaStore.QueryShape(containerID: db.containerID, recordType: query.recordType, field: field, usage: usage)
                if let last = state.seen[shape], now.timeIntervalSince(last) < 3600 { continue }
                state.seen[shape] = now
                state.pending.append(shape)
            }
            guard !state.pending.isEmpty, !state.flushScheduled else { return false }
            state.flushScheduled = true
            return true
        }
        if schedule {
            // Detached: a task-local pooled connection of the request must not outlive it here.
            Task.detached {
                try? await Task.sleep(for: .seconds(1))
                await self.flush()
            }
        }
    }

    /// Writes the query shapes noted so far.
    func flush() async {
        let pending = state.withLock { state -> [SchemaStore.QueryShape] in
            defer { state.pending.removeAll(); state.flushScheduled = false; state.writing += 1 }
            return state.pending
        }
        do {
            if !pending.isEmpty { try await schemas.recordQueryShapes(pending) }
        } catch {
            logger.warning("could not record development query shapes", metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
        state.withLock { $0.writing -= 1 }
    }

    /// Before a deploy plan reads the query shapes: writes the pending ones, and waits (up to
    /// 5 s) for a write already under way, which took its shapes off the pending list before
    /// they were stored.
    func settle() async {
        await flush()
        let deadline = ContinuousClock.now + .seconds(5)
        while state.withLock({ $0.writing > 0 }), ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }
}
