import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusStore

/// `zones/list`, `zones/lookup` and `zones/modify`.
struct ZonesController: Sendable {
    let records: RecordStore
    let notifier: Notifier
    let shares: SharesController
    let logger: Logger

    static func zoneJSON(_ request: DataRequest, _ zone: ZoneInfo) -> JSON {
        if zone.deleted {
            return ["zoneID": request.zoneIDJSON(zone.name), "deleted": true]
        }
        return ["zoneID": request.zoneIDJSON(zone.name), "atomic": .bool(request.scope != .public && zone.name != Names.defaultZone)]
    }

    /// `zones/list`.
    func listZones(_ request: DataRequest) async throws -> JSON {
        if request.scope == .shared { return try await listSharedZones(request) }
        let db = try request.database(requireUser: false)
        let zones = try await records.listZones(db)
        return ["zones": .array(zones.map { Self.zoneJSON(request, $0) })]
    }

    /// `zones/lookup`.
    func lookupZones(_ request: DataRequest) async throws -> JSON {
        guard let list = request.body["zones"]?.arrayValue else {
            throw StratusError.badRequest("'zones' must be an array of zone ID dictionaries")
        }
        guard list.count <= ModifyRequest.maximumOperations else {
            throw StratusError.badRequest("at most \(ModifyRequest.maximumOperations) zones per request")
        }
        if request.scope == .shared { return try await lookupSharedZones(request, list) }
        let uuid = newUUID()
        var names: [Result<String, StratusError>] = []
        for item in list {
            do throws(StratusError) {
                names.append(.success(try request.zoneName(item, key: "zones[]")))
            } catch {
                if error.code == .zoneNotFound { names.append(.failure(error)) } else { throw error }
            }
        }
        let db = try request.database(requireUser: false)
        let found = try await records.lookupZones(db, names: names.compactMap { try? $0.get() })
        return ["zones": .array(zip(list, names).map { item, name in
            if case .success(let name) = name, let zone = found[name] { return Self.zoneJSON(request, zone) }
            return StratusError(.zoneNotFound, "zone '\(Names.printable(item["zoneName"]?.stringValue ?? ""))' does not exist").dictionary(uuid: uuid, zoneID: item)
        })]
    }

    /// `zones/modify`: create and delete custom zones in the private database.
    func modifyZones(_ request: DataRequest) async throws -> JSON {
        guard let operations = request.body["operations"]?.arrayValue else {
            throw StratusError.badRequest("'operations' must be an array of {\"operationType\", \"zone\"}")
        }
        guard operations.count <= ModifyRequest.maximumOperations else {
            throw StratusError.badRequest("at most \(ModifyRequest.maximumOperations) operations per request")
        }
        let uuid = newUUID()
        var results: [JSON] = []
        for (index, operation) in operations.enumerated() {
            guard let type = operation["operationType"]?.stringValue, type == "create" || type == "delete" else {
                throw StratusError.badRequest("operations[\(index)].operationType must be 'create' or 'delete'")
            }
            guard let zoneIDJSON = operation["zone"]?["zoneID"] else {
                throw StratusError.badRequest("operations[\(index)] needs zone.zoneID")
            }
            do throws(StratusError) {
                if request.scope != .private {
                    throw StratusError.badRequest("custom zones can only be created or deleted in the private database")
                }
                let name = try request.zoneName(zoneIDJSON, key: "operations[\(index)].zone.zoneID")
                if name == Names.defaultZone {
                    throw StratusError.badRequest("the default zone cannot be created or deleted")
                }
                let db = try request.database(requireUser: true)
                if type == "create" {
                    let zone = try await wrap(logger) { try await self.records.createZone(db, name: name) }
                    results.append(Self.zoneJSON(request, zone))
                } else if let zone = try await wrap(logger, { try await self.records.deleteZone(db, name: name) }) {
                    await notifier.zoneDeleted(db, zone: name)
                    results.append(Self.zoneJSON(request, zone))
                } else {
                    throw StratusError(.zoneNotFound, "zone '\(name)' does not exist")
                }
            } catch {
                if error.code == .authenticationRequired { throw error }
                results.append(error.dictionary(uuid: uuid, zoneID: zoneIDJSON))
            }
        }
        return ["zones": .array(results)]
    }

    /// `zones/list` of the shared database: the zones shared with the caller that they accepted.
    func listSharedZones(_ request: DataRequest) async throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        let zones = try await records.sharing.sharedZones(containerID: request.caller.container.id, environment: request.caller.environment, user: user)
        return ["zones": .array(zones.map { SharesController.sharedZoneJSON(owner: $0.owner, zone: $0.zone) })]
    }

    /// `zones/lookup` of the shared database.
    func lookupSharedZones(_ request: DataRequest, _ list: [JSON]) async throws -> JSON {
        let uuid = newUUID()
        var results: [JSON] = []
        for item in list {
            do {
                let access = try await shares.shareAccess(request, item, key: "zones[]")
                results.append(SharesController.sharedZoneJSON(owner: access.ownerDB.owner, zone: access.zone))
            } catch let error as StratusError where error.code == .zoneNotFound {
                results.append(error.dictionary(uuid: uuid, zoneID: item))
            }
        }
        return ["zones": .array(results)]
    }
}
