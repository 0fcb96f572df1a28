import NIOCore
import PostgresNIO
import StratusCore

// A typed id is bound and read as the `int8` it wraps (its type, format and decoding are
// PostgresNIO's for `RawRepresentable`; encoding is spelled here so that it cannot throw, as
// SQL interpolation needs).

extension ContainerID: PostgresNonThrowingEncodable, PostgresDecodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .int8Array }

    @inlinable
    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeInteger(rawValue, as: Int64.self)
    }
}

extension ZoneID: PostgresNonThrowingEncodable, PostgresDecodable, PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .int8Array }

    @inlinable
    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeInteger(rawValue, as: Int64.self)
    }
}
