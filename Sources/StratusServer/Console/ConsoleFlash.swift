import Foundation
import NIOCore
import StratusCore

/// The message a console page shows after an action ("saved rec-1", a refusal's reason). It
/// travels in the redirect's query (`notice`, `error`) with a `seal`: the server's signature
/// (`TokenSealer`) of both and of the session they were made for. A page shows them only under a
/// seal made for its own session, so a link made anywhere else (say, one that reads "Your session
/// expired. Sign in again at https://…") puts no words on a console page. The sign-in page, which
/// has no session, shows fixed messages by code.
enum ConsoleFlash {
    /// The sign-in page's messages, by the code in its `notice` or `error`.
    static let signInMessages = [
        "signed-out": "You are signed out.",
        "session-ended": "Your session ended; sign in again.",
    ]

    static let purpose = "console flash"

    /// The query keys a message travels in.
    static let keys: Set<String> = ["notice", "error", "seal"]

    /// `location` with a seal over its `notice` and `error` for `session` (a session's CSRF token;
    /// unchanged when it carries neither).
    static func seal(_ location: String, session: String, sealer: TokenSealer) -> String {
        guard let mark = location.firstIndex(of: "?") else { return location }
        let query = ConsoleForm(ByteBuffer(string: String(location[location.index(after: mark)...])))
        guard query["notice"] != nil || query["error"] != nil else { return location }
        return location + "&seal=" + sealer.signature(body(query, session: session), purpose: purpose)
    }

    /// The `notice` and `error` of a page's query, when its seal is this session's.
    static func open(_ query: ConsoleForm, session: String, sealer: TokenSealer) -> (notice: String?, error: String?) {
        let notice = query["notice"].flatMap { $0.isEmpty ? nil : $0 }
        let error = query["error"].flatMap { $0.isEmpty ? nil : $0 }
        guard notice != nil || error != nil, let seal = query["seal"],
              sealer.isSignature(seal, of: body(query, session: session), purpose: purpose) else { return (nil, nil) }
        return (notice, error)
    }

    /// What a seal signs: the two messages as they are in the query (absent or not) and the session.
    static func body(_ query: ConsoleForm, session: String) -> [UInt8] {
        JSONWriter.bytes(["notice": query["notice"].map(JSON.string) ?? .null, "error": query["error"].map(JSON.string) ?? .null,
                          "session": .string(session)])
    }
}
