import Foundation
import NIOCore
import PostgresNIO

/// A one-dimensional PostgreSQL array in its binary wire form, written straight from the values.
///
/// PostgresNIO encodes a Swift array element by element through its generic `PostgresEncodable`
/// machinery, each value with its own `ByteBuffer` capacity and uniqueness checks, which showed in
/// profiles of the request log's batches, the shared lookup's key arrays and a create's 36
/// arrays. This writes the same
/// bytes (`BinaryArrayTests`) in one pass through a raw pointer: the header (one dimension, no
/// nulls, the element type, the length, lower bound 1; an empty array has no dimension, as
/// PostgresNIO writes it), then each value after its length.
struct BinaryArray: PostgresDynamicTypeEncodable {
    let psqlType: PostgresDataType
    var psqlFormat: PostgresFormat { .binary }
    private var bytes: ByteBuffer

    /// The header, then `elementBytes` bytes that `write` fills through a raw pointer (one
    /// capacity check for the whole array, not one per value as `ByteBuffer.writeInteger` makes).
    private init(type: PostgresDataType, element: PostgresDataType, count: Int, elementBytes: Int,
                 _ write: (UnsafeMutableRawPointer) -> Void) {
        psqlType = type
        bytes = ByteBuffer()
        bytes.reserveCapacity(20 + elementBytes)
        bytes.writeInteger(Int32(count == 0 ? 0 : 1))   // dimensions: none for an empty array, as PostgresNIO writes it
        bytes.writeInteger(Int32(0))   // no nulls
        bytes.writeInteger(element.rawValue)
        guard count > 0 else { return }
        bytes.writeInteger(Int32(count))
        bytes.writeInteger(Int32(1))   // lower bound
        bytes.writeWithUnsafeMutableBytes(minimumWritableBytes: elementBytes) { memory in
            if elementBytes > 0 { write(memory.baseAddress!) }
            return elementBytes
        }
    }

    /// Values of a fixed width, each after its length: `size` bytes, big-endian.
    private static func fixed<Values: Collection, Value: FixedWidthInteger>(_ values: Values, type: PostgresDataType, element: PostgresDataType,
                                                                         _ value: (Values.Element) -> Value) -> BinaryArray {
        let size = MemoryLayout<Value>.size
        return BinaryArray(type: type, element: element, count: values.count, elementBytes: values.count * (4 + size)) { out in
            var offset = 0
            for element in values {
                out.storeBytes(of: Int32(size).bigEndian, toByteOffset: offset, as: Int32.self)
                out.storeBytes(of: value(element).bigEndian, toByteOffset: offset + 4, as: Value.self)
                offset += 4 + size
            }
        }
    }

    /// PostgreSQL's epoch, 2000-01-01 00:00 UTC.
    private static let postgresEpoch = Date(timeIntervalSince1970: 946_684_800)

    /// `timestamptz[]`: microseconds since 2000-01-01, computed and truncated as PostgresNIO does
    /// for a `Date` (the interval between the two dates, not between their 1970 offsets: the
    /// floating-point rounding differs, by a microsecond for some dates).
    static func timestamps<Values: Collection<Date>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .timestamptzArray, element: .timestamptz) { Int64($0.timeIntervalSince(postgresEpoch) * 1_000_000) }
    }

    /// `text[]`: each value's UTF-8 after its length, copied whole.
    static func texts<Values: Collection<String>>(_ values: Values) -> BinaryArray {
        var total = 0
        for value in values { total += 4 + value.utf8.count }
        return BinaryArray(type: .textArray, element: .text, count: values.count, elementBytes: total) { out in
            var offset = 0
            for var value in values {
                let length = value.utf8.count
                out.storeBytes(of: Int32(length).bigEndian, toByteOffset: offset, as: Int32.self)
                value.withUTF8 { utf8 in
                    if length > 0 { (out + offset + 4).copyMemory(from: utf8.baseAddress!, byteCount: length) }
                }
                offset += 4 + length
            }
        }
    }

    /// `smallint[]`.
    static func int16s<Values: Collection<Int16>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .int2Array, element: .int2) { $0 }
    }

    /// `integer[]`.
    static func int32s<Values: Collection<Int32>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .int4Array, element: .int4) { $0 }
    }

    /// `bigint[]`.
    static func int64s<Values: Collection<Int64>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .int8Array, element: .int8) { $0 }
    }

    /// `double precision[]`: each value's IEEE 754 bits.
    static func float8s<Values: Collection<Double>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .float8Array, element: .float8) { $0.bitPattern }
    }

    /// `boolean[]`: one byte each.
    static func bools<Values: Collection<Bool>>(_ values: Values) -> BinaryArray {
        fixed(values, type: .boolArray, element: .bool) { $0 ? 1 as UInt8 : 0 }
    }

    func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        byteBuffer.writeImmutableBuffer(bytes)
    }
}
