import Foundation
import StratusCore

/// The console's page frame and shared pieces.
enum ConsoleLayout {
    /// The sections of a container's pages: path below the container, and title.
    static let sections: [(path: String, title: String)] = [
        ("", "Overview"), ("schema", "Schema"), ("deploy", "Deploy"), ("records", "Records"), ("users", "Users"), ("tokens", "Tokens & keys"),
        ("subscriptions", "Subscriptions"), ("push", "Push"), ("shares", "Shares"), ("usage", "Usage & quotas"), ("telemetry", "Telemetry"), ("logs", "Logs"),
        ("audit", "Audit log"), ("team", "Team"),
    ]

    static func head(_ title: String) -> HTML {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
        <title>\(title) · Stratus console</title><link rel="icon" type="image/svg+xml" href="/console/assets/favicon.svg">
        <link rel="stylesheet" href="/console/assets/console.css">
        <script src="/console/assets/console.js" defer></script></head>
        """
    }

    /// A page without the signed-in frame (sign-in, refusals).
    static func bare(title: String, _ body: HTML) -> HTML {
        "\(head(title))<body><header><a class=\"brand\" href=\"/console\">Stratus console</a></header><main>\(body)</main></body></html>"
    }

    static func page(title: String, user: ConsoleUser, container: String?, section: String, notice: String?, error: String?,
                     _ body: HTML) -> HTML {
        var nav: HTML = ""
        if let container {
            let links = sections.map { item -> HTML in
                let href = item.path.isEmpty ? ConsolePath.make("c", container) : ConsolePath.make("c", container, item.path)
                let current: HTML = item.path == section ? " aria-current=\"page\"" : ""
                return "<li><a href=\"\(href)\"\(current)>\(item.title)</a></li>"
            }
            // On a phone the script folds the menu under its summary (it stays open without the script).
            let current = sections.first { $0.path == section }?.title ?? "Menu"
            nav = """
                <nav aria-label="\(container)"><p class="container-name">\(container)</p>
                <details class="menu" open data-phone-closed><summary>Menu: \(current)</summary><ul>\(links)</ul></details></nav>
                """
        }
        // Messages name data (records, users, zones): their direction controls are shown, not obeyed.
        let flash: HTML = [notice.map { "<p class=\"notice\" role=\"status\">\(HTML.isolated($0))</p>" as HTML },
                           error.map { "<p class=\"error\" role=\"alert\">\(HTML.isolated($0))</p>" as HTML }]
            .compactMap { $0 }.reduce("") { "\($0)\($1)" }
        return """
            \(head(title))<body>
            <header><a class="brand" href="/console">Stratus console</a>\(serverLinks(user, section: section))
            <form class="signout" method="post" action="/console/signout">\(csrf(user))<span class="who">\(user.name)\(user.isSuperuser ? " (superuser)" : "")</span>
            <button type="submit">Sign out</button></form></header>
            <div class="frame">\(nav)<main id="main"><h1>\(HTML.isolated(title))</h1>\(flash)\(body)</main></div>
            </body></html>
            """
    }

    /// A superuser's pages (operators, the server), in the header; nothing for anyone else.
    static func serverLinks(_ user: ConsoleUser, section: String) -> HTML {
        guard user.isSuperuser else { return "" }
        let links = [("operators", "Operators"), ("server", "Server")].map { path, title -> HTML in
            "<li><a href=\"/console/\(path)\"\(section == path ? " aria-current=\"page\"" as HTML : "")>\(title)</a></li>"
        }
        return "<nav class=\"server\" aria-label=\"Server\"><ul>\(links)</ul></nav>"
    }

    /// An ISO 8601 time to the minute ("2026-11-29 02:08"), the whole of it in its title.
    static func time(_ iso: String?) -> HTML {
        guard let iso else { return "" }
        let short = iso.count >= 16 ? iso.prefix(10) + " " + iso.dropFirst(11).prefix(5) : Substring(iso)
        return "<time datetime=\"\(iso)\" title=\"\(iso)\">\(String(short))</time>"
    }

    /// The hidden CSRF field every form carries.
    static func csrf(_ user: ConsoleUser) -> HTML {
        "<input type=\"hidden\" name=\"csrf\" value=\"\(user.csrf)\">"
    }

    static func failure(_ failure: ConsoleFailure) -> HTML {
        "<p class=\"error\" role=\"alert\">\(failure.reason)</p><p><a href=\"/console\">Back to your containers</a></p>"
    }

    static func signIn(error: String?, notice: String? = nil, email: String? = nil, next: String = "/console") -> HTML {
        let back: HTML = next == "/console" ? "" : "<input type=\"hidden\" name=\"next\" value=\"\(next)\">"
        let message: HTML = error.map { "<p class=\"error\" role=\"alert\">\($0)</p>" } ?? notice.map { "<p class=\"notice\" role=\"status\">\($0)</p>" } ?? ""
        return bare(title: "Sign in", """
            <h1>Sign in</h1>\(message)
            <form method="post" action="/console/signin" class="stack">\(back)
            <label for="email">Email address</label>
            <input id="email" name="email" type="email" autocomplete="username" value="\(email ?? "")" autofocus>
            <label for="password">Password</label>
            <input id="password" name="password" type="password" autocomplete="current-password">
            <button type="submit">Sign in</button>
            </form>
            <details><summary>Sign in with the admin token</summary>
            <form method="post" action="/console/signin" class="stack">\(back)
            <label for="adminToken">Admin token (STRATUS_ADMIN_TOKEN, or .stratus/admin-token on the server)</label>
            <input id="adminToken" name="adminToken" type="password" autocomplete="off">
            <button type="submit">Sign in with the token</button>
            </form></details>
            """)
    }

    /// A table: headers and rows of cells. Its columns keep their widths whatever the data (long
    /// values are cut with an ellipsis) unless `whole`, which shows every value in full. `widths`
    /// sizes the columns (`xs`, `s`, `m`, `l`; empty for a share of what is left).
    static func table(_ caption: String, _ headers: [String], _ rows: [[HTML]], empty: String, whole: Bool = false, widths: [String] = []) -> HTML {
        table(caption, headings: headers.map { "\($0)" as HTML }, rows, empty: empty, whole: whole, widths: widths)
    }

    /// A table whose headings are markup (such as links that sort by a column).
    static func table(_ caption: String, headings headers: [HTML], _ rows: [[HTML]], empty: String, whole: Bool = false, widths: [String] = []) -> HTML {
        guard !rows.isEmpty else { return "<p class=\"empty\">\(empty)</p>" }
        let head = headers.map { "<th scope=\"col\">\($0)</th>" as HTML }
        let columns: HTML = widths.isEmpty ? "" : "<colgroup>\(widths.map { "<col\($0.isEmpty ? "" : " class=\"w-\($0)\"" as HTML)>" as HTML })</colgroup>"
        let body = rows.map { row -> HTML in "<tr>\(row.map { "<td>\($0)</td>" as HTML })</tr>" }
        let kind: HTML = whole ? "wrap" : "data cols-\(min(headers.count, 10))"
        return "<div class=\"scroll\"><table class=\"\(kind)\"><caption>\(caption)</caption>\(columns)<thead><tr>\(head)</tr></thead><tbody>\(body)</tbody></table></div>"
    }

    /// A POST form of one button (and hidden fields).
    static func button(_ user: ConsoleUser, action: String, label: String, fields: [(String, String)] = [], danger: Bool = false) -> HTML {
        let hidden = fields.map { "<input type=\"hidden\" name=\"\($0.0)\" value=\"\($0.1)\">" as HTML }
        return "<form method=\"post\" action=\"\(action)\" class=\"inline\">\(csrf(user))\(hidden)<button type=\"submit\"\(danger ? " class=\"danger\"" as HTML : "")>\(label)</button></form>"
    }

    /// A select of the two environments, `current` chosen.
    static func environmentSelect(_ current: ContainerEnvironment, name: String = "environment", id: String = "environment",
                                  among: [ContainerEnvironment] = ContainerEnvironment.allCases) -> HTML {
        let options = among.map { environment -> HTML in
            "<option value=\"\(environment.rawValue)\"\(environment == current ? " selected" : "")>\(environment.rawValue)</option>"
        }
        return "<select id=\"\(id)\" name=\"\(name)\">\(options)</select>"
    }

    /// A GET form choosing the environment of the page.
    static func environmentPicker(_ current: ContainerEnvironment, action: String, extra: HTML = "") -> HTML {
        "<form method=\"get\" action=\"\(action)\" class=\"inline\"><label for=\"environment\">Environment</label> \(environmentSelect(current))\(extra) <button type=\"submit\">Show</button></form>"
    }

    /// What a bar measures: a count, or bytes.
    enum BarUnit { case count, bytes }

    /// A horizontal bar of `value` against `limit`, as SVG drawn here.
    static func bar(_ label: String, value: Int64, limit: Int64, unit: BarUnit = .count) -> HTML {
        let share = limit > 0 ? min(1, Double(value) / Double(limit)) : 0
        let width = Int(share * 300)
        let percent = limit > 0 ? Int((Double(value) / Double(limit) * 100).rounded()) : 0
        let tone = share >= 0.9 ? "bar-high" : share >= 0.7 ? "bar-mid" : "bar-low"
        let words = unit == .bytes ? (ConsoleUnits.bytes(value), ConsoleUnits.bytes(limit)) : (ConsoleUnits.count(value), ConsoleUnits.count(limit))
        return """
            <figure class="bar"><figcaption>\(label): \(words.0) of \(words.1) (\(percent) %)</figcaption>
            <svg width="300" height="14" viewBox="0 0 300 14" role="img" aria-label="\(label) \(percent) percent of the limit">
            <rect class="bar-track" x="0" y="0" width="300" height="14" rx="3"></rect><rect class="\(tone)" x="0" y="0" width="\(width)" height="14" rx="3"></rect></svg></figure>
            """
    }
}

/// Figures as a person reads them: bytes in KiB, MiB, GiB; counts in thousands and millions.
enum ConsoleUnits {
    /// "10 GiB", "1.5 MiB", "512 bytes".
    static func bytes(_ value: Int64) -> String {
        let units = ["KiB", "MiB", "GiB", "TiB"]
        guard value >= 1024 else { return "\(value) byte\(value == 1 ? "" : "s")" }
        var amount = Double(value)
        var unit = -1
        while amount >= 1024, unit < units.count - 1 {
            amount /= 1024
            unit += 1
        }
        return "\(trimmed(amount)) \(units[unit])"
    }

    /// "950", "12.5 k", "3 M" (the exact figure is in the title of what shows it).
    static func count(_ value: Int64) -> String {
        let magnitude = abs(Double(value))
        if magnitude < 10_000 { return "\(value)" }
        if magnitude < 1_000_000 { return "\(trimmed(Double(value) / 1000)) k" }
        if magnitude < 1_000_000_000 { return "\(trimmed(Double(value) / 1_000_000)) M" }
        return "\(trimmed(Double(value) / 1_000_000_000)) G"
    }

    /// One decimal below 100 (none when it is .0), none above.
    private static func trimmed(_ amount: Double) -> String {
        if amount >= 100 { return String(Int(amount.rounded())) }
        let text = String(format: "%.1f", amount)
        return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
    }
}
