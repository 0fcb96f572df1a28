/// A user's id: the user record name (`_` and 32 hex digits) a container gives each of its users,
/// or `_key_<key ID>` for a server-to-server key acting on the public database. Its own type so
/// that a user cannot be passed where a zone, record or email address is meant. Written as the
/// name it wraps: in SQL (`text`), on the wire and in logs.
public struct UserID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    @inlinable
    public init(rawValue: String) { self.rawValue = rawValue }

    @inlinable
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public init(stringLiteral value: String) { self.rawValue = value }

    /// The owner of the public database's zones and records: no user.
    public static let nobody = UserID(rawValue: "")

    /// Whether this is ``nobody``.
    @inlinable
    public var isNobody: Bool { rawValue.isEmpty }

    public var description: String { rawValue }

    public static func < (a: UserID, b: UserID) -> Bool { a.rawValue < b.rawValue }
}
