import Foundation
import PostgresNIO
import StratusCore

/// Reads a row's cells left to right, each with a concrete type, in one pass. (Decoding a row as
/// one tuple goes through variadic generics resolved at run time, with type-metadata lookups on
/// every row; `Array(row)` makes every cell again.)
struct RowReader {
    private var cells: PostgresRow.Iterator

    init(_ row: PostgresRow) {
        cells = row.makeIterator()
    }

    mutating func nextCell() throws -> PostgresCell {
        guard let cell = cells.next() else { throw StratusError(.internalError, "a database row has fewer columns than expected") }
        return cell
    }

    mutating func next<Value: PostgresDecodable>(_: Value.Type) throws -> Value {
        try nextCell().decode(Value.self)
    }

    /// Whether the next cell is NULL, without moving past it.
    func peekIsNull() throws -> Bool {
        var probe = self
        return try probe.nextCell().bytes == nil
    }

    /// Passes over a cell without decoding it.
    mutating func skip() throws {
        _ = try nextCell()
    }

    // The types every row of the read paths carries, decoded straight from their binary form.
    // `PostgresCell.decode` is general (any source type, a decoding context holding a JSON
    // decoder, errors naming file and line), which showed in profiles of change-feed pages. Any
    // other column type or format goes the general way.

    mutating func next(_: String.Type) throws -> String {
        let cell = try nextCell()
        if cell.format == .binary, cell.dataType == .text || cell.dataType == .varchar, let bytes = cell.bytes {
            return String(buffer: bytes)
        }
        return try cell.decode(String.self)
    }

    /// A nullable text cell (the record columns most rows leave NULL).
    mutating func next(_: String?.Type) throws -> String? {
        let cell = try nextCell()
        guard let bytes = cell.bytes else { return nil }
        if cell.format == .binary, cell.dataType == .text || cell.dataType == .varchar { return String(buffer: bytes) }
        return try cell.decode(String.self)
    }

    mutating func next(_: Int64.Type) throws -> Int64 {
        let cell = try nextCell()
        if cell.format == .binary, cell.dataType == .int8, let bytes = cell.bytes, bytes.readableBytes == 8,
           let value = bytes.getInteger(at: bytes.readerIndex, as: Int64.self) {
            return value
        }
        return try cell.decode(Int64.self)
    }

    /// A user's id, the text fast path's (records carry two).
    mutating func next(_: UserID.Type) throws -> UserID {
        UserID(rawValue: try next(String.self))
    }

    mutating func next(_: UserID?.Type) throws -> UserID? {
        try next(String?.self).map(UserID.init(rawValue:))
    }

    /// A typed id, the int8 fast path's.
    mutating func next<ID: PostgresInt64ID>(_: ID.Type) throws -> ID {
        ID(rawValue: try next(Int64.self))
    }

    mutating func next(_: Bool.Type) throws -> Bool {
        let cell = try nextCell()
        if cell.format == .binary, cell.dataType == .bool, let bytes = cell.bytes, bytes.readableBytes == 1,
           let value = bytes.getInteger(at: bytes.readerIndex, as: UInt8.self) {
            return value != 0
        }
        return try cell.decode(Bool.self)
    }

    mutating func next(_: ByteBuffer.Type) throws -> ByteBuffer {
        let cell = try nextCell()
        if let bytes = cell.bytes { return bytes }
        return try cell.decode(ByteBuffer.self)
    }
}
