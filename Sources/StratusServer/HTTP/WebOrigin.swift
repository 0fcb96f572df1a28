import Foundation

/// Web origins and sign-in callback URLs of API tokens.
enum WebOrigin {
    /// `https://App.Example.com:443/` as `https://app.example.com`: scheme and host lowercased,
    /// the default port dropped; `nil` for anything that is not an http(s) origin (a path, a
    /// query, user info, another scheme).
    static func normalize(_ text: String) -> String? {
        guard text.utf8.count <= 300, let components = URLComponents(string: text),
              let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.host?.lowercased(), !host.isEmpty,
              components.user == nil, components.password == nil, components.query == nil, components.fragment == nil,
              components.path.isEmpty || components.path == "/" else { return nil }
        let port = components.port.flatMap { ($0 == 443 && scheme == "https") || ($0 == 80 && scheme == "http") ? nil : $0 }
        return "\(scheme)://\(host)" + (port.map { ":\($0)" } ?? "")
    }

    /// Whether `text` may be a sign-in callback: an absolute http(s) URL with a host, no fragment.
    static func isCallbackURL(_ text: String) -> Bool {
        guard text.utf8.count <= 2000, let components = URLComponents(string: text),
              let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.host, !host.isEmpty, components.fragment == nil else { return false }
        return text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F }
    }

    /// The origin of a `Referer` when its host is this machine's loopback (`localhost`,
    /// `127.0.0.1`, `[::1]`), else nil.
    static func loopbackOrigin(ofReferer text: String) -> String? {
        guard text.utf8.count <= 2000, let components = URLComponents(string: text),
              let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
              let host = components.host?.lowercased(), components.user == nil, components.password == nil else { return nil }
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        guard ["localhost", "127.0.0.1", "::1"].contains(bare) else { return nil }
        let port = components.port.flatMap { ($0 == 443 && scheme == "https") || ($0 == 80 && scheme == "http") ? nil : $0 }
        return "\(scheme)://\(bare == "::1" ? "[::1]" : bare)" + (port.map { ":\($0)" } ?? "")
    }
}
