import Logging
import StratusCore
import StratusStore

/// `subscriptions/list`, `subscriptions/lookup` and `subscriptions/modify`: a signed-in user's
/// subscriptions in the database they address. Query subscriptions live in the public and
/// private databases, zone subscriptions in the private and shared ones, database subscriptions
/// in the private and shared ones (as in CloudKit).
struct SubscriptionsController: Sendable {
    let records: RecordStore
    let notifier: Notifier
    let shares: SharesController
    let schemas: SchemaReads
    let logger: Logger

    /// The subscriber's view of the addressed database: subscriptions are kept per user, in every database.
    func subscriberDatabase(_ request: DataRequest) throws(StratusError) -> DatabaseRef {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        return DatabaseRef(containerID: request.caller.container.id, environment: request.caller.environment, scope: request.scope, owner: user)
    }

    func listSubscriptions(_ request: DataRequest) async throws -> JSON {
        let db = try subscriberDatabase(request)
        let found = try await records.subscriptions.list(db)
        return ["subscriptions": .array(found.map { subscriptionJSON($0, request) })]
    }

    func lookupSubscriptions(_ request: DataRequest) async throws -> JSON {
        guard let list = request.body["subscriptions"]?.arrayValue else {
            throw StratusError.badRequest("'subscriptions' must be an array of {\"subscriptionID\": …}")
        }
        guard list.count <= ModifyRequest.maximumOperations else {
            throw StratusError.badRequest("at most \(ModifyRequest.maximumOperations) subscriptions per request")
        }
        var ids: [String] = []
        for (index, item) in list.enumerated() {
            guard let id = item["subscriptionID"]?.stringValue else {
                throw StratusError.badRequest("subscriptions[\(index)] needs a string 'subscriptionID'")
            }
            try Subscription.validateID(id, key: "subscriptions[\(index)].subscriptionID")
            ids.append(id)
        }
        let db = try subscriberDatabase(request)
        let found = Dictionary(try await records.subscriptions.list(db, ids: ids).map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        let uuid = newUUID()
        return ["subscriptions": .array(ids.map { id in
            found[id].map { subscriptionJSON($0, request) } ?? Self.subscriptionError(SubscriptionStore.subscriptionNotFound(id), id: id, uuid: uuid)
        })]
    }

    func modifySubscriptions(_ request: DataRequest) async throws -> JSON {
        guard let operations = request.body["operations"]?.arrayValue else {
            throw StratusError.badRequest("'operations' must be an array of {\"operationType\", \"subscription\"}")
        }
        guard operations.count <= ModifyRequest.maximumOperations else {
            throw StratusError.badRequest("at most \(ModifyRequest.maximumOperations) operations per request")
        }
        let db = try subscriberDatabase(request)
        let uuid = newUUID()
        var results: [JSON] = []
        for (index, operation) in operations.enumerated() {
            let key = "operations[\(index)]"
            guard let type = operation["operationType"]?.stringValue, ["create", "update", "delete"].contains(type) else {
                throw StratusError.badRequest("\(key).operationType must be 'create', 'update' or 'delete'")
            }
            guard let json = operation["subscription"], json.objectValue != nil else {
                throw StratusError.badRequest("\(key) needs a 'subscription' object")
            }
            let givenID = json["subscriptionID"]?.stringValue
            do throws(StratusError) {
                if type == "delete" {
                    guard let id = givenID else { throw .badRequest("\(key).subscription needs a string 'subscriptionID' to delete") }
                    try Subscription.validateID(id, key: "\(key).subscription.subscriptionID")
                    try await wrap(logger) { try await self.records.subscriptions.deleteSubscription(db, id: id) }
                    results.append(["subscriptionID": .string(id), "deleted": true])
                    continue
                }
                if type == "update", givenID == nil { throw .badRequest("\(key).subscription needs a string 'subscriptionID' to update") }
                let subscription = try await wrap(logger) { try await self.parseSubscription(json, key: "\(key).subscription", request: request) }
                try await wrap(logger) { try await self.records.subscriptions.saveSubscription(db, subscription, create: type == "create") }
                results.append(subscriptionJSON(subscription, request))
            } catch {
                if error.code == .authenticationRequired { throw error }
                results.append(Self.subscriptionError(error, id: givenID, uuid: uuid))
            }
        }
        // This process forgets the container's subscriptions at once (the others when the
        // invalidation reaches them), so the caller's next write here is matched against the
        // subscriptions it was just answered.
        notifier.invalidate(.subscriptions(containerID: db.containerID, environment: db.environment))
        return ["subscriptions": .array(results)]
    }

    /// Reads and validates a subscription dictionary against the database and the environment's
    /// schema (in production only deployed types, and only fields indexed for what each filter does).
    func parseSubscription(_ json: JSON, key: String, request: DataRequest) async throws -> Subscription {
        let id = try Wire.string(json["subscriptionID"], key: "\(key).subscriptionID") ?? RandomUUID.string()
        try Subscription.validateID(id, key: "\(key).subscriptionID")
        guard let typeName = json["subscriptionType"]?.stringValue else {
            throw StratusError.badRequest("\(key).subscriptionType is required: \"query\", \"zone\" or \"database\"")
        }
        guard let kind = Subscription.Kind(rawValue: typeName) else {
            throw StratusError.badRequest("\(key).subscriptionType must be \"query\", \"zone\" or \"database\", not '\(Names.printable(typeName))'")
        }
        switch (request.scope, kind) {
        case (.public, .zone), (.public, .database):
            throw StratusError.badRequest("the public database supports query subscriptions only (its one zone is watched by a query subscription on each record type)")
        case (.shared, .query):
            throw StratusError.badRequest("the shared database supports zone and database subscriptions; subscribe to a shared zone, or to the whole shared database")
        default:
            break
        }
        var subscription = Subscription(id: id, kind: kind)
        if let info = json["notificationInfo"], info != .null {
            try Subscription.validateNotificationInfo(info, key: "\(key).notificationInfo")
            subscription.notificationInfo = info
        }
        switch kind {
        case .query:
            guard let queryJSON = json["query"], queryJSON != .null else {
                throw StratusError.badRequest("\(key).query is required for a query subscription: {\"recordType\": …, \"filterBy\": […]}")
            }
            let dataDB = try request.database(requireUser: true)
            var query = try await schemas.parseQuery(queryJSON, db: dataDB)
            // Refuses a type the caller's roles can never read (public database).
            _ = try await schemas.restrict(&query, for: request, in: dataDB)
            subscription.query = query
            subscription.queryJSON = queryJSON
            subscription.firesOn = try Subscription.parseFiresOn(json["firesOn"], key: "\(key).firesOn")
            subscription.firesOnce = try Wire.bool(json["firesOnce"], key: "\(key).firesOnce") ?? false
            let zoneWide = try Wire.bool(json["zoneWide"], key: "\(key).zoneWide") ?? true
            if !zoneWide, request.scope == .private {
                let zone = try request.zoneName(json["zoneID"], key: "\(key).zoneID")
                try await requireZone(zone, in: dataDB)
                (subscription.zoneName, subscription.zoneOwner) = (zone, dataDB.owner)
            }
        case .zone:
            guard let zoneJSON = json["zoneID"], zoneJSON != .null else {
                throw StratusError.badRequest("\(key).zoneID is required for a zone subscription")
            }
            if request.scope == .shared {
                let access = try await shares.shareAccess(request, zoneJSON, key: "\(key).zoneID")
                (subscription.zoneName, subscription.zoneOwner) = (access.zone, access.ownerDB.owner)
            } else {
                let dataDB = try request.database(requireUser: true)
                let zone = try request.zoneName(zoneJSON, key: "\(key).zoneID")
                try await requireZone(zone, in: dataDB)
                (subscription.zoneName, subscription.zoneOwner) = (zone, dataDB.owner)
            }
        case .database:
            break
        }
        return subscription
    }

    /// `ZONE_NOT_FOUND` unless `zone` is a live zone of `db` (the default zone always is).
    func requireZone(_ zone: String, in db: DatabaseRef) async throws {
        guard zone != Names.defaultZone else { return }
        if try await records.lookupZones(db, names: [zone])[zone] == nil {
            throw StratusError(.zoneNotFound, "zone '\(Names.printable(zone))' does not exist in this database; create it first")
        }
    }

    func subscriptionJSON(_ subscription: Subscription, _ request: DataRequest) -> JSON {
        var zoneID: JSON?
        if let zone = subscription.zoneName {
            zoneID = request.scope == .shared
                ? DataRequest.sharedZoneIDJSON(owner: subscription.zoneOwner ?? .nobody, zone: zone)
                : request.zoneIDJSON(zone)
        }
        return subscription.wireJSON(zoneID: zoneID)
    }

    static func subscriptionError(_ error: StratusError, id: String?, uuid: String) -> JSON {
        var dictionary = error.dictionary(uuid: uuid)
        if let id, case .object(var members) = dictionary {
            members["subscriptionID"] = .string(id)
            dictionary = .object(members)
        }
        return dictionary
    }
}
