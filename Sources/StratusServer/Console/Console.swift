import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore
import Synchronization

/// The console at `/console`: server-rendered pages over the management API. Every page and
/// every action calls the management API's functions (`ConsoleCall.api`, by `ManagementRoute`)
/// as the signed-in operator's credential (or the admin token, for a session opened with it),
/// through the check its routes make: what the console may show or change is exactly what the
/// management API allows that caller (`ManagementAccess.routes`), and the audit log names them
/// as it does for the CLI.
///
/// Safe by construction: the session is an `HttpOnly`, `SameSite=Strict` cookie (`Secure` when the
/// public URL is https); every state-changing request is a POST carrying the session's CSRF token
/// from a same-origin page; no GET changes anything; every page is sent with a
/// `Content-Security-Policy` allowing only the console's own script and style files, and every
/// value is escaped (`HTML`).
struct ConsoleController: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let passwords: Passwords
    let bodies: RequestBodies
    /// Signs what a redirect tells the next page (`ConsoleFlash`).
    let sealer: TokenSealer
    /// `STRATUS_ADMIN_TOKEN`, when the server has one (a session may be opened with it).
    let adminToken: String?
    /// The service's public URL: the console's own origin.
    let publicURL: String

    static let consoleCookie = "stratus_console"
    /// A console session ends after 30 minutes unused, and after 12 hours in any case.
    static let consoleIdleSeconds = 30 * 60
    static let consoleLifetimeSeconds = 12 * 3600

    /// The session cookie's value, when the request carries one.
    static func consoleCookieValue(_ request: Request) -> String? {
        for field in request.headers[values: .cookie] {
            for part in field.split(separator: ";") {
                let pair = part.trimmingCharacters(in: .whitespaces)
                if pair.hasPrefix(consoleCookie + "=") { return String(pair.dropFirst(consoleCookie.count + 1)) }
            }
        }
        return nil
    }

    /// The signed-in person, or `nil` when the request has no live session.
    func consoleUser(_ request: Request) async throws -> ConsoleUser? {
        guard let token = Self.consoleCookieValue(request), token.hasPrefix(ManagementGate.operatorCredentialPrefix), token.utf8.count <= 200,
              let session = try await admin.operatorStore.consoleSession(hash: TokenSealer.hash(token)), session.refusal == nil else { return nil }
        let csrf = Self.csrfToken(for: token)
        if let credential = session.credential {
            guard credential.operatorInfo.disabledAt == nil else { return nil }
            return ConsoleUser(principal: .operatorCredential(credential), csrf: csrf, name: credential.operatorInfo.email, isSuperuser: credential.operatorInfo.superuser,
                               credentialID: session.credentialID)
        }
        // A session of the admin token lasts only while the server has that token.
        guard let adminToken = adminToken, !adminToken.isEmpty, let hash = session.adminTokenHash,
              hash == TokenSealer.hash(adminToken) else { return nil }
        return ConsoleUser(principal: .adminToken, csrf: csrf, name: "the admin token", isSuperuser: true, credentialID: session.credentialID)
    }

    /// The CSRF token of a session: derived from its secret, so a page of another origin (which
    /// can neither read the cookie nor a console page) cannot know it.
    static func csrfToken(for session: String) -> String {
        let digest = SHA256.hash(data: Data(("stratus console csrf:" + session).utf8))
        return digest.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }

    /// Whether a POST comes from a console page: its `Origin` (or, without one, its `Referer`)
    /// is the server's own, by the public URL or the `Host` the browser addressed.
    func isSameOrigin(_ request: Request) -> Bool {
        let given = request.headers[.origin] ?? request.headers[.referer].flatMap { referer -> String? in
            guard let url = URL(string: referer), let scheme = url.scheme, let host = url.host else { return nil }
            return "\(scheme)://\(host)" + (url.port.map { ":\($0)" } ?? "")
        }
        guard let given, given != "null" else { return false }
        let origin = given.lowercased()
        if let ours = WebOrigin.normalize(publicURL), origin == ours { return true }
        if let host = request.head.authority {
            let scheme = publicURL.lowercased().hasPrefix("https:") ? "https" : "http"
            if origin == "\(scheme)://\(host.lowercased())" { return true }
        }
        return false
    }

    /// Headers of every console answer.
    static func consoleHeaders(contentType: String) -> HTTPFields {
        var headers: HTTPFields = [.contentType: contentType, .cacheControl: "no-store"]
        headers[HTTPField.Name("Content-Security-Policy")!] =
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("Referrer-Policy")!] = "same-origin"
        return headers
    }

    /// A page.
    static func page(_ html: HTML, status: HTTPResponse.Status = .ok, extraHeaders: HTTPFields = [:]) -> Response {
        var headers = consoleHeaders(contentType: "text/html; charset=utf-8")
        headers.append(contentsOf: extraHeaders)
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: html.description)))
    }

    /// A redirect after a POST (303: the browser GETs `location`).
    static func seeOther(_ location: String, extraHeaders: HTTPFields = [:]) -> Response {
        var headers = consoleHeaders(contentType: "text/plain; charset=utf-8")
        headers[.location] = location
        headers.append(contentsOf: extraHeaders)
        return Response(status: .seeOther, headers: headers)
    }

    /// The session cookie `Set-Cookie` header: `value`, or an expired one that clears it.
    func sessionCookie(_ value: String?) -> HTTPFields {
        let secure = publicURL.lowercased().hasPrefix("https:") ? "; Secure" : ""
        let cookie = value.map { "\(Self.consoleCookie)=\($0); Path=/console; HttpOnly; SameSite=Strict; Max-Age=\(Self.consoleLifetimeSeconds)\(secure)" }
            ?? "\(Self.consoleCookie)=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0\(secure)"
        return [.setCookie: cookie]
    }

    /// After a refused action: a page for an access refusal, back to `back` with the reason otherwise.
    static func actionFailed(_ answer: ManagementAnswer, back: String) throws -> Response {
        if answer.status == 401 || answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
        return seeOther(back + ConsolePath.query([("error", answer.reason)]))
    }

    /// A path parameter, percent-decoded (empty when absent).
    static func pathParameter(_ context: BasicRequestContext, _ name: String) -> String {
        let raw = context.parameters.get(name) ?? ""
        return raw.removingPercentEncoding ?? raw
    }
}

/// The signed-in person of a console request.
struct ConsoleUser: Sendable {
    /// Who the management functions act for: the session's operator credential, or the admin
    /// token (read with the session, so a call needs no lookup of its own).
    var principal: ManagementGrant.Principal
    /// The session's CSRF token (in every form).
    var csrf: String
    /// `ada@example.com` or `the admin token`.
    var name: String
    var isSuperuser: Bool
    var credentialID: CredentialID
}

/// What a management function answered the console.
struct ManagementAnswer {
    var status: Int
    var json: JSON
    var ok: Bool { (200..<300).contains(status) }
    var reason: String { json["reason"]?.stringValue ?? "the server answered \(status)" }
}

/// An `application/x-www-form-urlencoded` body.
struct ConsoleForm: Sendable {
    var values: [String: [String]] = [:]
    /// Every pair, in order.
    var pairs: [(String, String)] = []

    init(_ buffer: ByteBuffer) {
        let text = String(buffer: buffer)
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = Self.decode(parts[0])
            let value = parts.count > 1 ? Self.decode(parts[1]) : ""
            values[name, default: []].append(value)
            pairs.append((name, value))
        }
    }

    static func decode(_ part: Substring) -> String {
        let spaced = part.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }

    subscript(_ name: String) -> String? { values[name]?.last }

    func all(_ name: String) -> [String] { values[name] ?? [] }

    /// Sets a field's values (none: removes it), in `values` and `pairs` alike.
    mutating func set(_ name: String, _ new: [String]) {
        values[name] = new.isEmpty ? nil : new
        pairs.removeAll { $0.0 == name }
        pairs += new.map { (name, $0) }
    }

    /// A field's trimmed text, or `nil` when missing or empty.
    func text(_ name: String) -> String? {
        guard let value = self[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }
}
