import Logging
import PostgresNIO
import StratusCore

extension IndexWrites {
    /// Marks every asset the planned saves hold as used now, in the write's transaction, and
    /// fails the saves holding an asset that is no longer stored (swept, or never uploaded to this
    /// container). Moving `used_at` (rather than only reading the row) is what keeps the sweep off
    /// it: a sweep that chose the row before this write committed re-reads it when it locks it,
    /// sees it used and skips it, and after the commit the asset has its references.
    func useAssets(_ db: DatabaseRef, outcomes: inout [Result<PlannedWrite, StratusError>], on connection: PostgresConnection) async throws {
        var wanted: Set<String> = []
        for outcome in outcomes {
            if case .success(.save(let record, _)) = outcome { wanted.formUnion(record.assets.map(\.fileChecksum)) }
        }
        guard !wanted.isEmpty else { return }
        // Locked in checksum order: two writes using the same assets never wait on each other in a cycle.
        let rows = try await connection.rows("""
            UPDATE assets a SET used_at = now()
            FROM (SELECT checksum FROM assets WHERE container_id = \(db.containerID) AND checksum = ANY(\(Array(wanted).sorted())::text[])
                  ORDER BY checksum FOR NO KEY UPDATE) l
            WHERE a.container_id = \(db.containerID) AND a.checksum = l.checksum
            RETURNING a.checksum
            """, logger: logger)
        var stored: Set<String> = []
        for row in rows { stored.insert(try row.decode(String.self)) }
        guard stored.count < wanted.count else { return }
        for index in outcomes.indices {
            guard case .success(.save(let record, _)) = outcomes[index],
                  let missing = record.assets.first(where: { !stored.contains($0.fileChecksum) }) else { continue }
            outcomes[index] = .failure(StratusError(.notFound, "record '\(Names.printable(record.recordName))' holds asset \(missing.fileChecksum), which is no longer stored (an upload not saved into a record within its receipt's lifetime is deleted); upload it again"))
        }
    }

    /// Records which assets the written live records hold (their old references went with `WriteRecords`).
    func writeAssetReferences(_ db: DatabaseRef, zoneID: ZoneID, records: [Record], on connection: PostgresConnection) async throws {
        var names: [String] = []
        var checksums: [String] = []
        for record in records where !record.deleted {
            for asset in record.assets {
                names.append(record.recordName)
                checksums.append(asset.fileChecksum)
            }
        }
        guard !names.isEmpty else { return }
        try await connection.statement("""
            INSERT INTO asset_references (container_id, zone_id, record_name, checksum)
            SELECT \(db.containerID), \(zoneID), n, k FROM unnest(\(names)::text[], \(checksums)::text[]) AS u(n, k)
            ON CONFLICT DO NOTHING
            """, logger: logger)
    }
}
