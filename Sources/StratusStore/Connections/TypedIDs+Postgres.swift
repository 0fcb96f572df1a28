import NIOCore
import PostgresNIO
import StratusCore

/// A typed id as PostgreSQL holds it: bound and read as the `int8` it wraps (type, format and
/// decoding are PostgresNIO's for `RawRepresentable`; encoding is spelled here so that it cannot
/// throw, as SQL interpolation needs).
public protocol PostgresInt64ID: Int64ID, PostgresNonThrowingEncodable, PostgresDecodable, PostgresArrayEncodable, PostgresArrayDecodable {}

extension PostgresInt64ID {
    public static var psqlArrayType: PostgresDataType { .int8Array }

    @inlinable
    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeInteger(rawValue, as: Int64.self)
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
}
