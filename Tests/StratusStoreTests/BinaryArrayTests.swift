import Foundation
import NIOCore
import PostgresNIO
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// `BinaryArray` writes the bytes PostgresNIO's own array encoding writes, for every element type
/// the service sends that way (the request log's batches, the shared lookup's keys, the write
/// statements' records and index entries); the live tests (`RequestLogTests`,
/// `StatementSharingTests`, every test that saves records) read what PostgreSQL stored from them.
@Suite struct BinaryArrayTests {
    private func bytes(_ array: BinaryArray) -> ByteBuffer {
        var buffer = ByteBuffer()
        array.encode(into: &buffer, context: .default)
        return buffer
    }

    private func bytes<Value: PostgresArrayEncodable>(_ values: [Value]) throws -> ByteBuffer {
        var buffer = ByteBuffer()
        try values.encode(into: &buffer, context: .default)
        return buffer
    }

    @Test func textsMatchPostgresNIO() throws {
        for values in [["records/lookup", "", "é ☃ 𝄞", String(repeating: "x", count: 300)], [], [""]] {
            try #expect(bytes(BinaryArray.texts(values)) == bytes(values), "\(values)")
            #expect(BinaryArray.texts(values).psqlType == [String].psqlType)
        }
    }

    @Test func integersMatchPostgresNIO() throws {
        let small: [Int16] = [0, 1, -1, .max, .min, 404]
        let medium: [Int32] = [0, 17, -5, .max, .min]
        let large: [Int64] = [0, 1 << 40, -(1 << 50), .max, .min]
        try #expect(bytes(BinaryArray.int16s(small)) == bytes(small))
        try #expect(bytes(BinaryArray.int32s(medium)) == bytes(medium))
        try #expect(bytes(BinaryArray.int64s(large)) == bytes(large))
        try #expect(bytes(BinaryArray.int64s([Int64]())) == bytes([Int64]()))
        #expect(BinaryArray.int16s(small).psqlType == [Int16].psqlType)
        #expect(BinaryArray.int32s(medium).psqlType == [Int32].psqlType)
        #expect(BinaryArray.int64s(large).psqlType == [Int64].psqlType)
    }

    @Test func doublesAndBoolsMatchPostgresNIO() throws {
        let doubles: [Double] = [0, -0.0, 1.5, -273.15, .greatestFiniteMagnitude, .leastNonzeroMagnitude, .infinity, 45.123456789]
        let bools = [true, false, false, true]
        try #expect(bytes(BinaryArray.float8s(doubles)) == bytes(doubles))
        try #expect(bytes(BinaryArray.bools(bools)) == bytes(bools))
        try #expect(bytes(BinaryArray.float8s([Double]())) == bytes([Double]()))
        try #expect(bytes(BinaryArray.bools([Bool]())) == bytes([Bool]()))
        #expect(BinaryArray.float8s(doubles).psqlType == [Double].psqlType)
        #expect(BinaryArray.bools(bools).psqlType == [Bool].psqlType)
    }

    @Test func timestampsMatchPostgresNIO() throws {
        let dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: 1_795_000_000.123456), Date(timeIntervalSince1970: 946_684_800),
                     Date(timeIntervalSince1970: 946_684_799.5), Date()]
        try #expect(bytes(BinaryArray.timestamps(dates)) == bytes(dates))
        // Many instants of today, at random sub-second offsets (computed the other way, one in a
        // few came out a microsecond apart from PostgresNIO's).
        let now = Date().timeIntervalSinceReferenceDate
        let many = (0..<10_000).map { _ in Date(timeIntervalSinceReferenceDate: now + Double.random(in: -86_400...86_400)) }
        try #expect(bytes(BinaryArray.timestamps(many)) == bytes(many))
        #expect(BinaryArray.timestamps(dates).psqlType == [Date].psqlType)
    }
}
