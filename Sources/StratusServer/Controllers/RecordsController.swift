import Crypto
import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// `records/modify`, `records/lookup` and `records/query`, in every database.
struct RecordsController: Sendable {
    let records: RecordStore
    let sealer: TokenSealer
    let replicaReads: ReplicaReads?
    let shares: SharesController
    let schemas: SchemaReads
    let links: AssetLinks
    let queryShapes: QueryShapeNotes
    /// Counts the writes refused for quota (`stratus usage`).
    let rateLimiter: RateLimiter

    /// Most records named in one `records/lookup`.
    static let maximumLookup = 200
    /// Largest page of `records/query` and the change feeds.
    static let maximumPage = 200
    static let markerPurpose = "continuationMarker"

    /// `records/modify`.
    func modifyRecords(_ request: DataRequest) async throws -> JSON {
        if request.scope == .shared { return try await modifySharedRecords(request) }
        let db = try request.database(requireUser: true)
        let zone = try request.zoneName(request.body["zoneID"])
        let body = JSON.object(request.body)
        var decoded = try ModifyRequest.decode(body, newRecordName: { RandomUUID.string(uppercase: true) })
        decoded.receipts = links.receiptCheck(request.caller, scope: request.scope)
        let caller = db.owner.isNobody ? (request.caller.user ?? .nobody) : db.owner
        let rendering = RecordRendering(numbersAsStrings: decoded.numbersAsStrings, assetURL: links.assetURL(containerID: db.containerID))
        let results = try await records.modify(db, zone: zone, request: decoded, caller: caller, now: now(),
                                               allowSchemaChanges: db.environment == .development, access: request.access)
        return try await modifyResponse(results, decoded: decoded, rendering: rendering, db: db, zone: zone, viewer: request.caller.user, metered: request.metered)
    }

    /// The `records/modify` response: one record, deletion or error per operation; share records
    /// with their share keys for `viewer`.
    func modifyResponse(_ results: [ModifyResult], decoded: ModifyRequest, rendering: RecordRendering, db: DatabaseRef, zone: String,
                        viewer: UserID?, metered: Bool) async throws -> JSON {
        // One id for the response's per-record errors, made only if there is one (two getrandom calls).
        lazy var uuid = newUUID()
        let refused = results.reduce(Int64(0)) { count, result in
            if case .failed(_, let error) = result, error.code == .quotaExceeded { return count + 1 }
            return count
        }
        if metered { rateLimiter.noteRefused(refused, containerID: db.containerID, environment: db.environment) }
        var shareRecords = results.compactMap { if case .saved(let record) = $0, record.recordType == Record.shareType { return record } else { return nil } }
        if !shareRecords.isEmpty { try await shares.decorateShares(&shareRecords, db: db, zone: zone, viewer: viewer) }
        let items: [JSON] = results.enumerated().map { index, result in
            switch result {
            case .saved(var record):
                if let decorated = shareRecords.first(where: { $0.recordName == record.recordName }) { record.shareKeys = decorated.shareKeys }
                var itemRendering = rendering
                itemRendering.desiredKeys = decoded.desiredKeys(ofOperation: index)
                return record.wireJSON(itemRendering)
            case .deleted(let name):
                return ["recordName": .string(name), "deleted": true]
            case .failed(let name, let error):
                return error.dictionary(uuid: uuid, recordName: name, rendering: rendering)
            }
        }
        return ["records": .array(items)]
    }

    /// `records/lookup`.
    func lookupRecords(_ request: DataRequest) async throws -> JSON {
        guard let list = request.body["records"] else { throw StratusError.badRequest("missing required key 'records'") }
        guard let items = list.arrayValue else { throw StratusError.badRequest("'records' must be an array of {\"recordName\": …}") }
        guard items.count <= Self.maximumLookup else {
            throw StratusError.badRequest("\(items.count) records in one lookup; at most \(Self.maximumLookup) are allowed")
        }
        let desired = try Wire.stringSet(request.body["desiredKeys"], key: "desiredKeys")
        let numbersAsStrings = try Wire.bool(request.body["numbersAsStrings"], key: "numbersAsStrings") ?? false
        var wanted: [(name: String, desired: Set<String>?)] = []
        for (index, item) in items.enumerated() {
            guard let name = item["recordName"]?.stringValue else {
                throw StratusError.badRequest("records[\(index)] needs a string 'recordName'")
            }
            try Names.validateRecordName(name)
            wanted.append((name, try Wire.stringSet(item["desiredKeys"], key: "records[\(index)].desiredKeys") ?? desired))
        }
        lazy var uuid = newUUID()
        if request.scope == .shared { return try await lookupSharedRecords(request, wanted: wanted, numbersAsStrings: numbersAsStrings) }
        let db = try request.database(requireUser: false)
        let zone = try request.zoneName(request.body["zoneID"])
        var found = try await records.lookup(db, zone: zone, names: wanted.map(\.name))
        if found.values.contains(where: { $0.recordType == Record.shareType }), db.scope == .private {
            var list = Array(found.values)
            try await shares.decorateShares(&list, db: db, zone: zone, viewer: request.caller.user)
            for record in list { found[record.recordName] = record }
        }
        let schema = request.access == nil ? nil : try await schemas.accessSchema(db, for: Array(found.values))
        let assetURL = links.assetURL(containerID: db.containerID)
        return ["records": .array(wanted.map { item in
            guard let record = found[item.name] else {
                return StratusError(.notFound, "record '\(Names.printable(item.name))' does not exist").dictionary(uuid: uuid, recordName: item.name)
            }
            if let access = request.access, let schema, !access.allows(.read, on: record.recordType, creator: record.createdBy, in: schema) {
                return RecordAccess.denial(.read, on: record.recordType, recordName: item.name, in: schema).dictionary(uuid: uuid, recordName: item.name)
            }
            return record.wireJSON(RecordRendering(desiredKeys: item.desired, numbersAsStrings: numbersAsStrings, assetURL: assetURL))
        })]
    }

    /// `records/query`.
    func queryRecords(_ request: DataRequest) async throws -> JSON {
        guard let queryJSON = request.body["query"] else { throw StratusError.badRequest("missing required key 'query'") }
        let limit = try Wire.resultsLimit(request.body["resultsLimit"], maximum: Self.maximumPage)
        let desired = try Wire.stringSet(request.body["desiredKeys"], key: "desiredKeys")
        let numbersAsStrings = try Wire.bool(request.body["numbersAsStrings"], key: "numbersAsStrings") ?? false
        _ = try Wire.bool(request.body["zoneWide"], key: "zoneWide")
        let markerText = try Wire.string(request.body["continuationMarker"], key: "continuationMarker")
        let db: DatabaseRef
        let zone: String
        var visibleRoots: [String]?
        var viewer = UserID.nobody
        if request.scope == .shared {
            let access = try await shares.shareAccess(request, request.body["zoneID"])
            (db, zone, visibleRoots, viewer) = (access.ownerDB, access.zone, access.visibleRoots, access.user)
        } else {
            db = try request.database(requireUser: false)
            zone = try request.zoneName(request.body["zoneID"])
        }
        var query = try await schemas.parseQuery(queryJSON, db: db)
        // A query narrowed to the caller's own records pages through them alone: its marker is theirs.
        let narrowedTo = try await schemas.restrict(&query, for: request, in: db)
        queryShapes.note(query, db: db)
        let fingerprint = Self.fingerprint(["c": .int(db.containerID.rawValue), "e": .string(db.environment.rawValue),
                                            "d": .string(request.scope.rawValue), "o": .string(narrowedTo ?? db.owner.rawValue), "z": .string(zone),
                                            "v": .string(viewer.rawValue), "q": queryJSON])
        var cursor: QueryCursor?
        if let markerText {
            cursor = try openMarker(markerText, fingerprint: fingerprint, sorts: query.sorts.count)
        }
        let run = { (store: RecordStore) in try await store.query(db, zone: zone, query: query, limit: limit, after: cursor, visibleRoots: visibleRoots) }
        let page = if let replicaReads { try await replicaReads.read(primary: records, run) } else { try await run(records) }
        let rendering = RecordRendering(desiredKeys: desired, numbersAsStrings: numbersAsStrings, assetURL: links.assetURL(containerID: db.containerID))
        var response: [String: JSON] = ["records": .array(page.records.map { $0.wireJSON(rendering) })]
        if let next = page.next {
            response["continuationMarker"] = .string(sealer.seal([
                "f": .string(fingerprint),
                "v": .array(next.sortValues.map(Self.encode)),
                "n": .string(next.recordName),
            ], purpose: Self.markerPurpose))
        }
        return .object(response)
    }

    func openMarker(_ text: String, fingerprint: String, sorts: Int) throws(StratusError) -> QueryCursor {
        guard let payload = sealer.open(text, purpose: Self.markerPurpose) else {
            throw StratusError.badRequest("invalid continuationMarker: pass back the marker from the previous response unchanged")
        }
        guard payload["f"]?.stringValue == fingerprint else {
            throw StratusError.badRequest("this continuationMarker belongs to another query, zone or user; start the query again without it")
        }
        guard let values = payload["v"]?.arrayValue, values.count == sorts, let name = payload["n"]?.stringValue else {
            throw StratusError.badRequest("invalid continuationMarker")
        }
        return QueryCursor(sortValues: values.map(Self.decodeIndexValue), recordName: name)
    }

    static func encode(_ value: IndexValue?) -> JSON {
        switch value {
        case .none: return .null
        case .int(let number)?: return ["i": .int(number)]
        case .double(let number)?: return ["d": .double(number)]
        case .text(let text)?: return ["t": .string(text)]
        }
    }

    static func decodeIndexValue(_ json: JSON) -> IndexValue? {
        if case .int(let number)? = json["i"] { return .int(number) }
        if case .double(let number)? = json["d"] { return .double(number) }
        if case .int(let number)? = json["d"] { return .double(Double(number)) }
        if let text = json["t"]?.stringValue { return .text(text) }
        return nil
    }

    /// A short digest naming a query's scope and shape, bound into its continuation markers.
    static func fingerprint(_ json: JSON) -> String {
        let digest = SHA256.hash(data: Data(JSONWriter.bytes(json)))
        return TokenSealer.base64url(Array(digest.prefix(16)))
    }

    /// `records/modify` in the shared database: written to the owner's zone as the participant.
    func modifySharedRecords(_ request: DataRequest) async throws -> JSON {
        let access = try await shares.shareAccess(request, request.body["zoneID"])
        var decoded = try ModifyRequest.decode(.object(request.body), newRecordName: { RandomUUID.string(uppercase: true) })
        decoded.receipts = links.receiptCheck(request.caller, scope: .shared)
        let rendering = RecordRendering(numbersAsStrings: decoded.numbersAsStrings, assetURL: links.assetURL(containerID: access.ownerDB.containerID))
        let results = try await records.modify(access.ownerDB, zone: access.zone, request: decoded, caller: access.user, now: now(),
                                               allowSchemaChanges: access.ownerDB.environment == .development, participant: access)
        return try await modifyResponse(results, decoded: decoded, rendering: rendering, db: access.ownerDB, zone: access.zone, viewer: access.user, metered: request.metered)
    }

    /// `records/lookup` in the shared database.
    func lookupSharedRecords(_ request: DataRequest, wanted: [(name: String, desired: Set<String>?)], numbersAsStrings: Bool) async throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        let (owner, zone) = try request.sharedZoneName(request.body["zoneID"])
        guard let (access, found) = try await records.sharing.sharedLookup(containerID: request.caller.container.id, environment: request.caller.environment,
                                                                   user: user, owner: owner, zone: zone, names: wanted.map(\.name)) else {
            throw SharesController.notShared(owner: owner, zone: zone)
        }
        var list = Array(found.values)
        try await shares.decorateShares(&list, db: access.ownerDB, zone: access.zone, viewer: access.user)
        let byName = Dictionary(list.map { ($0.recordName, $0) }, uniquingKeysWith: { a, _ in a })
        lazy var uuid = newUUID()
        return ["records": .array(wanted.map { item in
            guard let record = byName[item.name] else {
                return StratusError(.notFound, "record '\(Names.printable(item.name))' does not exist").dictionary(uuid: uuid, recordName: item.name)
            }
            return record.wireJSON(RecordRendering(desiredKeys: item.desired, numbersAsStrings: numbersAsStrings,
                                                   assetURL: links.assetURL(containerID: access.ownerDB.containerID)))
        })]
    }
}
