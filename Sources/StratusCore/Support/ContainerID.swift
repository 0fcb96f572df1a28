/// A container's id, as PostgreSQL numbers it (`containers.container_id`). Its own type, so a
/// container's id cannot be passed where another number is meant; written as the number it
/// wraps (in SQL, in text and in logs).
public struct ContainerID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }

    @inlinable
    public init(_ rawValue: Int64) { self.rawValue = rawValue }

    public init(integerLiteral value: Int64) { self.rawValue = value }

    /// The id in text (`12`), or `nil` when `text` is not a number.
    public init?(_ text: some StringProtocol) {
        guard let value = Int64(text) else { return nil }
        self.rawValue = value
    }

    public var description: String { String(rawValue) }

    public static func < (a: ContainerID, b: ContainerID) -> Bool { a.rawValue < b.rawValue }
}
