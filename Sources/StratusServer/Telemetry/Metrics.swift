import Foundation
import StratusCore
import StratusStore
import Synchronization

/// The server's own counters, served as Prometheus text at `GET /metrics`.
///
/// Labels are bounded: a request is counted by its route family (the data API's operation, such
/// as `records/lookup`; the sign-in, management, console, courier and asset routes each as one
/// family), its environment and its status class, never by container, user or record. Every
/// request through `StratusHTTPChannel` is recorded once answered; errors are counted by their
/// `serverErrorCode` where they are rendered (`ErrorMiddleware`). The lock is held for a
/// dictionary update per request.
public final class Metrics: Sendable {
    /// Upper bounds of the latency histogram's buckets, in seconds.
    static let buckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    struct RequestKey: Hashable {
        var family: String
        var environment: String
        var status: String
    }

    struct Histogram {
        var counts = [Int](repeating: 0, count: Metrics.buckets.count)
        var sum = 0.0
        var count = 0

        mutating func observe(_ seconds: Double) {
            if let index = Metrics.buckets.firstIndex(where: { seconds <= $0 }) { counts[index] += 1 }
            sum += seconds
            count += 1
        }
    }

    struct State {
        var requests: [RequestKey: Int] = [:]
        var latency: [String: Histogram] = [:]
        var errors: [String: Int] = [:]
    }

    private let state = Mutex(State())
    let started = Date()

    /// What the request the current task answers ended with, beyond its status: the error
    /// dictionary's code (`StratusError.response`). Set per request by `StratusHTTPChannel`.
    final class Outcome: @unchecked Sendable {
        var code: String?
    }
    @TaskLocal static var outcome: Outcome?

    /// The data API's operation groups counted by name (`records/lookup`, …).
    private static let operationGroups: Set<Substring> = ["records", "zones", "changes", "subscriptions", "users", "assets", "tokens"]

    public init() {}

    /// The route family and environment of a request path: bounded sets whatever the path.
    static func family(of path: Substring) -> (family: String, environment: String) {
        let parts = path.split(separator: "/", maxSplits: 8, omittingEmptySubsequences: true)
        guard let first = parts.first else { return ("other", "none") }
        func environment(_ index: Int) -> String {
            guard index < parts.count else { return "none" }
            switch parts[index] {
            case "development": return "development"
            case "production": return "production"
            default: return "none"
            }
        }
        switch first {
        case "database":
            // /database/1/{container}/{environment}/{database}/{group}/{verb}
            guard parts.count >= 7, operationGroups.contains(parts[5]) else { return ("database:other", environment(3)) }
            let verb = parts[6].prefix { $0 != "?" }
            guard verb.count <= 24, verb.allSatisfy({ $0.isLetter }) else { return ("database:other", environment(3)) }
            return ("\(parts[5])/\(verb)", environment(3))
        case "device":
            return (parts.count >= 6 && parts[5] == "courier" ? "courier" : "device", environment(3))
        case "auth": return ("auth", environment(3))
        case "management": return ("management", "none")
        case "console": return ("console", "none")
        case "assets": return ("assets", "none")
        case "health": return ("health", "none")
        case "metrics": return ("metrics", "none")
        case "openapi.json": return ("openapi", "none")
        case "share": return ("share", "none")
        default: return ("other", "none")
        }
    }

    /// Counts one answered request, and its error code if it has one.
    func request(path: Substring, status: Int, seconds: Double, errorCode: String?) {
        let (family, environment) = Self.family(of: path)
        let key = RequestKey(family: family, environment: environment, status: "\(min(max(status / 100, 1), 5))xx")
        state.withLock { state in
            state.requests[key, default: 0] += 1
            state.latency[family, default: Histogram()].observe(seconds)
            if let errorCode { state.errors[errorCode, default: 0] += 1 }
        }
    }

    /// What the server holds beside its counters, read when the metrics are scraped.
    struct Gauges {
        var pool: PoolUsage.Snapshot
        var statisticsChecks = 0
        var statisticsAnalyses = 0
        var notificationsHandedOver = 0
        var notificationsQueued = 0
        /// Rows in the notification queue (PostgreSQL's live-row estimate), index builds running
        /// and the entries they still have to write; nil when the database did not answer.
        var queueEstimate: Int64?
        var indexBuilds: Int64?
        var indexEntriesLeft: Int64?
        var replicaReads = 0
        var replicaReadsOnPrimary = 0
        /// Each replica's lag behind the primary in WAL bytes, by its position in --replica-urls.
        var replicaLag: [Int64] = []
    }

    /// The exposition: Prometheus text format 0.0.4.
    func render(_ gauges: Gauges) -> String {
        let pool = gauges.pool
        let state = state.withLock { $0 }
        var out = ""
        func family(_ name: String, _ type: String, _ help: String) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
        }
        func number(_ value: Double) -> String {
            value == value.rounded() && abs(value) < 1e15 ? String(Int(value)) : String(value)
        }
        family("stratus_requests_total", "counter", "Requests answered, by route family, environment and status class.")
        for (key, count) in state.requests.sorted(by: { ($0.key.family, $0.key.environment, $0.key.status) < ($1.key.family, $1.key.environment, $1.key.status) }) {
            out += "stratus_requests_total{family=\"\(key.family)\",environment=\"\(key.environment)\",status=\"\(key.status)\"} \(count)\n"
        }
        family("stratus_request_duration_seconds", "histogram", "Time from a request's arrival to its answer, by route family.")
        for (name, histogram) in state.latency.sorted(by: { $0.key < $1.key }) {
            var cumulative = 0
            for (index, bound) in Self.buckets.enumerated() {
                cumulative += histogram.counts[index]
                out += "stratus_request_duration_seconds_bucket{family=\"\(name)\",le=\"\(number(bound))\"} \(cumulative)\n"
            }
            out += "stratus_request_duration_seconds_bucket{family=\"\(name)\",le=\"+Inf\"} \(histogram.count)\n"
            out += "stratus_request_duration_seconds_sum{family=\"\(name)\"} \(histogram.sum)\n"
            out += "stratus_request_duration_seconds_count{family=\"\(name)\"} \(histogram.count)\n"
        }
        family("stratus_errors_total", "counter", "Error dictionaries answered, by serverErrorCode (THROTTLED and QUOTA_EXCEEDED are the rate-limit and quota refusals).")
        for (code, count) in state.errors.sorted(by: { $0.key < $1.key }) {
            out += "stratus_errors_total{code=\"\(code)\"} \(count)\n"
        }
        family("stratus_database_connections_in_use", "gauge", "PostgreSQL connections of the pool leased now.")
        out += "stratus_database_connections_in_use \(pool.inUse)\n"
        family("stratus_database_connections_waiting", "gauge", "Callers waiting for a pooled PostgreSQL connection now.")
        out += "stratus_database_connections_waiting \(pool.waiting)\n"
        family("stratus_database_leases_total", "counter", "Connections leased from the pool.")
        out += "stratus_database_leases_total \(pool.leases)\n"
        family("stratus_database_lease_wait_seconds_total", "counter", "Time callers spent waiting for a pooled connection.")
        out += "stratus_database_lease_wait_seconds_total \(pool.waitSeconds)\n"
        family("stratus_statistics_checks_total", "counter", "Checks of the planner statistics by this process's statistics keeper.")
        out += "stratus_statistics_checks_total \(gauges.statisticsChecks)\n"
        family("stratus_statistics_analyses_total", "counter", "Tables (on Citus, shards) the statistics keeper analyzed.")
        out += "stratus_statistics_analyses_total \(gauges.statisticsAnalyses)\n"
        family("stratus_notifications_total", "counter", "Notifications this process made for subscriptions: handed straight to a waiting poll, or queued.")
        out += "stratus_notifications_total{path=\"handed_over\"} \(gauges.notificationsHandedOver)\n"
        out += "stratus_notifications_total{path=\"queued\"} \(gauges.notificationsQueued)\n"
        if let queue = gauges.queueEstimate {
            family("stratus_notification_queue_rows", "gauge", "Notifications waiting in the queue (PostgreSQL's estimate of the table's live rows).")
            out += "stratus_notification_queue_rows \(queue)\n"
        }
        if let builds = gauges.indexBuilds, let left = gauges.indexEntriesLeft {
            family("stratus_index_builds_running", "gauge", "Index builds of deployed schemas not finished yet.")
            out += "stratus_index_builds_running \(builds)\n"
            family("stratus_index_build_records_left", "gauge", "Records the running index builds still have to index.")
            out += "stratus_index_build_records_left \(left)\n"
        }
        family("stratus_replica_reads_total", "counter", "Reads that could go to a read replica, by where they went.")
        out += "stratus_replica_reads_total{served_by=\"replica\"} \(gauges.replicaReads)\n"
        out += "stratus_replica_reads_total{served_by=\"primary\"} \(gauges.replicaReadsOnPrimary)\n"
        if !gauges.replicaLag.isEmpty {
            family("stratus_replica_lag_bytes", "gauge", "Each read replica's lag behind the primary's last known WAL position, in bytes.")
            for (index, lag) in gauges.replicaLag.enumerated() {
                out += "stratus_replica_lag_bytes{replica=\"\(index + 1)\"} \(lag)\n"
            }
        }
        family("stratus_start_time_seconds", "gauge", "When this server process started (Unix time).")
        out += "stratus_start_time_seconds \(Int(started.timeIntervalSince1970))\n"
        return out
    }
}
