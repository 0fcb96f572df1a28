import NIOCore
import PostgresNIO
import StratusCore

/// A container id is bound and read as the `int8` it is.
extension ContainerID: PostgresNonThrowingEncodable, PostgresDecodable {
    public static var psqlType: PostgresDataType { .int8 }
    public static var psqlFormat: PostgresFormat { .binary }

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

extension ContainerID: PostgresArrayEncodable, PostgresArrayDecodable {
    public static var psqlArrayType: PostgresDataType { .int8Array }
}
