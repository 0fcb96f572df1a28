import NIOCore
import PostgresNIO
import StratusCore

/// A typed id as PostgreSQL holds it: bound and read as the `int8` it wraps (its type and format
/// are PostgresNIO's for `RawRepresentable`; encoding and decoding are spelled here, inlinable, so
/// that they cannot throw where SQL interpolation needs it and are specialised like `Int64`'s).
public protocol PostgresInt64ID: Int64ID, PostgresNonThrowingEncodable, PostgresDecodable, PostgresArrayEncodable, PostgresArrayDecodable {}

extension PostgresInt64ID {
    public static var psqlArrayType: PostgresDataType { .int8Array }

    @inlinable
    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeInteger(rawValue, as: Int64.self)
    }

    @inlinable
    public init<JSONDecoder: PostgresJSONDecoder>(from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat,
                                                  context: PostgresDecodingContext<JSONDecoder>) throws {
        self.init(rawValue: try Int64(from: &buffer, type: type, format: format, context: context))
    }
}

extension ContainerID: PostgresInt64ID {}
extension ZoneID: PostgresInt64ID {}
extension SessionID: PostgresInt64ID {}
extension APITokenID: PostgresInt64ID {}
extension OperatorID: PostgresInt64ID {}
extension CredentialID: PostgresInt64ID {}

/// A user's id as PostgreSQL holds it: bound and read as the `text` it wraps.
extension UserID: PostgresNonThrowingEncodable, PostgresDecodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .textArray }

    @inlinable
    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        rawValue.encode(into: &byteBuffer, context: context)
    }

    @inlinable
    public init<JSONDecoder: PostgresJSONDecoder>(from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat,
                                                  context: PostgresDecodingContext<JSONDecoder>) throws {
        self.init(rawValue: try String(from: &buffer, type: type, format: format, context: context))
    }
}
