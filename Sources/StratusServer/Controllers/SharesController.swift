import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Shares: `records/resolve` and `records/accept`, the share keys of `cloudkit.share` records,
/// and what a participant may reach in their shared database.
struct SharesController: Sendable {
    let admin: AdminStore
    let records: RecordStore
    let links: AssetLinks
    /// The service's public URL, which a share's URL starts with.
    let publicURL: String

    /// Most short GUIDs in one `records/resolve` or `records/accept`.
    static let maximumShortGUIDs = 50

    /// The URL a share is known by: the service's address and the share's short GUID.
    func shareURL(_ shortGUID: String) -> String { "\(publicURL)/share/\(shortGUID)" }

    /// A participant dictionary (CKWS ref §3.9). Email addresses are shown only to the owner
    /// (who typed them) and to the participant themselves.
    static func participantJSON(_ participant: ParticipantInfo, viewerIsOwner: Bool, viewer: UserID?) -> JSON {
        var lookup: [String: JSON] = [:]
        var identity: [String: JSON] = [:]
        if let user = participant.userRecordName {
            identity["userRecordName"] = .string(user.rawValue)
            lookup["userRecordName"] = .string(user.rawValue)
        }
        if let email = participant.email, viewerIsOwner || (viewer != nil && participant.userRecordName == viewer) {
            lookup["emailAddress"] = .string(email)
        }
        identity["lookupInfo"] = .object(lookup)
        return [
            "participantId": .string(participant.participantID),
            "userIdentity": .object(identity),
            "type": .string(participant.type.wireName),
            "permission": .string(participant.permission.wireName),
            "acceptanceStatus": .string(participant.status.wireName),
        ]
    }

    static func ownerParticipantJSON(_ owner: UserID) -> JSON {
        [
            "participantId": .string(owner.rawValue),
            "userIdentity": ["userRecordName": .string(owner.rawValue), "lookupInfo": ["userRecordName": .string(owner.rawValue)]],
            "type": .string(ParticipantType.owner.wireName),
            "permission": .string(SharePermission.readWrite.wireName),
            "acceptanceStatus": .string(ParticipantStatus.accepted.wireName),
        ]
    }

    /// The keys a share record's dictionary carries for `viewer` (CKWS ref §8.1): `owner`,
    /// `participants` (the owner first; removed participants left out), `publicPermission`,
    /// `currentUserParticipant`, `url`.
    func shareKeys(_ share: ShareInfo, viewer: UserID?) -> [String: JSON] {
        let isOwner = viewer == share.owner
        var participants: [JSON] = [Self.ownerParticipantJSON(share.owner)]
        for participant in share.participants where participant.status != .removed {
            participants.append(Self.participantJSON(participant, viewerIsOwner: isOwner, viewer: viewer))
        }
        var keys: [String: JSON] = [
            "owner": Self.ownerParticipantJSON(share.owner),
            "participants": .array(participants),
            "publicPermission": .string(share.publicPermission.wireName),
            "url": .string(shareURL(share.shortGUID)),
        ]
        if isOwner {
            keys["currentUserParticipant"] = Self.ownerParticipantJSON(share.owner)
        } else if let viewer, let own = share.participants.first(where: { $0.userRecordName == viewer }) {
            keys["currentUserParticipant"] = Self.participantJSON(own, viewerIsOwner: false, viewer: viewer)
        }
        return keys
    }

    /// Fills in the share keys of the `cloudkit.share` records among `records`, read from zone
    /// `zone` of the owner's private database `db`.
    func decorateShares(_ records: inout [Record], db: DatabaseRef, zone: String, viewer: UserID?) async throws {
        let names = records.filter { $0.recordType == Record.shareType && !$0.deleted }.map(\.recordName)
        guard !names.isEmpty else { return }
        let shares = try await self.records.sharing.shares(db, zone: zone, names: names)
        for index in records.indices {
            guard records[index].recordType == Record.shareType, let share = shares[records[index].recordName] else { continue }
            records[index].shareKeys = shareKeys(share, viewer: viewer)
        }
    }

    /// `records/resolve` (`accept` false) and `records/accept`: what the shares behind short GUIDs
    /// are, and (accept) joining them. Answered per short GUID.
    func resolveShares(_ request: DataRequest, accept: Bool) async throws -> JSON {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        guard let list = request.body["shortGUIDs"]?.arrayValue else {
            throw StratusError.badRequest("'shortGUIDs' must be an array of {\"value\": \"<short GUID>\"}")
        }
        guard !list.isEmpty, list.count <= Self.maximumShortGUIDs else {
            throw StratusError.badRequest("'shortGUIDs' needs 1 to \(Self.maximumShortGUIDs) entries")
        }
        struct Wanted { var guid: String; var fetchRoot: Bool; var desired: Set<String>? }
        var wanted: [Wanted] = []
        for (index, item) in list.enumerated() {
            guard let guid = item["value"]?.stringValue ?? item.stringValue else {
                throw StratusError.badRequest("shortGUIDs[\(index)] needs a string 'value'")
            }
            wanted.append(Wanted(guid: guid, fetchRoot: try Wire.bool(item["shouldFetchRootRecord"], key: "shortGUIDs[\(index)].shouldFetchRootRecord") ?? false,
                                 desired: try Wire.stringSet(item["rootRecordDesiredKeys"], key: "shortGUIDs[\(index)].rootRecordDesiredKeys")))
        }
        let email = try await admin.user(containerID: request.caller.container.id, userRecordName: user)?.email
        let uuid = newUUID()
        var results: [JSON] = []
        for item in wanted {
            do {
                guard ShortGUID.isWellFormed(item.guid) else { throw SharingStore.unknownShare(item.guid) }
                let share: ShareInfo
                if accept {
                    share = try await records.sharing.accept(containerID: request.caller.container.id, environment: request.caller.environment,
                                                     shortGUID: item.guid, user: user, email: email)
                } else {
                    guard let found = try await records.sharing.share(containerID: request.caller.container.id, environment: request.caller.environment,
                                                              shortGUID: item.guid) else { throw SharingStore.unknownShare(item.guid) }
                    share = found
                }
                results.append(try await shareMetadata(share, request: request, user: user, email: email, fetchRoot: item.fetchRoot,
                                                       desired: item.desired))
            } catch let error as StratusError {
                var dictionary = error.dictionary(uuid: uuid)
                if case .object(var members) = dictionary {
                    members["shortGUID"] = .string(item.guid)
                    dictionary = .object(members)
                }
                results.append(dictionary)
            }
        }
        return ["results": .array(results)]
    }

    /// A share's metadata for `user` (CKWS ref §8.3). ACCESS_DENIED for someone the share is not
    /// open to: neither its owner, nor invited, nor allowed by its link.
    func shareMetadata(_ share: ShareInfo, request: DataRequest, user: UserID, email: String?, fetchRoot: Bool,
                       desired: Set<String>?) async throws -> JSON {
        let isOwner = share.owner == user
        let participant = SharingStore.participant(of: share, user: user, email: email)
        if !isOwner {
            if participant?.status == .removed {
                throw StratusError(.accessDenied, "you were removed from this share; ask its owner to invite you again")
            }
            if participant == nil, share.publicPermission == .none { throw SharingStore.notInvited }
        }
        let ownerDB = DatabaseRef(containerID: request.caller.container.id, environment: request.caller.environment, scope: .private,
                                  owner: share.owner)
        let names = [share.shareName] + (fetchRoot ? share.rootName.map { [$0] } ?? [] : [])
        var found = Array(try await records.lookup(ownerDB, zone: share.zoneName, names: names).values)
        try await decorateShares(&found, db: ownerDB, zone: share.zoneName, viewer: user)
        let zoneID: JSON = ["zoneName": .string(share.zoneName), "ownerRecordName": .string(share.owner.rawValue)]
        var result: [String: JSON] = [
            "containerIdentifier": .string(request.caller.container.name),
            "environment": .string(request.caller.environment.rawValue),
            "databaseScope": .string(isOwner ? "PRIVATE" : "SHARED"),
            "zoneID": zoneID,
            "shortGUID": .string(share.shortGUID),
            "ownerIdentity": ["userRecordName": .string(share.owner.rawValue), "lookupInfo": ["userRecordName": .string(share.owner.rawValue)]],
        ]
        if let root = share.rootName { result["rootRecordName"] = .string(root) }
        if let record = found.first(where: { $0.recordName == share.shareName }) { result["share"] = record.wireJSON() }
        if fetchRoot, let root = share.rootName, let record = found.first(where: { $0.recordName == root }) {
            result["rootRecord"] = record.wireJSON(RecordRendering(desiredKeys: desired, assetURL: links.assetURL(containerID: ownerDB.containerID)))
        }
        if isOwner {
            result["participantType"] = .string(ParticipantType.owner.wireName)
            result["participantStatus"] = .string(ParticipantStatus.accepted.wireName)
            result["participantPermission"] = .string(SharePermission.readWrite.wireName)
        } else if let participant {
            result["participantType"] = .string(participant.type.wireName)
            result["participantStatus"] = .string(participant.status.wireName)
            result["participantPermission"] = .string(participant.permission.wireName)
        } else {
            result["participantType"] = .string(ParticipantType.publicUser.wireName)
            result["participantStatus"] = "UNKNOWN"
            result["participantPermission"] = .string(share.publicPermission.wireName)
        }
        return .object(result)
    }

    /// A share for the operator (`stratus share list`): everything, addresses included.
    func shareAdminJSON(_ share: ShareInfo) -> JSON {
        [
            "owner": .string(share.owner.rawValue),
            "zoneName": .string(share.zoneName),
            "shareName": .string(share.shareName),
            "rootRecordName": share.rootName.map { .string($0) } ?? .null,
            "shortGUID": .string(share.shortGUID),
            "url": .string(shareURL(share.shortGUID)),
            "publicPermission": .string(share.publicPermission.wireName),
            "deleted": .bool(share.deleted),
            "participants": .array(share.participants.map { participant in
                [
                    "participantId": .string(participant.participantID),
                    "userRecordName": participant.userRecordName.map { .string($0.rawValue) } ?? .null,
                    "emailAddress": participant.email.map { .string($0) } ?? .null,
                    "type": .string(participant.type.wireName),
                    "permission": .string(participant.permission.wireName),
                    "acceptanceStatus": .string(participant.status.wireName),
                ]
            }),
        ]
    }
}

// MARK: The shared database

extension DataRequest {
    /// The owner and zone a shared-database `zoneID` names. Every zone there belongs to another
    /// user, so the owner must be named; anything else is answered like a zone that is not there.
    func sharedZoneName(_ json: JSON?, key: String = "zoneID") throws(StratusError) -> (owner: UserID, zone: String) {
        guard let json, json != .null else {
            throw StratusError(.zoneNotFound, "the shared database has no default zone: name a zone shared with you, with its zoneName and ownerRecordName")
        }
        guard let members = json.objectValue else { throw .badRequest("'\(key)' must be an object like {\"zoneName\": …, \"ownerRecordName\": …}") }
        guard let zone = members["zoneName"]?.stringValue else { throw .badRequest("'\(key)' needs a string 'zoneName'") }
        try Names.validateZone(zone)
        guard let owner = try Wire.string(members["ownerRecordName"], key: "\(key).ownerRecordName"),
              owner != "__defaultOwner__", owner != "_defaultOwner", owner != caller.user?.rawValue else {
            throw StratusError(.zoneNotFound, "zone '\(Names.printable(zone))' is not in your shared database: zones there belong to the users who shared them, so name its owner with ownerRecordName")
        }
        guard Names.isPrintableName(owner, maximumBytes: 255) else {
            throw .badRequest("'\(key).ownerRecordName' '\(Names.printable(owner))' is not a user record name")
        }
        return (UserID(owner), zone)
    }

    /// The caller's own shared database (for its change feed's tokens).
    func sharedDatabase(user: UserID) -> DatabaseRef {
        DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: .shared, owner: user)
    }

    static func sharedZoneIDJSON(owner: UserID, zone: String) -> JSON {
        ["zoneName": .string(zone), "ownerRecordName": .string(owner.rawValue)]
    }
}

extension SharesController {
    /// What the caller may reach in a zone of their shared database; ZONE_NOT_FOUND when the
    /// zone is not shared with them (any more), exactly as for a zone that does not exist.
    func shareAccess(_ request: DataRequest, _ json: JSON?, key: String = "zoneID") async throws -> ShareAccess {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        let (owner, zone) = try request.sharedZoneName(json, key: key)
        guard let access = try await records.sharing.shareAccess(containerID: request.caller.container.id, environment: request.caller.environment,
                                                         user: user, owner: owner, zone: zone) else {
            throw Self.notShared(owner: owner, zone: zone)
        }
        return access
    }

    static func notShared(owner: UserID, zone: String) -> StratusError {
        StratusError(.zoneNotFound, "zone '\(Names.printable(zone))' of '\(Names.printable(owner.rawValue))' is not shared with you")
    }

    static func sharedZoneJSON(owner: UserID, zone: String, deleted: Bool = false) -> JSON {
        let zoneID = DataRequest.sharedZoneIDJSON(owner: owner, zone: zone)
        return deleted ? ["zoneID": zoneID, "deleted": true] : ["zoneID": zoneID, "atomic": true]
    }
}
