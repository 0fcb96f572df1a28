import Foundation
import PostgresNIO

extension RecordStore {
    /// The sync-token key of a server a container was imported from (`ContainerArchive`).
    public struct ImportedSyncKey: Sendable, Equatable {
        public var key: [UInt8]
        /// The container's id on that server, as its tokens name it.
        public var sourceContainerID: Int64
        /// Subtracted from the tokens' change positions.
        public var shift: Int64
    }

    /// The sync-token keys of the servers `containerID` was imported from (none for most).
    public func importedSyncKeys(containerID: Int64) async throws -> [ImportedSyncKey] {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT sync_key, source_container_id, xid_shift FROM container_imports WHERE container_id = \(containerID)
                ORDER BY imported_at DESC
                """, logger: logger).map { row in
                let (key, source, shift) = try row.decode((Data, Int64, Int64).self)
                return ImportedSyncKey(key: Array(key), sourceContainerID: source, shift: shift)
            }
        }
    }
}
