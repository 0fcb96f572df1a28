import Crypto
import Foundation
import NIOCore

/// The message a console page shows after an action ("saved rec-1", a refusal's reason). It
/// travels in the redirect's query (`notice`, `error`) with a `seal`: an HMAC of both, keyed by
/// the session. A page shows them only under a seal made for its own session, so a link made
/// anywhere else (say, one that reads "Your session expired. Sign in again at https://…") puts no
/// words on a console page. The sign-in page, which has no session, shows fixed messages by code.
enum ConsoleFlash {
    /// The sign-in page's messages, by the code in its `notice` or `error`.
    static let signInMessages = [
        "signed-out": "You are signed out.",
        "session-ended": "Your session ended; sign in again.",
    ]

    /// `location` with a seal over its `notice` and `error` for the session whose key is `key`
    /// (unchanged when it carries neither).
    static func seal(_ location: String, key: String) -> String {
        guard let mark = location.firstIndex(of: "?") else { return location }
        let query = ConsoleForm(ByteBuffer(string: String(location[location.index(after: mark)...])))
        guard query["notice"] != nil || query["error"] != nil else { return location }
        return location + "&seal=" + code(notice: query["notice"], error: query["error"], key: key)
    }

    /// The `notice` and `error` of a page's query, when its seal is this session's.
    static func open(_ query: ConsoleForm, key: String) -> (notice: String?, error: String?) {
        let notice = query["notice"].flatMap { $0.isEmpty ? nil : $0 }
        let error = query["error"].flatMap { $0.isEmpty ? nil : $0 }
        guard notice != nil || error != nil, let seal = query["seal"],
              TokenSealer.constantTimeEquals(seal, code(notice: query["notice"], error: query["error"], key: key)) else { return (nil, nil) }
        return (notice, error)
    }

    static func code(notice: String?, error: String?, key: String) -> String {
        var message = Data("stratus console flash\u{0}".utf8)
        for part in [notice, error] {
            // Each part with its length first (-1: absent), so no two pairs seal alike.
            withUnsafeBytes(of: Int64(part.map { $0.utf8.count } ?? -1).littleEndian) { message.append(contentsOf: $0) }
            message.append(contentsOf: Array((part ?? "").utf8))
        }
        let mac = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: Data(key.utf8)))
        return mac.prefix(16).map { String($0, radix: 16).leftPadded(to: 2) }.joined()
    }
}
