import Logging
import PostgresNIO
import StratusCore
import StratusStore
import Synchronization

/// Reads that may lag (`records/query`, custom zones' change feeds) served by PostgreSQL streaming
/// replicas (`STRATUS_REPLICA_URLS`), never older than what the client has seen acknowledged.
///
/// Read-your-writes, across every server process: a read first asks the primary for its current
/// WAL position (`pg_current_wal_lsn()`, a statement that touches no table). Every commit
/// acknowledged before the read arrived lies at or before it, whichever process made it. The read
/// goes to a replica whose replayed position, polled every few milliseconds and only ever rising,
/// has reached it; when none has (a replica lags, or is down), to the primary. So a lagging replica
/// only costs the primary the reads it cannot take; it never serves a state older than the
/// client's own last write, or anyone's acknowledged one.
final class ReplicaReads: Sendable {
    final class Replica: Sendable {
        let url: String
        let database: Database
        let store: RecordStore
        /// The WAL position the replica has replayed to, as last polled (bytes from 0/0); 0 until known.
        let replayed = Atomic<Int64>(0)

        init(url: String, database: Database, logger: Logger) {
            self.url = url
            self.database = database
            self.store = RecordStore(database: database, logger: logger)
        }
    }

    let primary: Database
    let replicas: [Replica]
    let logger: Logger
    /// Reads served by a replica, and reads that wanted one but went to the primary.
    let servedByReplica = Atomic<Int>(0)
    let servedByPrimary = Atomic<Int>(0)
    /// The primary's WAL position as last read by a request (`/metrics`: each replica's lag behind it).
    let primaryPosition = Atomic<Int64>(0)
    private let next = Atomic<Int>(0)
    /// How often each replica's replayed position is read.
    static let pollInterval: Duration = .milliseconds(5)

    init(primary: Database, urls: [String], logger: Logger) throws(StratusError) {
        self.primary = primary
        self.logger = logger
        var replicas: [Replica] = []
        for url in urls {
            var configuration = try DatabaseConfiguration(url: url)
            configuration.maximumConnections = 8
            configuration.lockTimeout = primary.configuration.lockTimeout
            configuration.statementTimeout = primary.configuration.statementTimeout
            replicas.append(Replica(url: url, database: Database(configuration: configuration, logger: logger), logger: logger))
        }
        self.replicas = replicas
    }

    /// Keeps the replicas' pools open and their replayed positions current, until cancelled.
    func run() async {
        await withDiscardingTaskGroup { group in
            for replica in replicas {
                group.addTask { await replica.database.run() }
                group.addTask { await self.poll(replica) }
            }
        }
    }

    private func poll(_ replica: Replica) async {
        var warned = false
        while !Task.isCancelled {
            do {
                let position = try await replica.database.replayedWALPosition()
                // Only ever rises: a replica answering from an older state (restarted behind a
                // newer one) is simply not used until it catches up.
                replica.replayed.max(position, ordering: .sequentiallyConsistent)
                warned = false
            } catch {
                if !warned {
                    logger.warning("a read replica cannot be reached; reads go to the primary until it answers",
                                   metadata: ["stratus.replica": "\(Self.redacted(replica.url))", "stratus.error": "\(String(reflecting: error))"])
                    warned = true
                }
                try? await Task.sleep(for: .seconds(1))
            }
            try? await Task.sleep(for: Self.pollInterval)
        }
    }

    /// The store to read from: a replica that has replayed everything acknowledged so far, or
    /// `nil` for the primary.
    func store() async -> RecordStore? {
        guard !replicas.isEmpty else { return nil }
        do {
            let needed = try await primary.currentWALPosition()
            primaryPosition.max(needed, ordering: .relaxed)
            let start = next.add(1, ordering: .relaxed).newValue
            for offset in 0..<replicas.count {
                let replica = replicas[(start + offset) % replicas.count]
                if replica.replayed.load(ordering: .sequentiallyConsistent) >= needed {
                    servedByReplica.add(1, ordering: .relaxed)
                    return replica.store
                }
            }
        } catch {
            // Asking the primary failed: the read goes there and meets the same error.
        }
        servedByPrimary.add(1, ordering: .relaxed)
        return nil
    }

    /// Runs `read` on a caught-up replica, or on `primary` when none is (or the replica fails).
    func read<T: Sendable>(primary store: RecordStore, _ read: (RecordStore) async throws -> T) async throws -> T {
        guard let replica = await self.store() else { return try await read(store) }
        do {
            return try await read(replica)
        } catch let error as StratusError where error.code != .tryAgainLater && error.code != .internalError {
            throw error
        } catch {
            logger.warning("a read failed on a replica; the primary answers it", metadata: ["stratus.error": "\(String(reflecting: error))"])
            servedByPrimary.add(1, ordering: .relaxed)
            return try await read(store)
        }
    }

    /// A URL without its password, for logs.
    static func redacted(_ url: String) -> String {
        guard let at = url.firstIndex(of: "@"), let scheme = url.range(of: "://") else { return url }
        return String(url[..<scheme.upperBound]) + "…" + String(url[at...])
    }
}
