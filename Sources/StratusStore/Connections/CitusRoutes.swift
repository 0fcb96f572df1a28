import Logging
import PostgresNIO
import StratusCore
import Synchronization

/// On a Citus coordinator: a connection pool per worker, and which worker holds each container's
/// shards, so that a request's statements go straight to the worker that holds its container
/// instead of through the coordinator (which plans each statement, deparses it and relays it).
/// Citus keeps its metadata on every node, so a worker runs a statement on a distributed table
/// as the coordinator would: on its own shard, or, where the route is stale (the container's
/// shards moved), relayed to the node that now holds them. A stale route is slower, not wrong.
///
/// Routes are read from the coordinator's placement metadata on first use, kept for
/// `lifetime`, and forgotten when a routed statement fails. A worker's pool is made the first time
/// a route names it (a worker added later is used without a restart), with the coordinator's
/// login, database, TLS and limits, and PostgreSQL's own choice of plan (`plan_cache_mode =
/// auto`): a single-table statement, which Citus routes by its container parameter, gets a
/// generic plan after five executions (Citus costs its plans at zero) and Citus then keeps its
/// plan of the shard's query too; a join, which Citus cannot plan without the container's value,
/// is priced out of a generic plan by Citus and planned on every execution, as on the coordinator.
final class CitusRoutes: Sendable {
    /// A worker, as the placement metadata names it.
    struct Node: Hashable, Sendable {
        var host: String
        var port: Int
    }

    private struct Route {
        /// nil: the container's shards are on the coordinator (or nowhere yet): no worker to use.
        var worker: CitusWorker?
        var until: ContinuousClock.Instant
    }

    private struct State {
        var pools: [Node: CitusWorker] = [:]
        var routes: [ContainerID: Route] = [:]
        /// Every active worker, as last read (`workers`), and until when that is used.
        var workers: (nodes: [Node], until: ContinuousClock.Instant)?
    }

    /// How long a route is used before it is read again (a shard move is seen at the latest then,
    /// or at once when a statement on the old worker fails).
    static let lifetime: Duration = .seconds(30)
    /// The `application_name` of the workers' pooled sessions.
    static let applicationName = "stratus routed"
    /// Routes kept at most; all are forgotten at once when there are more.
    static let capacity = 100_000

    private let state = Mutex(State())
    private let coordinator: DatabaseConfiguration
    private let logger: Logger
    /// Pools made since the coordinator's `Database.run` began or before it: it runs each.
    let madePools: AsyncStream<Database>
    private let made: AsyncStream<Database>.Continuation

    init(coordinator: DatabaseConfiguration, logger: Logger) {
        self.coordinator = coordinator
        self.logger = logger
        (madePools, made) = AsyncStream.makeStream(of: Database.self)
    }

    /// The worker holding `container`'s shards, or nil to stay on the coordinator.
    /// Reads the route through `coordinatorDatabase` when it has none, or an expired one.
    func worker(for container: ContainerID, coordinatorDatabase: Database) async throws -> CitusWorker? {
        let now = ContinuousClock.now
        if let route = state.withLock({ $0.routes[container] }), route.until > now { return route.worker }
        let rows = try await coordinatorDatabase.withConnection { connection in
            try await connection.rows("""
                SELECT n.nodename, n.nodeport, n.groupid = 0
                FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid
                WHERE p.shardid = get_shard_id_for_distribution_column('records', \(container.rawValue)::bigint)
                  AND n.isactive AND n.noderole = 'primary'
                ORDER BY n.nodeid LIMIT 1
                """, logger: logger)
        }
        var node: Node?
        if let row = rows.first {
            let (host, port, onCoordinator) = try row.decode((String, Int32, Bool).self)
            if !onCoordinator { node = Node(host: host, port: Int(port)) }
        }
        return state.withLock { state in
            if state.routes.count >= Self.capacity { state.routes.removeAll(keepingCapacity: true) }
            let holder = node.map { self.worker(at: $0, in: &state) }
            state.routes[container] = Route(worker: holder, until: now + Self.lifetime)
            return holder
        }
    }

    /// Every active worker with its pool (background work that concerns each worker: the
    /// statistics keeper). The list is read through `coordinatorDatabase` every `lifetime`.
    func workers(coordinatorDatabase: Database) async throws -> [CitusWorker] {
        let now = ContinuousClock.now
        if let known = state.withLock({ $0.workers }), known.until > now {
            return state.withLock { state in known.nodes.map { worker(at: $0, in: &state) } }
        }
        let rows = try await coordinatorDatabase.withConnection { connection in
            try await connection.rows("""
                SELECT nodename, nodeport FROM pg_dist_node
                WHERE groupid <> 0 AND isactive AND noderole = 'primary' ORDER BY nodeid
                """, logger: logger)
        }
        let nodes = try rows.map { row in
            let (host, port) = try row.decode((String, Int32).self)
            return Node(host: host, port: Int(port))
        }
        return state.withLock { state in
            state.workers = (nodes, now + Self.lifetime)
            return nodes.map { worker(at: $0, in: &state) }
        }
    }

    /// The worker at `node`, its pool made if it has none yet.
    private func worker(at node: Node, in state: inout State) -> CitusWorker {
        if let worker = state.pools[node] { return worker }
        var configuration = coordinator
        configuration.host = node.host
        configuration.port = node.port
        configuration.planCacheMode = "auto"
        configuration.citusCoordinator = false
        configuration.applicationName = Self.applicationName
        let worker = CitusWorker(node: node, pool: Database(configuration: configuration, logger: logger), logger: logger)
        state.pools[node] = worker
        made.yield(worker.pool)
        logger.notice("the Citus worker \(node.host):\(node.port) is used directly: lookups, queries and request counts of the containers it holds, its statistics")
        return worker
    }

    /// Forgets `container`'s route (a statement sent along it failed): the next request reads it again.
    func forget(_ container: ContainerID) {
        _ = state.withLock { $0.routes.removeValue(forKey: container) }
    }
}

/// A Citus worker used directly: its pool, and the plans its sessions keep.
///
/// A statement Citus routes to a shard on the node it runs on keeps its plan of the shard's query
/// inside the statement's cached plan (Citus's local plan cache), and PostgreSQL throws that away
/// only when the distributed table itself changes, never when the shard is analyzed: planned on a
/// young shard's statistics, a lookup would keep scanning the zone for ever. So when the worker's
/// shards have been analyzed since (`sawAnalyses`, read by the statistics keeper, which counts
/// autovacuum's analyzes and every server's), each pooled session drops its cached plans
/// (`DISCARD PLANS`, the prepared statements stay) the next time it is leased.
final class CitusWorker: Sendable {
    let node: CitusRoutes.Node
    let pool: Database
    private let logger: Logger
    /// Raised whenever the worker's shards were analyzed; a session that saw a lower one drops its plans.
    private let generation = Atomic<Int>(0)
    private let seen = Mutex<[ObjectIdentifier: (connection: PostgresConnection, generation: Int)]>([:])
    /// The analyzes of the worker's shards counted at the last check.
    private let analyses = Mutex<Int64?>(nil)

    init(node: CitusRoutes.Node, pool: Database, logger: Logger) {
        self.node = node
        self.pool = pool
        self.logger = logger
    }

    /// Runs `body` with a pooled session of the worker whose plans postdate the last analyze seen.
    func withConnection<T: Sendable>(_ body: (PostgresConnection) async throws -> T) async throws -> T {
        try await pool.withConnection { connection in
            let current = generation.load(ordering: .relaxed)
            let key = ObjectIdentifier(connection)
            let stale = seen.withLock { seen in
                guard let entry = seen[key], entry.connection === connection else { return true }
                return entry.generation < current
            }
            if stale {
                try await connection.statement("DISCARD PLANS", logger: logger)
                seen.withLock { seen in
                    // Sessions since closed are forgotten once there are many more than the pool holds.
                    if seen.count > 4 * max(pool.configuration.maximumConnections, 16) { seen = seen.filter { !$0.value.connection.isClosed } }
                    seen[key] = (connection, current)
                }
            }
            return try await body(connection)
        }
    }

    /// The keeper's count of the worker's shards' analyzes (`analyze_count + autoanalyze_count`):
    /// when it changed, every session's plans are dropped before its next use.
    func sawAnalyses(_ count: Int64) {
        let changed = analyses.withLock { known in
            defer { known = count }
            return known != count
        }
        if changed { generation.add(1, ordering: .relaxed) }
    }
}
