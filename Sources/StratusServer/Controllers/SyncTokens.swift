import Foundation
import StratusCore
import StratusStore
import Synchronization

/// Sync tokens: a sealed position in a zone's record feed or a database's zone feed, bound to
/// the database (and zone) it was issued for.
struct SyncTokens: Sendable {
    static let syncPurpose = "syncToken"

    /// The sync-token keys of servers a container was imported from, by container
    /// (`ContainerArchive`); forgotten when every cache is invalidated.
    final class ImportedKeys: Sendable {
        let byContainer = Mutex<[ContainerID: [RecordStore.ImportedSyncKey]]>([:])
    }

    let records: RecordStore
    /// Seals sync tokens (`TokenSealer.syncKey`); tokens sealed with `sealer` before it existed are still opened.
    let syncSealer: TokenSealer
    let sealer: TokenSealer
    let importedSyncKeys: ImportedKeys

    /// A sync token for a position in a zone's record feed (`zoneID` set) or in a database's zone feed.
    func token(_ db: DatabaseRef, zoneID: ZoneID?, cursor: FeedCursor) -> String {
        Self.token(db, zoneID: zoneID, cursor: cursor, sealer: syncSealer)
    }

    static func token(_ db: DatabaseRef, zoneID: ZoneID?, cursor: FeedCursor, sealer: TokenSealer) -> String {
        var payload: [String: JSON] = ["c": .int(db.containerID.rawValue), "e": .string(db.environment.rawValue), "d": .string(db.scope.rawValue),
                                       "o": .string(db.owner.rawValue), "x": .int(cursor.position.xid), "s": .int(cursor.position.seq)]
        if !cursor.pending.isEmpty { payload["p"] = .array(cursor.pending.map { .int($0) }) }
        if let zoneID { payload["z"] = .int(zoneID.rawValue) }
        return sealer.seal(.object(payload), purpose: syncPurpose)
    }

    /// Opens a sync token and checks it was issued for this database (and zone); returns the cursor and the zone id it names.
    ///
    /// Tokens this server issued open with its sync-token key (or, issued before that key existed,
    /// with its secret). A container restored from another server's export also takes that
    /// server's tokens: they name the container by its id there, and their positions are moved by
    /// the import's shift (`ContainerArchive`).
    func open(_ text: String, db: DatabaseRef, zoneScoped: Bool) async throws(StratusError) -> (FeedCursor, ZoneID?) {
        let invalid = StratusError.badRequest("invalid syncToken: pass back a token from a previous response unchanged, or omit it to start from the beginning")
        let native = syncSealer.open(text, purpose: Self.syncPurpose) ?? sealer.open(text, purpose: Self.syncPurpose)
        if let native, native["c"] == .int(db.containerID.rawValue) {
            return try Self.cursor(native, db: db, zoneScoped: zoneScoped, shift: 0)
        }
        for imported in try await importedKeys(db.containerID) {
            if let payload = TokenSealer(secret: imported.key).open(text, purpose: Self.syncPurpose), payload["c"] == .int(imported.sourceContainerID) {
                return try Self.cursor(payload, db: db, zoneScoped: zoneScoped, shift: imported.shift)
            }
        }
        if native != nil {
            throw StratusError.badRequest("this syncToken was issued for another database, user or container; omit it to start from the beginning")
        }
        throw invalid
    }

    /// The sync-token keys of the servers `containerID` was imported from (cached until an invalidation of everything).
    private func importedKeys(_ containerID: ContainerID) async throws(StratusError) -> [RecordStore.ImportedSyncKey] {
        if let known = importedSyncKeys.byContainer.withLock({ $0[containerID] }) { return known }
        let keys: [RecordStore.ImportedSyncKey]
        do {
            keys = try await records.importedSyncKeys(containerID: containerID)
        } catch {
            throw (error as? StratusError) ?? StratusError(.tryAgainLater, "the sync token could not be checked right now; retry", retryAfter: 1, underlying: error)
        }
        importedSyncKeys.byContainer.withLock { $0[containerID] = keys }
        return keys
    }

    /// The cursor of an opened token, checked against the database (its container already matched).
    static func cursor(_ payload: JSON, db: DatabaseRef, zoneScoped: Bool, shift: Int64) throws(StratusError) -> (FeedCursor, ZoneID?) {
        guard case .int(let xid)? = payload["x"], case .int(let seq)? = payload["s"] else {
            throw StratusError.badRequest("invalid syncToken: pass back a token from a previous response unchanged, or omit it to start from the beginning")
        }
        guard payload["e"] == .string(db.environment.rawValue), payload["d"] == .string(db.scope.rawValue), payload["o"] == .string(db.owner.rawValue) else {
            throw StratusError.badRequest("this syncToken was issued for another database, user or container; omit it to start from the beginning")
        }
        var zoneID: ZoneID?
        if case .int(let id)? = payload["z"] { zoneID = ZoneID(id) }
        guard (zoneID != nil) == zoneScoped else {
            throw StratusError.badRequest("this syncToken is for a \(zoneID == nil ? "database" : "zone") change feed, not this one")
        }
        // Positions move by an import's shift; one that would leave 64 bits is no position of ours.
        func shifted(_ xid: Int64) throws(StratusError) -> Int64 {
            let (moved, overflow) = xid.subtractingReportingOverflow(shift)
            if overflow { throw StratusError.badRequest("invalid syncToken: pass back a token from a previous response unchanged, or omit it to start from the beginning") }
            return moved
        }
        var pending: [Int64] = []
        for value in payload["p"]?.arrayValue ?? [] {
            guard case .int(let xid) = value else { throw StratusError.badRequest("invalid syncToken") }
            pending.append(try shifted(xid))
        }
        return (FeedCursor(position: ChangePosition(xid: try shifted(xid), seq: seq), pending: pending), zoneID)
    }
}
