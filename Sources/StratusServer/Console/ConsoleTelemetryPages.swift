import Foundation
import Hummingbird
import StratusCore

/// The console's Logs page (the request log, filtered) and Telemetry page (requests, errors and
/// latency per operation over the last hour or day, charted as SVG drawn here).
struct ConsoleTelemetryPages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/logs") { call in
            let container = call.container
            let environment = call.environment
            // The page's filters, as the form has them (times as the browser's datetime-local, in UTC).
            var shown: [(String, String)] = [("environment", environment.rawValue)]
            for name in ["status", "operation", "user", "requestID", "q", "from", "to"] {
                if let value = call.query(name) { shown.append((name, value)) }
            }
            var filters = shown.filter { $0.0 != "from" && $0.0 != "to" }
            if let from = call.query("from") { filters.append(("since", Self.utc(from))) }
            if let to = call.query("to") { filters.append(("until", Self.utc(to))) }
            filters.append(("limit", String(Self.pageSize)))
            if let before = call.query("before") { filters.append(("before", before)) }
            let answer = await call.api(.logs, query: Dictionary(filters, uniquingKeysWith: { first, _ in first }))
            if answer.status == 401 || answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
            let entries = answer.ok ? answer.json["entries"]?.arrayValue ?? [] : []
            let rows = entries.map { entry -> [HTML] in
                let status = "\(entry["status"]?.intValue ?? 0)"
                let code: HTML = entry["serverErrorCode"]?.stringValue.map { " <code>\($0)</code>" } ?? ""
                return [ConsoleLayout.time(entry["at"]?.stringValue), "\(entry["database"]?.stringValue ?? "")", "\(entry["operation"]?.stringValue ?? "")",
                        "<span class=\"\((entry["status"]?.intValue ?? 0) >= 400 ? "status-error" : "status-ok")\">\(status)</span>\(code)",
                        HTML.isolated(entry["reason"]?.stringValue ?? ""),
                        "\(Self.milliseconds(entry["durationMs"]))", "<code>\(entry["userRecordName"]?.stringValue ?? "")</code>",
                        "<a href=\"\(ConsolePath.make("c", container, "logs") + ConsolePath.query([("environment", environment.rawValue), ("requestID", entry["requestID"]?.stringValue ?? "")]))\"><code>\(entry["requestID"]?.stringValue ?? "")</code></a>",
                        "\(entry["clientAddress"]?.stringValue ?? "")"]
            }
            let path = ConsolePath.make("c", container, "logs")
            var pages: [HTML] = []
            if call.query("before") != nil { pages.append("<a href=\"\(path + ConsolePath.query(shown))\">Newest requests</a>") }
            if entries.count == Self.pageSize, let seq = entries.last?["seq"]?.intValue {
                pages.append("<a rel=\"next\" href=\"\(path + ConsolePath.query(shown + [("before", String(seq))]))\">Older requests</a>")
            }
            let statuses = ["", "2xx", "4xx", "5xx"].map { value -> HTML in
                "<option value=\"\(value)\"\(value == (call.query("status") ?? "") ? " selected" : "")>\(value.isEmpty ? "any" : value)</option>"
            }
            let failure: HTML = answer.ok ? "" : "<p class=\"error\" role=\"alert\">\(answer.reason)</p>"
            let body: HTML = """
                <form method="get" action="\(path)" class="stack query">
                <div class="filter"><label for="environment">Environment</label> \(ConsoleLayout.environmentSelect(environment))
                <label for="status">Status</label> <select id="status" name="status">\(statuses)</select>
                <label for="operation">Operation</label> <input id="operation" name="operation" value="\(call.query("operation") ?? "")" placeholder="records/modify" size="16"></div>
                <div class="filter"><label for="q">Text</label> <input id="q" name="q" value="\(call.query("q") ?? "")" type="search" placeholder="in the reason, code, operation, id or user">
                <label for="requestID">Request ID</label> <input id="requestID" name="requestID" value="\(call.query("requestID") ?? "")" type="search" size="24">
                <label for="user">User</label> <input id="user" name="user" value="\(call.query("user") ?? "")" type="search" placeholder="record name or email"></div>
                <div class="filter"><label for="from">From (UTC)</label> <input id="from" name="from" type="datetime-local" step="1" value="\(call.query("from") ?? "")">
                <label for="to">until (UTC)</label> <input id="to" name="to" type="datetime-local" step="1" value="\(call.query("to") ?? "")"></div>
                <button type="submit">Filter</button></form>
                \(failure)
                \(ConsoleLayout.table("Requests, newest first (\(Self.pageSize) a page)", ["When", "Database", "Operation", "Status", "Reason", "ms", "User", "Request ID", "From"], rows,
                                      empty: "No requests match. Requests appear here about a second after they are answered.",
                                      widths: ["m", "xs", "s", "s", "", "xs", "xs", "s", "xs"]))
                <p class="pages">\(HTML.join(pages, separator: " "))</p>
                <p class="hint">Each environment keeps its newest \(answer.json["keep"]?.intValue ?? 0) requests (the logRequests limit on Usage &amp; quotas). Every HTTP request of the data API is one row here.</p>
                """
            return call.page("Logs", container: container, section: "logs", body)
        }
        console.route(router, .get, "/console/c/:container/telemetry") { call in
            let container = call.container
            let environment = call.environment
            let period = call.query("period") == "day" ? "day" : "hour"
            let operation = call.query("operation")
            var filters = [("environment", environment.rawValue), ("period", period)]
            if let operation { filters.append(("operation", operation)) }
            let telemetry = try await call.require(.telemetry, query: Dictionary(filters, uniquingKeysWith: { first, _ in first }))
            let operations = telemetry["operations"]?.arrayValue ?? []
            let rows = operations.map { item -> [HTML] in
                let name = item["operation"]?.stringValue ?? ""
                var link = filters.filter { $0.0 != "operation" }
                link.append(("operation", name))
                return ["<a href=\"\(ConsolePath.make("c", container, "telemetry") + ConsolePath.query(link))\">\(name)</a>",
                        "\(item["requests"]?.intValue ?? 0)", "\(item["errors"]?.intValue ?? 0)",
                        "\(Self.milliseconds(item["p50Ms"]))", "\(Self.milliseconds(item["p95Ms"]))"]
            }
            let bucket = Int(telemetry["bucketSeconds"]?.intValue ?? 60)
            let since = telemetry["since"]?.stringValue.flatMap { ISO8601DateFormatter().date(from: $0) } ?? Date()
            let count = (period == "day" ? 86400 : 3600) / bucket
            var series = [TelemetryBucket](repeating: TelemetryBucket(), count: count)
            for item in telemetry["buckets"]?.arrayValue ?? [] {
                guard let start = item["start"]?.stringValue.flatMap({ ISO8601DateFormatter().date(from: $0) }) else { continue }
                let index = Int((start.timeIntervalSince(since) / Double(bucket)).rounded())
                guard series.indices.contains(index) else { continue }
                series[index] = TelemetryBucket(requests: item["requests"]?.intValue ?? 0, errors: item["errors"]?.intValue ?? 0,
                                                p50: Self.number(item["p50Ms"]), p95: Self.number(item["p95Ms"]))
            }
            let periods = ["hour", "day"].map { value -> HTML in
                "<option value=\"\(value)\"\(value == period ? " selected" : "")>last \(value)</option>"
            }
            let operationChoices = ([""] + operations.compactMap { $0["operation"]?.stringValue }).map { value -> HTML in
                "<option value=\"\(value)\"\(value == (operation ?? "") ? " selected" : "")>\(value.isEmpty ? "all operations" : value)</option>"
            }
            let scope: HTML = operation.map { "<code>\($0)</code>" } ?? "all operations"
            let step = bucket >= 900 ? "15 minutes" : "minute"
            let body: HTML = """
                <form method="get" action="\(ConsolePath.make("c", container, "telemetry"))" class="inline">
                <label for="environment">Environment</label> \(ConsoleLayout.environmentSelect(environment))
                <label for="period">Period</label> <select id="period" name="period">\(periods)</select>
                <label for="operation">Operation</label> <select id="operation" name="operation">\(operationChoices)</select>
                <button type="submit">Show</button></form>
                <section class="charts">
                <h2>Requests and errors per \(step), \(scope)</h2>
                \(Self.requestChart(series, start: since, bucket: bucket))
                <h2>Latency per \(step) (p50 and p95, ms), \(scope)</h2>
                \(Self.latencyChart(series, start: since, bucket: bucket))
                </section>
                \(ConsoleLayout.table("By operation, last \(period)", ["Operation", "Requests", "Errors", "p50 ms", "p95 ms"], rows,
                                      empty: "No requests in the last \(period)."))
                <p class="hint">From the request log (its newest rows: see Logs). Errors are answers with status 400 or above.</p>
                """
            return call.page("Telemetry", container: container, section: "telemetry", body)
        }
    }

    struct TelemetryBucket {
        var requests: Int64 = 0
        var errors: Int64 = 0
        var p50: Double?
        var p95: Double?
    }

    static func number(_ value: JSON?) -> Double? {
        switch value {
        case .double(let number)?: number
        case .int(let number)?: Double(number)
        default: nil
        }
    }

    static func milliseconds(_ value: JSON?) -> String {
        number(value).map { String(format: "%.1f", $0) } ?? ""
    }

    static let chartWidth = 720.0, chartHeight = 160.0, chartLeft = 48.0, chartBottom = 20.0

    /// The frame of a chart: the y axis to `maximum` (labelled in `unit`), the x axis's first and last time.
    static func chartFrame(maximum: Double, unit: String, start: Date, bucket: Int, count: Int) -> HTML {
        let formatter = DateFormatter()
        formatter.dateFormat = bucket >= 900 ? "MM-dd HH:mm" : "HH:mm"
        formatter.timeZone = TimeZone(identifier: "UTC")
        let end = start.addingTimeInterval(Double(bucket * count))
        let top = String(format: maximum >= 10 ? "%.0f" : "%.1f", maximum)
        let (left, right, base, label) = (Int(chartLeft), Int(chartWidth), Int(chartHeight - chartBottom), Int(chartLeft) - 4)
        return """
            <line class="axis" x1="\(left)" y1="\(base)" x2="\(right)" y2="\(base)"></line>
            <line class="axis" x1="\(left)" y1="0" x2="\(left)" y2="\(base)"></line>
            <text x="\(label)" y="10" text-anchor="end">\(top)\(unit)</text><text x="\(label)" y="\(base)" text-anchor="end">0</text>
            <text x="\(left)" y="\(Int(chartHeight) - 4)">\(formatter.string(from: start)) UTC</text>
            <text x="\(right)" y="\(Int(chartHeight) - 4)" text-anchor="end">\(formatter.string(from: end)) UTC</text>
            """
    }

    /// Bars of requests per bucket, the errors among them in red.
    static func requestChart(_ series: [TelemetryBucket], start: Date, bucket: Int) -> HTML {
        let maximum = max(1, Double(series.map(\.requests).max() ?? 0))
        let plot = chartHeight - chartBottom
        let width = (chartWidth - chartLeft) / Double(series.count)
        var bars = ""
        for (index, item) in series.enumerated() where item.requests > 0 {
            let x = chartLeft + Double(index) * width
            let height = Double(item.requests) / maximum * plot
            let errorHeight = Double(item.errors) / maximum * plot
            bars += String(format: "<rect class=\"chart-requests\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>%lld requests, %lld errors</title></rect>",
                           x, plot - height, max(1, width - 1), height, item.requests, item.errors)
            if item.errors > 0 {
                bars += String(format: "<rect class=\"chart-errors\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"></rect>",
                               x, plot - errorHeight, max(1, width - 1), errorHeight)
            }
        }
        let total = series.reduce(Int64(0)) { $0 + $1.requests }, errors = series.reduce(Int64(0)) { $0 + $1.errors }
        // `bars` holds numbers only (formatted above).
        return """
            <svg class="chart" viewBox="0 0 \(Int(chartWidth)) \(Int(chartHeight))" role="img" aria-label="\(total) requests, \(errors) errors">
            \(chartFrame(maximum: maximum, unit: "", start: start, bucket: bucket, count: series.count))\(HTML(stringLiteral: bars))</svg>
            <p class="legend"><span class="key chart-requests"></span> requests (\(total)) <span class="key chart-errors"></span> errors (\(errors))</p>
            """
    }

    /// Lines of the median and 95th percentile latency per bucket (buckets without requests are gaps).
    static func latencyChart(_ series: [TelemetryBucket], start: Date, bucket: Int) -> HTML {
        let maximum = max(0.1, series.compactMap(\.p95).max() ?? 0)
        let plot = chartHeight - chartBottom
        let width = (chartWidth - chartLeft) / Double(series.count)
        /// The line through a percentile's points, and a dot at each (a lone bucket is a dot alone).
        func line(_ value: KeyPath<TelemetryBucket, Double?>, _ style: String) -> String {
            var path = ""
            var dots = ""
            var drawing = false
            for (index, item) in series.enumerated() {
                guard let number = item[keyPath: value] else { drawing = false; continue }
                let (x, y) = (chartLeft + (Double(index) + 0.5) * width, plot - number / maximum * plot)
                path += String(format: "%@%.1f %.1f ", drawing ? "L" : "M", x, y)
                dots += String(format: "<circle class=\"%@\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\"></circle>", style, x, y)
                drawing = true
            }
            return path.isEmpty ? "" : "<path class=\"\(style)\" d=\"\(path)\"></path>\(dots)"
        }
        // Numbers and fixed class names only.
        let lines = HTML(stringLiteral: line(\.p95, "chart-p95") + line(\.p50, "chart-p50"))
        return """
            <svg class="chart" viewBox="0 0 \(Int(chartWidth)) \(Int(chartHeight))" role="img" aria-label="latency: p95 up to \(String(format: "%.1f", maximum)) ms">
            \(chartFrame(maximum: maximum, unit: " ms", start: start, bucket: bucket, count: series.count))
            \(lines)</svg>
            <p class="legend"><span class="key chart-p50"></span> p50 <span class="key chart-p95"></span> p95</p>
            """
    }
}

extension ConsoleTelemetryPages {
    /// Requests per page of the log.
    static let pageSize = 100

    /// A browser's datetime-local value ("2026-11-29T02:08" or with seconds), read as UTC, in ISO 8601.
    static func utc(_ local: String) -> String {
        if local.hasSuffix("Z") || local.contains("+") { return local }
        return local + (local.count == 16 ? ":00Z" : "Z")
    }
}

