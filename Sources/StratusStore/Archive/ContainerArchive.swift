import Foundation
import Logging
import NIOCore
import PostgresNIO
import StratusCore
import Crypto

/// A container's whole state as one file, and back (`stratus container export|import`).
///
/// The file is text, one item per line: a kind, a tab, and JSON.
///
/// - `stratus-container-export` and the header: format version, the migration the data is at,
///   the container's row, the environment exported (or all), the rows per table, the highest
///   change position, and the exporting server's sync-token key.
/// - `<table>` and one row of that table as PostgreSQL's `row_to_json` writes it (every table
///   with a `container_id`, except the few listed in `notCarried`).
/// - `assets` rows, each followed by its bytes in `asset-bytes` lines (base64, 1 MiB a line).
/// - `end` and the number of rows: a file cut short is refused whole.
///
/// The export reads everything in one REPEATABLE READ transaction: a consistent snapshot, while
/// the service keeps running. The import writes everything in one transaction: all or nothing.
public struct ContainerArchive: Sendable {
    let database: Database
    let assets: AssetStore
    let logger: Logger

    public init(database: Database, assets: AssetStore, logger: Logger) {
        self.database = database
        self.assets = assets
        self.logger = logger
    }

    public static let format = "stratus-container-export"
    public static let formatVersion: Int64 = 1
    /// Bytes of an asset per `asset-bytes` line.
    static let assetPiece = 1 << 20
    /// Rows per INSERT on import.
    static let batchRows = 1000

    /// Tables with a container key that are not carried: what only made sense on the old server
    /// (sessions and web courier tokens are sealed with its secret, so a new server could not open
    /// them: users sign in again, clients ask for a new courier token), short-lived bookkeeping, or
    /// the team (its members are the old server's operators).
    /// `containers`, `assets` and `container_imports` are carried, by hand.
    static let notCarried: Set<String> = ["containers", "sessions", "courier_tokens", "notifications", "signature_replays",
                                          "signin_failures", "assets", "container_imports", "container_members"]
    /// Tables whose `change_xid` orders change feeds (moved on import: see `ContainerImport`).
    static let positioned: Set<String> = ["zones", "records", "share_participants", "share_moves"]

    /// What one export wrote.
    public struct Summary: Sendable {
        public var containerName: String
        public var rows: Int
        public var records: Int
        public var assets: Int
        public var assetBytes: Int64
    }

    /// A table of the container's data.
    struct Table {
        var name: String
        var hasEnvironment: Bool
        var identityColumns: [String]
    }

    /// Every table with a `container_id` column, with what the copy needs to know of it.
    static func tables(on connection: PostgresConnection, logger: Logger) async throws -> [Table] {
        try await connection.rows("""
            SELECT c.table_name::text, bool_or(c.column_name = 'environment'),
                   coalesce(array_agg(c.column_name::text ORDER BY c.column_name) FILTER (WHERE c.is_identity = 'YES'), '{}')
            FROM information_schema.columns c
            JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE'
            GROUP BY c.table_name HAVING bool_or(c.column_name = 'container_id')
            ORDER BY c.table_name
            """, logger: logger).map { row in
            let (name, hasEnvironment, identity) = try row.decode((String, Bool, [String]).self)
            return Table(name: name, hasEnvironment: hasEnvironment, identityColumns: identity)
        }
    }

    /// The newest migration applied to the database.
    static func migrationVersion(on connection: PostgresConnection, logger: Logger) async throws -> Int64 {
        try await connection.rows("SELECT coalesce(max(version), 0)::bigint FROM schema_migrations", logger: logger).first!.decode(Int64.self)
    }

    /// Writes container `name` (one environment's data, or all) through `write`, reporting rows
    /// written and the total after each piece. `syncKey` goes into the header (see `ContainerImport`).
    public func export(container name: String, environment: ContainerEnvironment?, syncKey: [UInt8],
                       write: @escaping (String) throws -> Void, progress: (Int, Int) -> Void) async throws -> Summary {
        try await database.transaction { connection in
            try await connection.statement("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
            try await Database.allowLongStatements(on: connection, logger: logger)
            guard let row = try await connection.rows("SELECT container_id, row_to_json(c)::text FROM containers c WHERE name = \(name)",
                                                      logger: logger).first else {
                throw StratusError(.notFound, "no container named '\(name)' on this server ('stratus container list' shows them)")
            }
            let (containerID, containerRow) = try row.decode((ContainerID, String).self)
            let tables = try await Self.tables(on: connection, logger: logger).filter { !Self.notCarried.contains($0.name) || $0.name == "assets" }
            var counts: [String: JSON] = [:]
            var total = 0
            for table in tables {
                let count = try await connection.rows(Self.select("count(*)", from: table, containerID, environment), logger: logger)
                    .first!.decode(Int64.self)
                counts[table.name] = .int(count)
                total += Int(count)
            }
            let imports = try await connection.rows("SELECT count(*) FROM container_imports WHERE container_id = \(containerID)", logger: logger)
                .first!.decode(Int64.self)
            counts["container_imports"] = .int(imports)
            total += Int(imports)
            var highest: Int64 = 0
            for table in Self.positioned.sorted() {
                let value = try await connection.rows(Self.select("coalesce(max(change_xid), 0)", from: Table(name: table, hasEnvironment: false, identityColumns: []),
                                                                  containerID, nil), logger: logger).first!.decode(Int64.self)
                highest = max(highest, value)
            }
            let header: JSON = [
                "formatVersion": .int(Self.formatVersion),
                "migration": .int(try await Self.migrationVersion(on: connection, logger: logger)),
                "container": .raw(Array(containerRow.utf8)),
                "containerName": .string(name),
                "containerID": .int(containerID.rawValue),
                "environment": environment.map { .string($0.rawValue) } ?? .null,
                "exportedAt": .string(ISO8601DateFormatter().string(from: Date())),
                "rows": .object(counts),
                "highestChangeXid": .int(highest),
                "syncKey": .string(Data(syncKey).base64EncodedString()),
            ]
            try write(Self.format + "\t" + JSONWriter.string(header) + "\n")
            var summary = Summary(containerName: name, rows: 0, records: 0, assets: 0, assetBytes: 0)
            progress(0, total)
            for table in tables {
                let query = Self.select("row_to_json(t)::text", from: table, containerID, environment)
                var lines = ""
                for try await row in try await connection.query(query, logger: logger) {
                    let json = try row.decode(String.self)
                    lines += table.name + "\t" + json + "\n"
                    summary.rows += 1
                    if table.name == "records" { summary.records += 1 }
                    if table.name == "assets" {
                        try write(lines)
                        lines = ""
                        summary.assets += 1
                        summary.assetBytes += try await writeAssetBytes(rowJSON: json, containerID: containerID, on: connection, write: write)
                    }
                    if lines.utf8.count >= 1 << 16 {
                        try write(lines)
                        lines = ""
                        progress(summary.rows, total)
                    }
                }
                try write(lines)
                progress(summary.rows, total)
            }
            for row in try await connection.rows("SELECT row_to_json(i)::text FROM container_imports i WHERE container_id = \(containerID)", logger: logger) {
                try write("container_imports\t" + (try row.decode(String.self)) + "\n")
                summary.rows += 1
            }
            try write("end\t" + JSONWriter.string(["rows": .int(Int64(summary.rows))]) + "\n")
            progress(summary.rows, total)
            return summary
        }
    }

    /// `SELECT <what> FROM <table> t` of the container's rows (of `environment`, for a table that has one).
    static func select(_ what: String, from table: Table, _ containerID: ContainerID, _ environment: ContainerEnvironment?) -> PostgresQuery {
        var binds = PostgresBindings()
        binds.append(containerID)
        var sql = "SELECT \(what) FROM \(table.name) t WHERE container_id = $1"
        if let environment, table.hasEnvironment {
            binds.append(environment.code)
            sql += " AND environment = $2"
        }
        return PostgresQuery(unsafeSQL: sql, binds: binds)
    }

    /// Writes an asset's bytes after its row; returns their count.
    private func writeAssetBytes(rowJSON: String, containerID: ContainerID, on connection: PostgresConnection,
                                 write: (String) throws -> Void) async throws -> Int64 {
        let row = try JSONParser.parse(rowJSON)
        guard let checksum = row["checksum"]?.stringValue, case .int(let size)? = row["size"] else {
            throw StratusError(.internalError, "an asset row without checksum or size: \(rowJSON.prefix(200))")
        }
        var offset: Int64 = 0
        func line(_ bytes: some Collection<UInt8>) throws {
            try write("asset-bytes\t" + JSONWriter.string(["k": .string(checksum), "b": .string(Data(bytes).base64EncodedString())]) + "\n")
        }
        // row_to_json writes an oid as a string.
        let largeObject: Int64? = switch row["lo_oid"] {
        case .int(let oid)?: oid
        case .string(let text)?: Int64(text)
        default: nil
        }
        if let oid = largeObject {
            while offset < size {
                let length = Int(min(Int64(Self.assetPiece), size - offset))
                let piece = try await connection.rows("SELECT lo_get(\(oid)::oid, \(offset), \(Int32(length)))", logger: logger).first!.decode(ByteBuffer.self)
                try line(piece.readableBytesView)
                offset += Int64(piece.readableBytes)
                guard piece.readableBytes > 0 else { break }
            }
        } else {
            guard let path = assets.filePath(containerID: containerID, checksum: checksum), let handle = FileHandle(forReadingAtPath: path) else {
                throw StratusError(.internalError, "asset \(checksum) has no file in the asset folder (is --asset-store/--asset-dir the server's?)")
            }
            defer { try? handle.close() }
            while let piece = try handle.read(upToCount: Self.assetPiece), !piece.isEmpty {
                try line(piece)
                offset += Int64(piece.count)
            }
        }
        guard offset == size else {
            throw StratusError(.internalError, "asset \(checksum) holds \(offset) bytes, not the \(size) its row says")
        }
        return size
    }
}

extension ContainerArchive {
    /// What one import wrote.
    public struct Restored: Sendable {
        public var containerName: String
        public var containerID: ContainerID
        public var sourceContainerID: Int64
        public var rows: Int
        public var records: Int
        public var assets: Int
        /// How far the rows' change positions were moved down (0 when the file came from this server).
        public var xidShift: Int64
    }

    /// Reads an export file a line at a time.
    public final class Lines: @unchecked Sendable {
        private let handle: FileHandle
        private var buffer: [UInt8] = []
        private var start = 0
        private var finished = false
        /// Bytes read so far (for progress).
        public private(set) var bytesRead: Int64 = 0

        public init(path: String) throws(StratusError) {
            guard let handle = FileHandle(forReadingAtPath: path) else {
                throw StratusError.badRequest("cannot read \(path): check the path and its permissions")
            }
            self.handle = handle
        }

        deinit { try? handle.close() }

        /// The next line without its newline, or `nil` at the end (a last line without its newline is refused).
        public func next() throws -> Substring? {
            while true {
                if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: buffer[start..<newline], as: UTF8.self)
                    start = newline + 1
                    return line[...]
                }
                if finished {
                    guard start < buffer.count else { return nil }
                    throw StratusError.badRequest("the file ends in the middle of a line: it was cut short; nothing was imported")
                }
                buffer.removeFirst(start)
                start = 0
                let piece = try handle.read(upToCount: 1 << 20) ?? Data()
                bytesRead += Int64(piece.count)
                if piece.isEmpty { finished = true } else { buffer.append(contentsOf: piece) }
            }
        }
    }

    /// Restores the container an export file holds, under its name and a new container id, in one
    /// transaction; refused when a container of that name exists. `progress` gets rows written and
    /// the file's total.
    public func restore(from lines: Lines, actor: AuditActor, progress: (Int, Int) -> Void) async throws -> Restored {
        guard let first = try lines.next() else { throw StratusError.badRequest("the file is empty: not a Stratus container export") }
        let (kind, text) = Self.split(first)
        guard kind == Self.format, let header = try? JSONParser.parse(String(text)), header["formatVersion"] != nil else {
            throw StratusError.badRequest("not a Stratus container export: its first line should start with '\(Self.format)' ('stratus container export' makes one)")
        }
        guard header["formatVersion"] == .int(Self.formatVersion) else {
            throw StratusError.badRequest("this export is format version \(header["formatVersion"].map(JSONWriter.string) ?? "?"); this server reads version \(Self.formatVersion)")
        }
        guard let name = header["containerName"]?.stringValue, let containerRow = header["container"], containerRow.objectValue != nil,
              case .int(let sourceID)? = header["containerID"], case .int(let highest)? = header["highestChangeXid"],
              let keyText = header["syncKey"]?.stringValue, let syncKey = Data(base64Encoded: keyText), case .int(let exportedAt)? = header["migration"] else {
            throw StratusError.badRequest("the export's header is incomplete (container, containerID, highestChangeXid, syncKey, migration); was the file edited?")
        }
        let total = (header["rows"]?.objectValue ?? [:]).values.reduce(0) { sum, count in
            if case .int(let count) = count { return sum + Int(count) }
            return sum
        }
        return try await database.transaction { connection in
            try await Database.allowLongStatements(on: connection, logger: logger)
            let migration = try await Self.migrationVersion(on: connection, logger: logger)
            guard exportedAt == migration else {
                throw StratusError.badRequest("this export was made by a server at migration \(exportedAt); this one is at \(migration): "
                                              + "import it with the Stratus version that made it, or upgrade that server first and export again")
            }
            guard let inserted = try await connection.rows("""
                INSERT INTO containers (name, identity_salt, created_at)
                SELECT name, identity_salt, created_at FROM json_populate_record(NULL::containers, \(JSONWriter.string(containerRow))::json)
                ON CONFLICT (name) DO NOTHING RETURNING container_id
                """, logger: logger).first else {
                throw StratusError(.exists, "a container named '\(name)' already exists on this server; an import restores a container into a server that does not have it")
            }
            let containerID = try inserted.decode(ContainerID.self)
            // Every imported change sorts below every transaction running or to come here: writes
            // made after the import are then read after it by every sync token, old or new.
            let oldest = try await connection.rows("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint", logger: logger).first!.decode(Int64.self)
            let shift = max(0, highest - (oldest - 1))
            let tables = Dictionary(uniqueKeysWithValues: try await Self.tables(on: connection, logger: logger).map { ($0.name, $0) })
            var restored = Restored(containerName: name, containerID: containerID, sourceContainerID: sourceID, rows: 0, records: 0, assets: 0, xidShift: shift)
            var batch: [Substring] = []
            var batchTable = ""
            func flush() async throws {
                guard !batch.isEmpty else { return }
                do {
                    try await insertBatch()
                } catch let error as PSQLError where error.serverInfo?[.sqlState].map({ !$0.hasPrefix("40") && !$0.hasPrefix("08") }) ?? false {
                    throw StratusError.badRequest("rows of \(batchTable) could not be written (\(error.serverInfo?[.message] ?? "?")): "
                                                  + "the file is damaged, or was made by another version; nothing was imported")
                }
                batch.removeAll(keepingCapacity: true)
                progress(restored.rows, total)
            }
            func insertBatch() async throws {
                try await connection.statement(PostgresQuery(unsafeSQL: """
                    INSERT INTO \(batchTable) OVERRIDING SYSTEM VALUE
                    SELECT * FROM jsonb_populate_recordset(NULL::\(batchTable), (
                        SELECT jsonb_agg(e || jsonb_build_object('container_id', $2::bigint)
                                          || CASE WHEN e ? 'change_xid' THEN jsonb_build_object('change_xid', (e->>'change_xid')::bigint - $3) ELSE '{}'::jsonb END)
                        FROM jsonb_array_elements($1::jsonb) e))
                    """, binds: Self.bindings("[" + batch.joined(separator: ",") + "]", containerID, shift)), logger: logger)
            }
            var asset: PendingAsset?
            var ended = false
            while let line = try lines.next() {
                let (kind, text) = Self.split(line)
                if kind != "asset-bytes", let pending = asset {
                    try await pending.commit(into: assets, containerID: containerID)
                    asset = nil
                }
                switch kind {
                case "end":
                    guard case .int(let rows)? = (try? JSONParser.parse(String(text)))?["rows"], rows == restored.rows else {
                        throw StratusError.badRequest("the file's end line does not match its \(restored.rows) rows: the file is damaged; nothing was imported")
                    }
                    ended = true
                case "asset-bytes":
                    guard let piece = try? JSONParser.parse(String(text)), let checksum = piece["k"]?.stringValue,
                          let bytes = piece["b"]?.stringValue.flatMap({ Data(base64Encoded: $0) }), var pending = asset, pending.checksum == checksum else {
                        throw StratusError.badRequest("an asset's bytes do not follow its row: the file is damaged; nothing was imported")
                    }
                    try pending.append(bytes)
                    asset = pending
                case "assets":
                    try await flush()
                    guard let row = try? JSONParser.parse(String(text)), let checksum = row["checksum"]?.stringValue,
                          case .int(let size)? = row["size"], let contentType = row["content_type"]?.stringValue else {
                        throw StratusError.badRequest("an asset row is damaged: \(text.prefix(200))")
                    }
                    asset = try PendingAsset(checksum: checksum, size: size, contentType: contentType, path: assets.stagingPath())
                    restored.assets += 1
                    restored.rows += 1
                case "container_imports":
                    // An earlier import's tokens stay valid too, moved by this import's shift as well.
                    try await flush()
                    try await connection.statement("""
                        INSERT INTO container_imports (container_id, source_container_id, source_name, sync_key, xid_shift, imported_at)
                        SELECT \(containerID)::bigint, source_container_id, source_name, sync_key, xid_shift + \(shift), imported_at
                        FROM json_populate_record(NULL::container_imports, \(String(text))::json)
                        """, logger: logger)
                    restored.rows += 1
                default:
                    guard !ended else { throw StratusError.badRequest("the file goes on after its end line: the file is damaged; nothing was imported") }
                    guard let table = tables[String(kind)], !Self.notCarried.contains(table.name) else {
                        throw StratusError.badRequest("the file has rows of '\(kind.prefix(60))', which this server does not keep: was it made by another version, or edited?")
                    }
                    if batchTable != table.name {
                        try await flush()
                        batchTable = table.name
                    }
                    batch.append(text)
                    restored.rows += 1
                    if table.name == "records" { restored.records += 1 }
                    if batch.count >= Self.batchRows { try await flush() }
                }
            }
            try await flush()
            guard ended else {
                throw StratusError.badRequest("the file ends before its end line: it was cut short (\(restored.rows) of \(total) rows); nothing was imported")
            }
            try await connection.statement("""
                INSERT INTO container_imports (container_id, source_container_id, source_name, sync_key, xid_shift)
                VALUES (\(containerID), \(sourceID), \(name), \(syncKey), \(shift))
                ON CONFLICT (container_id, source_container_id, sync_key) DO UPDATE SET xid_shift = excluded.xid_shift
                """, logger: logger)
            // Ids made here from now on (zones, tokens, deploys, audit entries) come after the imported ones.
            for table in tables.values.sorted(by: { $0.name < $1.name }) {
                for column in table.identityColumns {
                    try await connection.statement(PostgresQuery(unsafeSQL: """
                        SELECT setval(s::regclass, greatest((SELECT coalesce(max(\(column)), 1) FROM \(table.name)), nextval(s::regclass)))
                        FROM (SELECT pg_get_serial_sequence('public.\(table.name)', '\(column)') AS s) q WHERE s IS NOT NULL
                        """), logger: logger)
                }
            }
            try await connection.statement("SELECT setval('zone_id_seq', greatest((SELECT coalesce(max(zone_id), 1) FROM zones), nextval('zone_id_seq')))",
                                           logger: logger)
            try await AuditEntry(containerID: containerID, actor: actor, action: "container.import", target: name,
                                 detail: "\(restored.rows) rows (\(restored.records) records, \(restored.assets) assets) from container \(sourceID) of the exporting server; change positions moved down by \(shift)")
                .write(on: connection, logger: logger)
            try await Invalidations.publish(.all, on: connection, logger: logger)
            progress(restored.rows, total)
            return restored
        }
    }

    static func split(_ line: Substring) -> (Substring, Substring) {
        guard let tab = line.firstIndex(of: "\t") else { return (line, "") }
        return (line[..<tab], line[line.index(after: tab)...])
    }

    static func bindings(_ rows: String, _ containerID: ContainerID, _ shift: Int64) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(rows)
        binds.append(containerID)
        binds.append(shift)
        return binds
    }

    /// An asset whose bytes are being read from the file into a staging file.
    struct PendingAsset {
        let checksum: String
        let size: Int64
        let contentType: String
        let path: String
        let handle: FileHandle
        var hash = SHA256()
        var written: Int64 = 0

        init(checksum: String, size: Int64, contentType: String, path: String) throws {
            self.checksum = checksum
            self.size = size
            self.contentType = contentType
            self.path = path
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: path, contents: nil), let handle = FileHandle(forWritingAtPath: path) else {
                throw StratusError(.internalError, "cannot write the staging file \(path)")
            }
            self.handle = handle
        }

        mutating func append(_ bytes: Data) throws {
            try handle.write(contentsOf: bytes)
            hash.update(data: bytes)
            written += Int64(bytes.count)
        }

        /// Checks the bytes against the row and stores them (in the caller's transaction).
        func commit(into store: AssetStore, containerID: ContainerID) async throws {
            try handle.synchronize()
            try handle.close()
            guard written == size, Data(hash.finalize()).base64EncodedString() == checksum else {
                unlink(path)
                throw StratusError.badRequest("asset \(checksum): the file holds \(written) bytes that do not match its row (size \(size)); the file is damaged; nothing was imported")
            }
            try await store.commit(containerID: containerID, stagedAt: path, checksum: checksum, size: size, contentType: contentType)
        }
    }
}
