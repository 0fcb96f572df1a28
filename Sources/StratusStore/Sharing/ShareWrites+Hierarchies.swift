import Foundation
import Logging
import PostgresNIO
import StratusCore

// Record hierarchies under shares: parent chains checked, and each record's share root kept.

extension ShareWrites {
    /// Refuses parent chains that loop or run deeper than `maximumHierarchyDepth`, walking up
    /// from each of `names` (after the request's writes).
    func checkParents(_ db: DatabaseRef, zoneID: ZoneID, names: [String], on connection: PostgresConnection) async throws {
        let rows = try await connection.rows("""
            WITH RECURSIVE up(start, name, parent, depth) AS (
                SELECT r.record_name, r.record_name, r.parent, 0 FROM records r
                WHERE r.container_id = \(db.containerID) AND r.zone_id = \(zoneID) AND r.record_name = ANY(\(names)::text[]) AND NOT r.deleted
                UNION ALL
                SELECT up.start, p.record_name, p.parent, up.depth + 1 FROM up
                JOIN records p ON p.container_id = \(db.containerID) AND p.zone_id = \(zoneID) AND p.record_name = up.parent AND NOT p.deleted
                WHERE up.depth <= \(Self.maximumHierarchyDepth) AND (up.depth = 0 OR up.name <> up.start)
            )
            SELECT start, bool_or(depth > 0 AND name = start), max(depth) FROM up GROUP BY start
            """, logger: logger)
        for row in rows {
            let (start, loops, depth) = try row.decode((String, Bool, Int32).self)
            if loops {
                throw StratusError.badRequest("record '\(Names.printable(start))' would be its own ancestor: parents cannot form a loop")
            }
            if depth > Self.maximumHierarchyDepth {
                throw StratusError.badRequest("record '\(Names.printable(start))' would be more than \(Self.maximumHierarchyDepth) levels below its top ancestor; hierarchies may be at most \(Self.maximumHierarchyDepth) levels deep")
            }
        }
    }

    /// Recomputes the share root of `starts` and every live record below them, and logs each
    /// record that entered or left a shared hierarchy (`share_moves`) for the participants' feeds.
    /// A record's share root is the nearest record, itself included, on its chain of live
    /// parents that is a shared root.
    func refreshHierarchy(_ db: DatabaseRef, zoneID: ZoneID, starts: [String], on connection: PostgresConnection) async throws {
        var binds = PostgresBindings(capacity: 4)
        binds.append(starts)
        binds.append(db.containerID)
        binds.append(zoneID)
        binds.append(Int32(Self.maximumHierarchyDepth))
        if database.configuration.citusCoordinator {
            try await refreshHierarchyOnCitus(db, zoneID: zoneID, binds: binds, on: connection)
            return
        }
        try await connection.statement(PostgresQuery(unsafeSQL: Self.newShareRoots + """
            , changed AS (
                UPDATE records r SET share_root = d.root
                FROM (SELECT DISTINCT ON (name) name, root, old_root FROM down ORDER BY name, depth) d
                WHERE r.container_id = $2 AND r.zone_id = $3 AND r.record_name = d.name AND NOT r.deleted
                  AND d.old_root IS DISTINCT FROM d.root
                RETURNING r.record_name, d.root, d.old_root
            )
            INSERT INTO share_moves (container_id, zone_id, share_root, record_name, entered, change_xid, change_seq)
            SELECT $2::bigint, $3::bigint, m.share_root, m.record_name, m.entered, pg_current_xact_id()::text::bigint, stratus_change_seq()
            FROM (SELECT old_root AS share_root, record_name, false AS entered FROM changed WHERE old_root IS NOT NULL
                  UNION ALL
                  SELECT root, record_name, true FROM changed WHERE root IS NOT NULL) m
            """, binds: binds), logger: logger)
    }

    /// The CTEs of `refreshHierarchy` (values: `$1` the start names, `$2` the container, `$3` the
    /// zone, `$4` the depth limit), ending with `down`: each start and every live record below it,
    /// with its new share root (`root`) and its stored one (`old_root`), at its depth below the start.
    static let newShareRoots = """
        WITH RECURSIVE starts AS (
            SELECT DISTINCT unnest($1::text[]) AS name
        ), up(start, name, parent, share_name, depth) AS (
            SELECT r.record_name, r.record_name, r.parent, r.share_name, 0
            FROM starts s JOIN records r ON r.container_id = $2 AND r.zone_id = $3 AND r.record_name = s.name AND NOT r.deleted
            UNION ALL
            SELECT up.start, p.record_name, p.parent, p.share_name, up.depth + 1
            FROM up JOIN records p ON p.container_id = $2 AND p.zone_id = $3 AND p.record_name = up.parent AND NOT p.deleted
            WHERE up.share_name IS NULL AND up.depth < $4
        ), start_roots AS (
            SELECT start, max(name) FILTER (WHERE share_name IS NOT NULL) AS root FROM up GROUP BY start
        ), down(name, root, old_root, depth) AS (
            SELECT s.name, sr.root, r.share_root, 0
            FROM starts s JOIN records r ON r.container_id = $2 AND r.zone_id = $3 AND r.record_name = s.name
            LEFT JOIN start_roots sr ON sr.start = s.name
            UNION ALL
            SELECT c.record_name, CASE WHEN c.share_name IS NOT NULL THEN c.record_name ELSE down.root END, c.share_root, down.depth + 1
            FROM down JOIN records c ON c.container_id = $2 AND c.zone_id = $3 AND c.parent = down.name AND NOT c.deleted
            WHERE down.depth < $4
        )
        """

    /// `refreshHierarchy` in three statements: Citus plans each CTE of a modifying statement on
    /// its own, where `start_roots` cannot see `up`. The new roots are read (one statement, sent
    /// whole to the container's worker), then written, then logged.
    private func refreshHierarchyOnCitus(_ db: DatabaseRef, zoneID: ZoneID, binds: PostgresBindings, on connection: PostgresConnection) async throws {
        let container = db.containerID
        let moves = try await connection.rows(PostgresQuery(unsafeSQL: Self.newShareRoots + """
            SELECT name, root, old_root FROM (SELECT DISTINCT ON (name) name, root, old_root FROM down ORDER BY name, depth) d
            WHERE d.old_root IS DISTINCT FROM d.root
            """, binds: binds), logger: logger).map { try $0.decode((String, String?, String?).self) }
        guard !moves.isEmpty else { return }
        let changed = Set(try await connection.rows("""
            UPDATE records r SET share_root = NULLIF(u.root, '')
            FROM unnest(\(moves.map(\.0))::text[], \(moves.map { $0.1 ?? "" })::text[]) AS u(name, root)
            WHERE r.container_id = \(container) AND r.zone_id = \(zoneID) AND r.record_name = u.name AND NOT r.deleted
            RETURNING r.record_name
            """, logger: logger).map { try $0.decode(String.self) })
        var roots: [String] = [], names: [String] = [], entered: [Bool] = []
        for (name, root, oldRoot) in moves where changed.contains(name) {
            if let oldRoot { roots.append(oldRoot); names.append(name); entered.append(false) }
            if let root { roots.append(root); names.append(name); entered.append(true) }
        }
        guard !names.isEmpty else { return }
        try await connection.statement("""
            INSERT INTO share_moves (container_id, zone_id, share_root, record_name, entered, change_xid, change_seq)
            SELECT \(container)::bigint, \(zoneID)::bigint, m.root, m.name, m.entered, pg_current_xact_id()::text::bigint, stratus_change_seq()
            FROM unnest(\(roots)::text[], \(names)::text[], \(entered)::bool[]) AS m(root, name, entered)
            """, logger: logger)
    }
}
