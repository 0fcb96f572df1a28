/// An id PostgreSQL numbers as `int8`, given a type of its own (`ContainerID`, `ZoneID`, `SessionID`, …) so that
/// one kind of id cannot be passed where another, or any other number, is meant. Written as the
/// number it wraps: in SQL, in text and in logs.
public protocol Int64ID: RawRepresentable, Hashable, Comparable, Sendable, CustomStringConvertible, ExpressibleByIntegerLiteral
    where RawValue == Int64, IntegerLiteralType == Int64 {
    init(rawValue: Int64)
}

extension Int64ID {
    @inlinable
    public init(_ rawValue: Int64) { self.init(rawValue: rawValue) }

    public init(integerLiteral value: Int64) { self.init(rawValue: value) }

    public var description: String { String(rawValue) }

    public static func < (a: Self, b: Self) -> Bool { a.rawValue < b.rawValue }
}

/// A container's id (`containers.container_id`).
public struct ContainerID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// A zone's id (`zones.zone_id`).
public struct ZoneID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// A user's session (`sessions.session_id`): what a web auth token names.
public struct SessionID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// An API token (`api_tokens.token_id`).
public struct APITokenID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// An operator account (`operators.operator_id`).
public struct OperatorID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// An operator's credential: an API token or a console session (`operator_credentials.credential_id`).
public struct CredentialID: Int64ID {
    public let rawValue: Int64

    @inlinable
    public init(rawValue: Int64) { self.rawValue = rawValue }
}
