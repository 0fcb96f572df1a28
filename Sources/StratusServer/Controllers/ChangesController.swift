import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// `changes/zone`, `records/changes`, `changes/database` and `zones/changes`: the change feeds
/// and their sync tokens.
struct ChangesController: Sendable {
    let records: RecordStore
    let tokens: SyncTokens
    let replicaReads: ReplicaReads?
    let shares: SharesController
    let schemas: SchemaReads
    let links: AssetLinks

    /// `changes/zone` (and, with one zone, the older `records/changes`).
    func zoneChanges(_ request: DataRequest) async throws -> JSON {
        guard let zones = request.body["zones"]?.arrayValue else {
            throw StratusError.badRequest("'zones' must be an array of {\"zoneID\": …, \"syncToken\"?: …}")
        }
        guard !zones.isEmpty, zones.count <= 50 else { throw StratusError.badRequest("'zones' needs 1 to 50 entries") }
        var results: [JSON] = []
        for (index, item) in zones.enumerated() {
            guard let members = item.objectValue else { throw StratusError.badRequest("zones[\(index)] must be an object") }
            var merged = request.body
            for (key, value) in members { merged[key] = value }
            results.append(try await zoneChangePage(request, options: merged, key: "zones[\(index)]"))
        }
        return ["zones": .array(results)]
    }

    /// `records/changes`: the older single-zone form.
    func recordChanges(_ request: DataRequest) async throws -> JSON {
        guard request.body["zoneID"] != nil else { throw StratusError.badRequest("missing required key 'zoneID'") }
        var page = try await zoneChangePage(request, options: request.body, key: "")
        guard case .object(var members) = page else { return page }
        if members["serverErrorCode"] != nil {
            throw StratusError(StratusError.Code(members["serverErrorCode"]?.stringValue ?? "BAD_REQUEST", httpStatus: members["serverErrorCode"]?.stringValue == "ZONE_NOT_FOUND" ? 404 : 400),
                               members["reason"]?.stringValue ?? "")
        }
        members["zoneID"] = nil
        members["reverse"] = false
        page = .object(members)
        return page
    }

    func zoneChangePage(_ request: DataRequest, options: [String: JSON], key: String) async throws -> JSON {
        let zoneIDJSON = options["zoneID"] ?? .null
        let uuid = newUUID()
        if request.scope == .shared { return try await sharedZoneChangePage(request, options: options, key: key, uuid: uuid) }
        let name: String
        do throws(StratusError) {
            name = try request.zoneName(zoneIDJSON, key: key.isEmpty ? "zoneID" : "\(key).zoneID")
        } catch {
            if error.code == .zoneNotFound { return error.dictionary(uuid: uuid, zoneID: zoneIDJSON) }
            throw error
        }
        let db = try request.database(requireUser: false)
        let (limit, desired, types, numbersAsStrings) = try Self.feedOptions(options)
        var cursor = FeedCursor()
        var expectedZone: ZoneID?
        if let tokenText = try Wire.string(options["syncToken"], key: "syncToken") {
            do throws(StratusError) {
                (cursor, expectedZone) = try await tokens.open(tokenText, db: db, zoneScoped: true)
            } catch {
                return error.dictionary(uuid: uuid, zoneID: zoneIDJSON)
            }
        }
        // A custom zone's feed may come from a replica that has caught up (the default zone's is
        // made on first read, which only the primary can do).
        let feed = { (store: RecordStore) in try await store.zoneChanges(db, zoneID: expectedZone, zone: name, after: cursor, limit: limit, recordTypes: types) }
        let read = if let replicaReads, name != Names.defaultZone { try await replicaReads.read(primary: records, feed) } else { try await feed(records) }
        guard let (zoneID, page) = read else {
            if expectedZone != nil {
                return StratusError.badRequest("the syncToken is from a zone that has since been deleted or is another zone; fetch the zone's changes again without a token").dictionary(uuid: uuid, zoneID: zoneIDJSON)
            }
            return StratusError(.zoneNotFound, "zone '\(name)' does not exist").dictionary(uuid: uuid, zoneID: zoneIDJSON)
        }
        let rendering = RecordRendering(desiredKeys: desired, numbersAsStrings: numbersAsStrings,
                                        assetURL: links.assetURL(containerID: request.caller.container.id))
        var items = try await schemas.readable(page.items, by: request, in: db)
        if db.scope == .private { try await shares.decorateShares(&items, db: db, zone: name, viewer: db.owner) }
        return [
            "zoneID": request.zoneIDJSON(name),
            "records": .array(items.map { $0.wireJSON(rendering) }),
            "syncToken": .string(tokens.token(db, zoneID: zoneID, cursor: page.cursor)),
            "moreComing": .bool(page.moreComing),
        ]
    }

    /// The options of a zone's change feed: page size, desired keys and record types, numbers as strings.
    static func feedOptions(_ options: [String: JSON]) throws(StratusError) -> (Int, Set<String>?, Set<String>?, Bool) {
        let limit = try Wire.resultsLimit(options["resultsLimit"], maximum: RecordsController.maximumPage)
        let desired = try Wire.stringSet(options["desiredKeys"], key: "desiredKeys")
        let types = try Wire.stringSet(options["desiredRecordTypes"], key: "desiredRecordTypes")
        let numbersAsStrings = try Wire.bool(options["numbersAsStrings"] ?? options["numberAsStrings"], key: "numbersAsStrings") ?? false
        if try Wire.bool(options["reverse"], key: "reverse") == true {
            throw StratusError.badRequest("reverse change feeds are not supported; omit 'reverse'")
        }
        return (limit, desired, types, numbersAsStrings)
    }

    /// One zone's change feed in the shared database: what the participant may see of it. A zone
    /// no longer shared with them is ZONE_NOT_FOUND, whatever token they hold.
    func sharedZoneChangePage(_ request: DataRequest, options: [String: JSON], key: String, uuid: String) async throws -> JSON {
        let zoneIDJSON = options["zoneID"] ?? .null
        let access: ShareAccess
        do {
            access = try await shares.shareAccess(request, zoneIDJSON, key: key.isEmpty ? "zoneID" : "\(key).zoneID")
        } catch let error as StratusError where error.code == .zoneNotFound {
            return error.dictionary(uuid: uuid, zoneID: zoneIDJSON)
        }
        let db = request.sharedDatabase(user: access.user)
        let (limit, desired, types, numbersAsStrings) = try Self.feedOptions(options)
        var cursor = FeedCursor()
        if let tokenText = try Wire.string(options["syncToken"], key: "syncToken") {
            do throws(StratusError) {
                let (opened, zoneID) = try await tokens.open(tokenText, db: db, zoneScoped: true)
                guard zoneID == access.zoneID else {
                    throw StratusError.badRequest("the syncToken is from another zone, or from this zone before it was deleted and made again; fetch its changes again without a token")
                }
                cursor = opened
            } catch {
                return error.dictionary(uuid: uuid, zoneID: zoneIDJSON)
            }
        }
        let page = try await records.sharing.sharedZoneChanges(access, after: cursor, limit: limit, recordTypes: types)
        var items = page.items
        try await shares.decorateShares(&items, db: access.ownerDB, zone: access.zone, viewer: access.user)
        let rendering = RecordRendering(desiredKeys: desired, numbersAsStrings: numbersAsStrings,
                                        assetURL: links.assetURL(containerID: request.caller.container.id))
        return [
            "zoneID": DataRequest.sharedZoneIDJSON(owner: access.ownerDB.owner, zone: access.zone),
            "records": .array(items.map { $0.wireJSON(rendering) }),
            "syncToken": .string(tokens.token(db, zoneID: access.zoneID, cursor: page.cursor)),
            "moreComing": .bool(page.moreComing),
        ]
    }

    /// `changes/database` (`syncToken`) and the older `zones/changes` (`metaSyncToken`).
    func zoneListChanges(_ request: DataRequest, legacy: Bool) async throws -> JSON {
        let tokenKey = legacy ? "metaSyncToken" : "syncToken"
        let db = request.scope == .shared ? request.sharedDatabase(user: try request.caller.requireUser(signInURL: request.signInURL))
            : try request.database(requireUser: false)
        let limit = try Wire.resultsLimit(request.body["resultsLimit"], maximum: RecordsController.maximumPage)
        var cursor = FeedCursor()
        if let tokenText = try Wire.string(request.body[tokenKey] ?? request.body["syncToken"], key: tokenKey) {
            (cursor, _) = try await tokens.open(tokenText, db: db, zoneScoped: false)
        }
        if request.scope == .shared {
            let page = try await records.sharing.sharedDatabaseChanges(containerID: db.containerID, environment: db.environment, user: db.owner,
                                                               after: cursor, limit: limit)
            return [
                "zones": .array(page.items.map { SharesController.sharedZoneJSON(owner: $0.owner, zone: $0.zone, deleted: $0.deleted) }),
                tokenKey: .string(tokens.token(db, zoneID: nil, cursor: page.cursor)),
                "moreComing": .bool(page.moreComing),
            ]
        }
        let page = try await records.databaseChanges(db, after: cursor, limit: limit)
        return [
            "zones": .array(page.items.map { ZonesController.zoneJSON(request, $0) }),
            tokenKey: .string(tokens.token(db, zoneID: nil, cursor: page.cursor)),
            "moreComing": .bool(page.moreComing),
        ]
    }
}
