import PostgresNIO
import StratusCore

/// What a Citus coordinator that routes to its workers (`CitusRoutes`) adds to `Database`:
/// statements sent to the worker holding a container, and background writes of many containers
/// made one transaction per worker.
extension Database {
    /// Runs `body` with a pooled connection of the Citus worker holding `container`'s shards
    /// (`CitusRoutes`), outside a transaction: for single-table statements that name the
    /// container. Elsewhere (one server, routing off, a container whose shards are on the
    /// coordinator) and inside a transaction or connection the task holds, it is
    /// `withConnection`. A failure forgets the route, so the next request reads it again.
    public func withConnection<T: Sendable>(routedTo container: ContainerID, _ body: (PostgresConnection) async throws -> T) async throws -> T {
        guard held == nil, let citusRoutes else { return try await withConnection(body) }
        do {
            guard let worker = try await citusRoutes.worker(for: container, coordinatorDatabase: self) else {
                return try await withConnection(body)
            }
            return try await worker.withConnection(body)
        } catch {
            citusRoutes.forget(container)
            throw Database.map(error)
        }
    }

    /// Background writes of rows of many containers (request counts, the request log), one
    /// transaction per place their containers are held. On a Citus coordinator routing to
    /// workers (`CitusRoutes`), `body` runs once per worker, on that worker, with the positions in
    /// `containers` of the rows it holds (`routed` true: Citus plans each statement for that
    /// worker's shards alone, so it commits there in one phase; a statement touching many
    /// containers sent through the coordinator is repartitioned across every worker). A worker
    /// that fails leaves the others' rows saved: ``RowsUnsaved`` names the positions not saved.
    /// Elsewhere (one server, routing off, inside a transaction or connection the task holds),
    /// `body` runs once with every position and `routed` false.
    func transactionPerCitusWorker(_ containers: [ContainerID],
                                   _ body: (_ positions: [Int], _ routed: Bool, PostgresConnection) async throws -> Void) async throws {
        guard !containers.isEmpty else { return }
        guard held == nil, let citusRoutes else {
            try await transaction { try await body(Array(containers.indices), false, $0) }
            return
        }
        var groups: [(worker: CitusWorker?, positions: [Int])] = []
        for (position, container) in containers.enumerated() {
            let worker = try await citusRoutes.worker(for: container, coordinatorDatabase: self)
            if let group = groups.firstIndex(where: { $0.worker === worker }) {
                groups[group].positions.append(position)
            } else {
                groups.append((worker, [position]))
            }
        }
        var unsaved: [Int] = []
        var failure: (any Error)?
        for (worker, positions) in groups {
            do {
                if let worker {
                    try await worker.withConnection { _ in try await worker.pool.transaction { try await body(positions, true, $0) } }
                } else {
                    // Containers whose shards are on the coordinator: there.
                    try await transaction { try await body(positions, true, $0) }
                }
            } catch {
                for position in positions { citusRoutes.forget(containers[position]) }
                unsaved += positions
                failure = failure ?? error
            }
        }
        if let failure { throw RowsUnsaved(positions: unsaved.sorted(), underlying: Database.map(failure)) }
    }
}
