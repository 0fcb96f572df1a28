import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO
import StratusCore

/// Where asset bytes are kept.
public enum AssetStorage: Sendable, Equatable {
    /// Files named by their hash under `directory` (`<container>/<2 hex>/<64 hex>`), uploads
    /// staged in `directory/staging`. Every server process of one database must see the same folder.
    case files(directory: String)
    /// PostgreSQL large objects, in the service's database (backed up with it); uploads staged in
    /// `stagingDirectory` on the local disk first, so a slow client never holds a database connection.
    case postgres(stagingDirectory: String)
}

/// An asset as stored.
public struct StoredAsset: Sendable, Equatable {
    public var checksum: String
    public var size: Int64
    public var contentType: String
    /// The large object holding the bytes (`AssetStorage.postgres`).
    public var largeObject: Int64?
}

/// The bytes of assets, content-addressed by SHA-256 and deduplicated per container, behind one
/// small interface: stage an upload (the server streams it to `stagingPath()` while hashing it),
/// `commit` it, read it back (`asset`, then `filePath` or `readLargeObject`), `sweep` what no
/// record holds. A third store (S3-compatible) fits the same shape: `commit` uploads the staged
/// file under its hash and records the row, downloads redirect to (or stream from) the object,
/// `sweep` deletes objects in the same transaction that deletes their rows.
public final class AssetStore: Sendable {
    public let storage: AssetStorage
    let database: Database
    let logger: Logger
    /// Large objects are written and read in pieces of this size.
    public static let pieceBytes = 256 * 1024

    public init(storage: AssetStorage, database: Database, logger: Logger) {
        self.storage = storage
        self.database = database
        self.logger = logger
        do {
            try FileManager.default.createDirectory(atPath: stagingDirectory, withIntermediateDirectories: true)
        } catch {
            logger.error("the asset staging folder cannot be made; uploads will fail", metadata: ["stratus.path": "\(stagingDirectory)", "stratus.error": "\(error)"])
        }
    }

    public var stagingDirectory: String {
        switch storage {
        case .files(let directory): return directory + "/staging"
        case .postgres(let staging): return staging
        }
    }

    /// A new file name to stage an upload in.
    public func stagingPath() -> String {
        stagingDirectory + "/" + UUID().uuidString.lowercased() + ".part"
    }

    /// Where the files store keeps a container's asset.
    public func filePath(containerID: ContainerID, checksum: String) -> String? {
        guard case .files(let directory) = storage, let digest = AssetValue.digest(of: checksum) else { return nil }
        let hex = digest.map { String($0, radix: 16).leftPadded(to: 2) }.joined()
        return "\(directory)/\(containerID)/\(hex.prefix(2))/\(hex)"
    }

    /// Stores a staged upload (whose bytes hash to `checksum`) for `containerID`: one row per
    /// distinct content, the bytes placed while its row is locked (so a sweep deleting the same
    /// content waits, or is waited for). An asset already stored only has its `used_at` moved.
    /// The staged file is gone afterwards, whatever happens.
    public func commit(containerID: ContainerID, stagedAt staged: String, checksum: String, size: Int64, contentType: String) async throws {
        defer { unlink(staged) }
        try await database.transaction { connection in
            let row = try await connection.rows("""
                INSERT INTO assets AS a (container_id, checksum, size, content_type) VALUES (\(containerID), \(checksum), \(size), \(contentType))
                ON CONFLICT (container_id, checksum) DO UPDATE SET used_at = excluded.used_at
                RETURNING (a.xmax = 0), a.lo_oid::bigint
                """, logger: logger).first!.decode((Bool, Int64?).self)
            let (inserted, largeObject) = row
            switch storage {
            case .files:
                let path = filePath(containerID: containerID, checksum: checksum)!
                // A row whose file is missing (a sweep that removed the file and then failed to commit) gets it back.
                if inserted || !FileManager.default.fileExists(atPath: path) {
                    try await Self.place(staged, at: path)
                }
            case .postgres:
                guard inserted || largeObject == nil else { return }
                let oid = try await connection.rows("SELECT lo_create(0)::bigint", logger: logger).first!.decode(Int64.self)
                try await Self.copy(staged, into: oid, on: connection, logger: logger)
                try await connection.statement("UPDATE assets SET lo_oid = \(oid)::oid WHERE container_id = \(containerID) AND checksum = \(checksum)",
                                               logger: logger)
            }
        }
    }

    /// Moves a staged file to its place and makes the move durable.
    static func place(_ staged: String, at path: String) async throws {
        try await NIOThreadPool.singleton.runIfActive {
            let folder = (path as NSString).deletingLastPathComponent
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            guard rename(staged, path) == 0 else {
                throw StratusError(.internalError, "the asset could not be stored", underlying: POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO))
            }
            let descriptor = open(folder, O_RDONLY)
            if descriptor >= 0 {
                fsync(descriptor)
                close(descriptor)
            }
        }
    }

    /// Copies a staged file into a large object, a piece at a time.
    static func copy(_ staged: String, into oid: Int64, on connection: PostgresConnection, logger: Logger) async throws {
        guard let handle = FileHandle(forReadingAtPath: staged) else {
            throw StratusError(.internalError, "the staged upload could not be read")
        }
        defer { try? handle.close() }
        var offset: Int64 = 0
        while true {
            let piece = try await NIOThreadPool.singleton.runIfActive { try handle.read(upToCount: pieceBytes) ?? Data() }
            guard !piece.isEmpty else { return }
            try await connection.statement("SELECT lo_put(\(oid)::oid, \(offset), \(ByteBuffer(bytes: piece)))", logger: logger)
            offset += Int64(piece.count)
        }
    }

    /// The stored asset, or `nil`.
    public func asset(containerID: ContainerID, checksum: String) async throws -> StoredAsset? {
        try await database.withConnection { connection in
            try await connection.rows("""
                SELECT size, content_type, lo_oid::bigint FROM assets WHERE container_id = \(containerID) AND checksum = \(checksum)
                """, logger: logger).first.map { row in
                let (size, type, oid) = try row.decode((Int64, String, Int64?).self)
                return StoredAsset(checksum: checksum, size: size, contentType: type, largeObject: oid)
            }
        }
    }

    /// `length` bytes of a large object from `offset`.
    public func readLargeObject(_ oid: Int64, offset: Int64, length: Int) async throws -> ByteBuffer {
        try await database.withConnection { connection in
            try await connection.rows("SELECT lo_get(\(oid)::oid, \(offset), \(length)::int4)", logger: logger).first!.decode(ByteBuffer.self)
        }
    }

    /// Marks assets used now (`assets/rereference`, whose receipts must outlive a sweep); returns those stored.
    public func use(containerID: ContainerID, checksums: Set<String>) async throws -> Set<String> {
        guard !checksums.isEmpty else { return [] }
        return try await database.withConnection { connection in
            var stored: Set<String> = []
            for row in try await connection.rows("""
                UPDATE assets SET used_at = now() WHERE container_id = \(containerID) AND checksum = ANY(\(Array(checksums).sorted())::text[])
                RETURNING checksum
                """, logger: logger) {
                stored.insert(try row.decode(String.self))
            }
            return stored
        }
    }

    /// Deletes, with their bytes, up to `limit` assets that no record holds and nothing used for
    /// `unusedFor` (the receipts' lifetime: a receipt still valid can still be saved). Returns
    /// how many. The bytes go before the rows' deletion commits: an upload of the same content
    /// meanwhile waits on the row, then stores its bytes afresh.
    ///
    /// On Citus the locking statement runs once per container that has such assets (Citus locks
    /// rows only in a statement held to one container), after a plain read finds them.
    @discardableResult
    public func sweep(unusedFor: Duration, limit: Int = 500) async throws -> Int {
        guard database.configuration.citusCoordinator else { return try await sweep(unusedFor: unusedFor, limit: limit, in: nil) }
        let containers = try await database.withConnection { connection in
            try await connection.rows("""
                SELECT DISTINCT container_id FROM assets a
                WHERE used_at < now() - make_interval(secs => \(Double(unusedFor.components.seconds)))
                  AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.container_id = a.container_id AND r.checksum = a.checksum)
                """, logger: logger).map { try $0.decode(Int64.self) }
        }
        var count = 0
        for container in containers where count < limit {
            count += try await sweep(unusedFor: unusedFor, limit: limit - count, in: container)
        }
        return count
    }

    /// `sweep` over every container, or over one.
    private func sweep(unusedFor: Duration, limit: Int, in container: Int64?) async throws -> Int {
        try await database.transaction { connection in
            let rows = try await connection.rows("""
                WITH doomed AS (
                    SELECT container_id, checksum FROM assets a
                    WHERE used_at < now() - make_interval(secs => \(Double(unusedFor.components.seconds)))
                      \(unescaped: container.map { "AND container_id = \($0)" } ?? "")
                      AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.container_id = a.container_id AND r.checksum = a.checksum)
                    ORDER BY used_at LIMIT \(limit)
                    FOR UPDATE SKIP LOCKED
                )
                DELETE FROM assets a USING doomed d WHERE a.container_id = d.container_id AND a.checksum = d.checksum
                  \(unescaped: container.map { "AND a.container_id = \($0)" } ?? "")
                RETURNING a.container_id, a.checksum, a.lo_oid::bigint
                """, logger: logger)
            var count = 0
            for row in rows {
                let (containerID, checksum, oid) = try row.decode((ContainerID, String, Int64?).self)
                if let oid {
                    try await connection.statement("SELECT lo_unlink(\(oid)::oid)", logger: logger)
                } else if let path = filePath(containerID: containerID, checksum: checksum) {
                    unlink(path)
                }
                count += 1
            }
            return count
        }
    }

    /// Removes staged uploads older than `age` (left by a process that died mid-upload).
    public func cleanStaging(olderThan age: TimeInterval) {
        let folder = stagingDirectory
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return }
        let cutoff = Date().addingTimeInterval(-age)
        for name in names where name.hasSuffix(".part") {
            let path = folder + "/" + name
            if let modified = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date, modified < cutoff {
                unlink(path)
            }
        }
    }

    /// Stored assets of a container and their bytes (`stratus usage`, tests).
    public func totals(containerID: ContainerID) async throws -> (assets: Int64, bytes: Int64) {
        try await database.withConnection { connection in
            try await connection.rows("SELECT count(*), coalesce(sum(size), 0)::bigint FROM assets WHERE container_id = \(containerID)",
                                      logger: logger).first!.decode((Int64, Int64).self)
        }
    }
}

extension String {
    func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
