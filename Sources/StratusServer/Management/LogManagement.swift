import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// The request log and what it shows of a period (`stratus logs`, the console's Logs and
/// Telemetry pages). Both first write this process's waiting rows, so a reader sees its own
/// requests up to the call.
struct LogManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let requestLog: RequestLog
    let rateLimiter: RateLimiter

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .logs) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let filter = try await self.logFilter(call, containerID: container.id, environment: environment)
            await self.requestLog.flush()
            let keep = try await self.rateLimiter.limits(containerID: container.id, environment: environment).logRequests
            let entries = try await self.admin.metering.requestLog(containerID: container.id, environment: environment, keep: keep, filter: filter)
            let formatter = Self.preciseTime()
            return .json(["container": .string(container.name), "environment": .string(environment.rawValue), "keep": .int(keep),
                          "entries": .array(entries.map { ManagementJSON.logEntryJSON($0, formatter: formatter) })])
        }
        api.manage(router, .telemetry) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let query = call.queryParameters
            let period = query.get("period").map { String($0) } ?? "hour"
            guard let (length, bucket) = Self.telemetryPeriods[period] else {
                throw StratusError.badRequest("'period' must be hour or day")
            }
            let operation = try query.get("operation").map { text throws(StratusError) -> String in
                guard Names.isPrintableName(String(text), maximumBytes: 64) else { throw .badRequest("'operation' must be 1–64 printable characters") }
                return String(text)
            }
            await self.requestLog.flush()
            let since = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 / Double(bucket)).rounded(.down) * Double(bucket) - Double(length - bucket))
            let keep = try await self.rateLimiter.limits(containerID: container.id, environment: environment).logRequests
            let (operations, buckets) = try await self.admin.metering.requestTelemetry(containerID: container.id, environment: environment, keep: keep, since: since,
                                                                              bucketSeconds: bucket, operation: operation)
            func summary(_ item: RequestLogSummary) -> [String: JSON] {
                ["requests": .int(item.requests), "errors": .int(item.errors),
                 "p50Ms": .double((item.p50Microseconds / 10).rounded() / 100), "p95Ms": .double((item.p95Microseconds / 10).rounded() / 100)]
            }
            return .json([
                "container": .string(container.name), "environment": .string(environment.rawValue), "period": .string(period),
                "since": ManagementJSON.iso(since), "bucketSeconds": .int(Int64(bucket)), "operation": operation.map { .string($0) } ?? .null,
                "operations": .array(operations.map { item in
                    var members = summary(item)
                    members["operation"] = .string(item.operation ?? "")
                    return .object(members)
                }),
                "buckets": .array(buckets.map { item in
                    var members = summary(item)
                    members["start"] = ManagementJSON.iso(item.start ?? since)
                    return .object(members)
                }),
            ])
        }
    }

    /// The periods the telemetry covers: length and bucket, in seconds.
    static let telemetryPeriods: [String: (length: Int, bucket: Int)] = ["hour": (3600, 60), "day": (86400, 900)]

    /// The log's filters from the query: `since` and `until` (ISO 8601), `status` (`404`, or a
    /// class: `4xx`), `operation`, `user` (record name or email), `requestID`, `q` (text found in
    /// the operation, error code, reason, request id or user), `after` / `before` (row numbers),
    /// `limit` (1–1000, default 100).
    func logFilter(_ call: ManagementCall, containerID: ContainerID, environment: ContainerEnvironment) async throws -> RequestLogFilter {
        let query = call.queryParameters
        var filter = RequestLogFilter()
        if let text = query.get("since") {
            guard let date = Self.parseTime(String(text)) else {
                throw StratusError.badRequest("'since' must be an ISO 8601 time such as 2026-11-24T10:00:00Z")
            }
            filter.since = date
        }
        if let text = query.get("status").map({ String($0).lowercased() }) {
            if text.count == 3, text.hasSuffix("xx"), let digit = Int(text.prefix(1)), (1...5).contains(digit) {
                filter.status = digit * 100
                filter.statusClass = true
            } else if let code = Int(text), (100...599).contains(code) {
                filter.status = code
            } else {
                throw StratusError.badRequest("'status' must be an HTTP status (404) or a class (4xx, 5xx)")
            }
        }
        if let text = query.get("operation") {
            guard Names.isPrintableName(String(text), maximumBytes: 64) else { throw StratusError.badRequest("'operation' must be 1–64 printable characters") }
            filter.operation = String(text)
        }
        if let text = query.get("until") {
            guard let date = Self.parseTime(String(text)) else {
                throw StratusError.badRequest("'until' must be an ISO 8601 time such as 2026-11-24T11:00:00Z")
            }
            filter.until = date
        }
        if let since = filter.since, let until = filter.until, until <= since {
            throw StratusError.badRequest("'until' must be later than 'since'")
        }
        if let text = query.get("requestID") {
            guard RequestID.accepted(String(text)) != nil else {
                throw StratusError.badRequest("'requestID' must be a request id: 1–128 letters, digits and -_.:@/+=")
            }
            filter.requestID = String(text)
        }
        if let text = query.get("q") {
            guard Names.isPrintableName(String(text), maximumBytes: 200) else { throw StratusError.badRequest("'q' must be 1–200 printable characters") }
            filter.text = String(text)
        }
        if query.get("user") != nil {
            filter.user = try await call.userFilter(admin, containerID: containerID, environment: environment)
        }
        for (name, path) in [("after", \RequestLogFilter.after), ("before", \RequestLogFilter.before)] {
            guard let text = query.get(name) else { continue }
            guard let value = Int64(text), value >= 0 else { throw StratusError.badRequest("'\(name)' must be a row number (the 'seq' of an entry)") }
            filter[keyPath: path] = value
        }
        if filter.after != nil, filter.before != nil { throw StratusError.badRequest("give 'after' or 'before', not both") }
        if let text = query.get("limit") {
            guard let value = Int(text), (1...1000).contains(value) else { throw StratusError.badRequest("'limit' must be 1–1000") }
            filter.limit = value
        }
        return filter
    }

    /// An ISO 8601 time, with or without fractional seconds.
    static func parseTime(_ text: String) -> Date? {
        ISO8601DateFormatter().date(from: text) ?? preciseTime().date(from: text)
    }

    /// ISO 8601 with milliseconds: requests a millisecond apart keep their order when read.
    static func preciseTime() -> ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
