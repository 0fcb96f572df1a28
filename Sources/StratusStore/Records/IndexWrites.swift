import Foundation
import Logging
import PostgresNIO
import StratusCore

/// The rows a write adds beside its records: index entries for the indexed fields, and the
/// references that `VALIDATE` and `DELETE_SELF` keep.
/// The rows written beside records: index entries, references and asset references.
struct IndexWrites: Sendable {
    let store: RecordStore
    var database: Database { store.database }
    var logger: Logger { store.logger }
}

extension IndexWrites {
    /// Inserts index entries for the indexed fields of `records`.
    func writeIndexEntries(_ db: DatabaseRef, zoneID: ZoneID, records: [Record], schema: Schema, on connection: PostgresConnection) async throws {
        let entries = Self.indexEntryRows(records, schema: schema)
        guard !entries.isEmpty else { return }
        // All three value kinds in one statement (empty arrays contribute no rows); locations in another.
        if !(entries.ints.values.isEmpty && entries.doubles.values.isEmpty && entries.texts.values.isEmpty) {
            try await connection.statement("""
            INSERT INTO index_entries (container_id, zone_id, record_type, field, v_int, v_double, v_text, record_name)
            SELECT \(db.containerID), \(zoneID), t, f, v, NULL::float8, NULL::text, n
              FROM unnest(\(entries.ints.types)::text[], \(entries.ints.fields)::text[], \(entries.ints.values)::bigint[], \(entries.ints.names)::text[]) AS u(t, f, v, n)
            UNION ALL
            SELECT \(db.containerID), \(zoneID), t, f, NULL::bigint, v, NULL::text, n
              FROM unnest(\(entries.doubles.types)::text[], \(entries.doubles.fields)::text[], \(entries.doubles.values)::float8[], \(entries.doubles.names)::text[]) AS u(t, f, v, n)
            UNION ALL
            SELECT \(db.containerID), \(zoneID), t, f, NULL::bigint, NULL::float8, v, n
              FROM unnest(\(entries.texts.types)::text[], \(entries.texts.fields)::text[], \(entries.texts.values)::text[], \(entries.texts.names)::text[]) AS u(t, f, v, n)
            """, logger: logger)
        }
        let locations = entries.locations
        guard !locations.column.values.isEmpty else { return }
        try await connection.statement("""
            INSERT INTO index_entries (container_id, zone_id, record_type, field, v_cell, v_lat, v_lon, record_name)
            SELECT \(db.containerID)::bigint, \(zoneID)::bigint, t, f, c, la, lo, n
              FROM unnest(\(locations.column.types)::text[], \(locations.column.fields)::text[], \(locations.column.values)::bigint[],
                          \(locations.latitudes)::float8[], \(locations.longitudes)::float8[], \(locations.column.names)::text[]) AS u(t, f, c, la, lo, n)
            """, logger: logger)
    }

    /// The index entries of `records` under `schema`, as parallel arrays per value kind (for `unnest`).
    struct IndexEntryRows: Sendable {
        struct Column<Value: Sendable>: Sendable {
            var types: [String] = []
            var fields: [String] = []
            var values: [Value] = []
            var names: [String] = []

            mutating func append(_ type: String, _ field: String, _ value: Value, _ name: String) {
                types.append(type); fields.append(field); values.append(value); names.append(name)
            }
        }
        /// Location entries: the cell code in `values`, the exact point beside it.
        struct Locations: Sendable {
            var column = Column<Int64>()
            var latitudes: [Double] = []
            var longitudes: [Double] = []

            mutating func append(_ type: String, _ field: String, _ point: GeoPoint, _ name: String) {
                column.append(type, field, Geo.cell(point), name)
                latitudes.append(point.latitude)
                longitudes.append(point.longitude)
            }
        }
        var ints = Column<Int64>()
        var doubles = Column<Double>()
        var texts = Column<String>()
        var locations = Locations()

        var isEmpty: Bool { ints.values.isEmpty && doubles.values.isEmpty && texts.values.isEmpty && locations.column.values.isEmpty }
    }

    static func indexEntryRows(_ records: [Record], schema: Schema) -> IndexEntryRows {
        var rows = IndexEntryRows()
        for record in records {
            guard let fieldSchemas = schema.recordTypes[record.recordType] else { continue }
            for (field, value) in record.fields {
                guard let fieldSchema = fieldSchemas[field], fieldSchema.isIndexed else { continue }
                if fieldSchema.type.scalar == .location {
                    // One entry per distinct point, under the field's geo key.
                    var seen: Set<GeoPoint> = []
                    let values: [FieldValue]
                    if case .list(_, let elements) = value { values = elements } else { values = [value] }
                    for case .location(let members) in values {
                        guard let latitude = members["latitude"], let longitude = members["longitude"] else { continue }
                        let point = GeoPoint(latitude: latitude, longitude: longitude)
                        if seen.insert(point).inserted { rows.locations.append(record.recordType, Geo.key(of: field), point, record.recordName) }
                    }
                    continue
                }
                var entries: [IndexValue] = []
                if case .list(_, let elements) = value {
                    var seen: Set<IndexValue> = []
                    for element in elements { if let entry = IndexValue(element), seen.insert(entry).inserted { entries.append(entry) } }
                } else if let entry = IndexValue(value) {
                    entries.append(entry)
                }
                for entry in entries {
                    switch entry {
                    case .int(let number): rows.ints.append(record.recordType, field, number, record.recordName)
                    case .double(let number): rows.doubles.append(record.recordType, field, number, record.recordName)
                    case .text(let text): rows.texts.append(record.recordType, field, text, record.recordName)
                    }
                }
                // A SEARCHABLE string's tokens, once each per record, under the field's token key.
                if fieldSchema.searchable {
                    var tokens: Set<String> = []
                    for entry in entries {
                        guard case .text(let text) = entry, fieldSchema.type.scalar == .string else { continue }
                        for token in TextTokens.tokens(of: text) where tokens.insert(token).inserted {
                            rows.texts.append(record.recordType, TextTokens.key(of: field), token, record.recordName)
                        }
                    }
                }
            }
        }
        return rows
    }

    /// Inserts `VALIDATE` and `DELETE_SELF` references of `records`.
    func writeReferences(_ db: DatabaseRef, zoneID: ZoneID, records: [Record], on connection: PostgresConnection) async throws {
        var targets: [String] = []
        var sources: [String] = []
        var fields: [String] = []
        var actions: [Int16] = []
        var seen: Set<[String]> = []
        for record in records {
            for (field, value) in record.fields {
                for reference in RecordStore.references(in: value) where reference.action != .none {
                    guard seen.insert([reference.recordName, record.recordName, field]).inserted else { continue }
                    targets.append(reference.recordName)
                    sources.append(record.recordName)
                    fields.append(field)
                    actions.append(reference.action == .validate ? 1 : 2)
                }
            }
        }
        guard !targets.isEmpty else { return }
        try await connection.statement("""
            INSERT INTO record_references (container_id, zone_id, target_name, source_name, field, action)
            SELECT \(db.containerID), \(zoneID), t, s, f, a FROM unnest(\(targets)::text[], \(sources)::text[], \(fields)::text[], \(actions)::int2[]) AS u(t, s, f, a)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }
}
