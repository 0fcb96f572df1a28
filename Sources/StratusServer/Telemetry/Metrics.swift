import Foundation
import StratusCore
import StratusStore
import Synchronization

/// The server's own counters, served as Prometheus text at `GET /metrics`.
///
/// Labels are bounded: a request is counted by its route family (the data API's operation, such
/// as `records/lookup`; the sign-in, management, console, courier and asset routes each as one
/// family), its environment and its status class, never by container, user or record. Every
/// request through `StratusHTTPChannel` is counted in flight when it arrives and recorded once
/// answered; errors are counted by their `serverErrorCode` (`StratusError.response`). The lock is
/// taken twice per request, for an array update or three each time; the path's family is read
/// from its bytes without allocating.
public final class Metrics: Sendable {
    /// Upper bounds of the latency histogram's buckets, in seconds.
    static let buckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

    /// The route families: the data API's operations by name, then the other routes.
    static let families: [String] = DataOperation.allCases.map(\.family).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } } + [
        "database:other", "courier", "device", "auth", "management", "console", "assets", "share", "openapi", "health", "metrics", "other",
    ]
    /// The data API's operations (the first of `families`), as bytes to match paths against.
    private static let operations: [[UInt8]] = families.prefix { !$0.hasPrefix("database:") }.map { Array($0.utf8) }
    static let environments = ["development", "production", "none"]
    static let statusClasses = ["1xx", "2xx", "3xx", "4xx", "5xx"]

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

    /// Counters in flat arrays indexed by family, environment and status class: no hashing and
    /// no allocation per request.
    struct State {
        var requests = [Int](repeating: 0, count: Metrics.families.count * Metrics.environments.count * Metrics.statusClasses.count)
        var latency = [Histogram](repeating: Histogram(), count: Metrics.families.count)
        var errors: [String: Int] = [:]
        /// From a notification's making (its write) to its answer to a web courier poll or stream.
        var notificationDelivery = Histogram()
        /// Pushes this process finished with, by "provider outcome".
        var pushes: [String: Int] = [:]
        /// From a push's making (the write's commit) to the provider's acceptance.
        var pushDelivery = Histogram()
        /// Requests being answered right now, by route family.
        var inFlight = [Int](repeating: 0, count: Metrics.families.count)
    }

    private let state = Mutex(State())
    let started = Date()

    public init() {}

    static func index(of family: String) -> Int { families.firstIndex(of: family) ?? families.count - 1 }

    /// The route family and environment of a request path (indices into `families` and
    /// `environments`), read from its bytes: bounded sets whatever the path.
    static func family(of path: Substring) -> (family: Int, environment: Int) {
        let bytes = path.utf8
        /// Segment `number` (from 0) of the path, without its slashes; empty past the end.
        func segment(_ number: Int) -> Substring.UTF8View {
            var begin = bytes.startIndex
            var seen = -1
            while begin < bytes.endIndex {
                if bytes[begin] == UInt8(ascii: "/") {
                    seen += 1
                    if seen == number { break }
                }
                begin = bytes.index(after: begin)
            }
            guard begin < bytes.endIndex else { return bytes[bytes.endIndex...] }
            let start = bytes.index(after: begin)
            var end = start
            while end < bytes.endIndex, bytes[end] != UInt8(ascii: "/") { end = bytes.index(after: end) }
            return bytes[start..<end]
        }
        func environment(_ number: Int) -> Int {
            let text = segment(number)
            if text.elementsEqual("development".utf8) { return 0 }
            if text.elementsEqual("production".utf8) { return 1 }
            return 2
        }
        let first = segment(0)
        if first.elementsEqual("database".utf8) {
            // /database/1/{container}/{environment}/{database}/{group}/{verb}
            let environmentIndex = environment(3)
            let group = segment(5), verb = segment(6)
            for (position, operation) in operations.enumerated() where operation.count == group.count + 1 + verb.count {
                if operation.prefix(group.count).elementsEqual(group), operation[group.count] == UInt8(ascii: "/"),
                   operation.suffix(verb.count).elementsEqual(verb) {
                    return (position, environmentIndex)
                }
            }
            return (index(of: "database:other"), environmentIndex)
        }
        if first.elementsEqual("device".utf8) {
            return (index(of: segment(4).elementsEqual("courier".utf8) ? "courier" : "device"), environment(3))
        }
        if first.elementsEqual("auth".utf8) { return (index(of: "auth"), environment(3)) }
        for name in ["management", "console", "assets", "share", "health", "metrics"] where first.elementsEqual(name.utf8) {
            return (index(of: name), 2)
        }
        if first.elementsEqual("openapi.json".utf8) { return (index(of: "openapi"), 2) }
        return (index(of: "other"), 2)
    }

    /// A request's operation for the request log: its route family, or for another data-API
    /// path its last two segments (`tokens/create`).
    static func operation(family: Int, path: Substring) -> String {
        let name = families[family]
        guard name == "database:other" else { return name }
        let segments = path.split(separator: "/", omittingEmptySubsequences: false)
        return segments.count >= 7 ? segments[5...].joined(separator: "/").prefix(64).description : name
    }

    /// Counts a request as being answered (`stratus_requests_in_flight`); returns its route family
    /// and environment, for `request(_:status:seconds:errorCode:)` when it is answered.
    func begin(path: Substring) -> (family: Int, environment: Int) {
        let route = Self.family(of: path)
        state.withLock { $0.inFlight[route.family] += 1 }
        return route
    }

    /// Counts one answered request (begun with `begin(path:)`), and its error code if it has one.
    func request(_ route: (family: Int, environment: Int), status: Int, seconds: Double, errorCode: String?) {
        let statusClass = min(max(status / 100, 1), 5) - 1
        let slot = (route.family * Self.environments.count + route.environment) * Self.statusClasses.count + statusClass
        state.withLock { state in
            state.inFlight[route.family] -= 1
            state.requests[slot] += 1
            state.latency[route.family].observe(seconds)
            if let errorCode { state.errors[errorCode, default: 0] += 1 }
        }
    }

    /// The requests being answered right now, by route family (those with any).
    var inFlight: [(family: String, count: Int)] {
        let counts = state.withLock { $0.inFlight }
        return zip(Self.families, counts).filter { $0.1 > 0 }.map { ($0.0, $0.1) }
    }

    /// Counts a notification sent to a web courier client, made at `made`.
    func notificationDelivered(made: Date) {
        let seconds = max(0, Date().timeIntervalSince(made))
        state.withLock { $0.notificationDelivery.observe(seconds) }
    }

    /// Counts a push this process finished with (`outcome`: sent, retried, device_gone, refused,
    /// expired); `made`: when it was queued, for a push the provider accepted.
    func pushFinished(provider: String, outcome: String, made: Date?) {
        state.withLock { state in
            state.pushes["\(provider) \(outcome)", default: 0] += 1
            if let made { state.pushDelivery.observe(max(0, Date().timeIntervalSince(made))) }
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
        /// Pushes waiting to be sent (every container).
        var pushQueue: Int64?
        var indexBuilds: Int64?
        var indexEntriesLeft: Int64?
        var replicaReads = 0
        var replicaReadsOnPrimary = 0
        /// The request log's rows: waiting to be written, written, and dropped (too many waiting).
        var requestLogPending = 0
        var requestLogWritten = 0
        var requestLogDropped = 0
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
        for (familyIndex, name) in Self.families.enumerated() {
            for (environmentIndex, environment) in Self.environments.enumerated() {
                for (statusIndex, status) in Self.statusClasses.enumerated() {
                    let count = state.requests[(familyIndex * Self.environments.count + environmentIndex) * Self.statusClasses.count + statusIndex]
                    if count > 0 { out += "stratus_requests_total{family=\"\(name)\",environment=\"\(environment)\",status=\"\(status)\"} \(count)\n" }
                }
            }
        }
        /// A histogram's samples; `labels` is empty or ends with a comma.
        func histogram(_ name: String, _ histogram: Histogram, labels: String) {
            var cumulative = 0
            for (index, bound) in Self.buckets.enumerated() {
                cumulative += histogram.counts[index]
                out += "\(name)_bucket{\(labels)le=\"\(number(bound))\"} \(cumulative)\n"
            }
            let plain = labels.isEmpty ? "" : "{" + labels.dropLast() + "}"
            out += "\(name)_bucket{\(labels)le=\"+Inf\"} \(histogram.count)\n"
            out += "\(name)_sum\(plain) \(histogram.sum)\n"
            out += "\(name)_count\(plain) \(histogram.count)\n"
        }
        family("stratus_request_duration_seconds", "histogram", "Time from a request's arrival to its answer, by route family.")
        for (familyIndex, name) in Self.families.enumerated() where state.latency[familyIndex].count > 0 {
            histogram("stratus_request_duration_seconds", state.latency[familyIndex], labels: "family=\"\(name)\",")
        }
        family("stratus_requests_in_flight", "gauge", "Requests being answered right now, by route family (each family once it has had a request).")
        for (familyIndex, name) in Self.families.enumerated() where state.latency[familyIndex].count > 0 || state.inFlight[familyIndex] > 0 {
            out += "stratus_requests_in_flight{family=\"\(name)\"} \(state.inFlight[familyIndex])\n"
        }
        family("stratus_errors_total", "counter", "Error dictionaries answered, by serverErrorCode (THROTTLED and QUOTA_EXCEEDED are the rate-limit and quota refusals).")
        for (code, count) in state.errors.sorted(by: { $0.key < $1.key }) {
            out += "stratus_errors_total{code=\"\(code)\"} \(count)\n"
        }
        /// A metric of one sample, without labels.
        func single(_ name: String, _ type: String, _ help: String, _ value: any CustomStringConvertible) {
            family(name, type, help)
            out += "\(name) \(value)\n"
        }
        single("stratus_database_connections_in_use", "gauge", "PostgreSQL connections of the pool leased now.", pool.inUse)
        single("stratus_database_connections_waiting", "gauge", "Callers waiting for a pooled PostgreSQL connection now.", pool.waiting)
        single("stratus_database_leases_total", "counter", "Connections leased from the pool.", pool.leases)
        single("stratus_database_lease_wait_seconds_total", "counter", "Time callers spent waiting for a pooled connection.", pool.waitSeconds)
        single("stratus_statistics_checks_total", "counter", "Checks of the planner statistics by this process's statistics keeper.", gauges.statisticsChecks)
        single("stratus_statistics_analyses_total", "counter", "Tables (on Citus, shards) the statistics keeper analyzed.", gauges.statisticsAnalyses)
        family("stratus_notifications_total", "counter", "Notifications this process made for subscriptions: handed straight to a waiting poll, or queued.")
        out += "stratus_notifications_total{path=\"handed_over\"} \(gauges.notificationsHandedOver)\n"
        out += "stratus_notifications_total{path=\"queued\"} \(gauges.notificationsQueued)\n"
        family("stratus_notification_delivery_seconds", "histogram",
               "Time from a notification's making (its write) to its answer to a web courier poll or WebSocket, in this process.")
        histogram("stratus_notification_delivery_seconds", state.notificationDelivery, labels: "")
        if let queue = gauges.queueEstimate {
            single("stratus_notification_queue_rows", "gauge", "Notifications waiting in the queue (PostgreSQL's estimate of the table's live rows).", queue)
        }
        family("stratus_pushes_total", "counter",
               "Pushes to devices this process finished with, by provider (apns, webpush) and outcome: sent, retried (429, 5xx, no answer: due again later), device_gone (the token or subscription was dropped), refused (dropped for good), expired.")
        for provider in ["apns", "webpush"] {
            for outcome in ["sent", "retried", "device_gone", "refused", "expired"] {
                out += "stratus_pushes_total{provider=\"\(provider)\",outcome=\"\(outcome)\"} \(state.pushes["\(provider) \(outcome)"] ?? 0)\n"
            }
        }
        family("stratus_push_delivery_seconds", "histogram", "Time from a push's making (its write's commit) to its provider's acceptance, in this process.")
        histogram("stratus_push_delivery_seconds", state.pushDelivery, labels: "")
        if let queue = gauges.pushQueue {
            single("stratus_push_queue_rows", "gauge", "Pushes waiting to be sent (every container; some may be waiting to be retried).", queue)
        }
        if let builds = gauges.indexBuilds, let left = gauges.indexEntriesLeft {
            single("stratus_index_builds_running", "gauge", "Index builds of deployed schemas not finished yet.", builds)
            single("stratus_index_build_records_left", "gauge", "Records the running index builds still have to index.", left)
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
        single("stratus_request_log_pending_rows", "gauge", "Request log rows waiting to be written (about a second's requests).", gauges.requestLogPending)
        family("stratus_request_log_rows_total", "counter", "Request log rows this process wrote, and dropped because too many waited (the database out of reach).")
        out += "stratus_request_log_rows_total{result=\"written\"} \(gauges.requestLogWritten)\n"
        out += "stratus_request_log_rows_total{result=\"dropped\"} \(gauges.requestLogDropped)\n"
        single("stratus_start_time_seconds", "gauge", "When this server process started (Unix time).", Int(started.timeIntervalSince1970))
        return out
    }
}
