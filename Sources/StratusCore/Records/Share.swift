/// Sharing's vocabulary (CKWS ref §3.9, §8): what a `cloudkit.share` record says beyond its fields.

/// A participant's (or the public link's) permission. Stored as its code.
public enum SharePermission: Int16, Sendable, CaseIterable {
    case none = 1, readOnly = 2, readWrite = 3

    public var wireName: String {
        switch self {
        case .none: return "NONE"
        case .readOnly: return "READ_ONLY"
        case .readWrite: return "READ_WRITE"
        }
    }

    public init?(wireName: String) {
        guard let match = Self.allCases.first(where: { $0.wireName == wireName }) else { return nil }
        self = match
    }
}

/// Where a participant stands. Stored as its code.
public enum ParticipantStatus: Int16, Sendable, CaseIterable {
    case invited = 1, accepted = 2, removed = 3

    public var wireName: String {
        switch self {
        case .invited: return "INVITED"
        case .accepted: return "ACCEPTED"
        case .removed: return "REMOVED"
        }
    }
}

/// A participant's kind. `owner` is never stored (the zone's owner is the share's owner).
public enum ParticipantType: Int16, Sendable {
    case owner = 1, user = 3, publicUser = 4

    public var wireName: String {
        switch self {
        case .owner: return "OWNER"
        case .user: return "USER"
        case .publicUser: return "PUBLIC_USER"
        }
    }
}

/// A participant as the owner names it in a share's `participants`.
public struct ParticipantSpec: Sendable, Equatable {
    /// Exactly one of these names the person.
    public var userRecordName: UserID?
    public var email: String?
    public var permission: SharePermission

    public init(userRecordName: UserID? = nil, email: String? = nil, permission: SharePermission) {
        self.userRecordName = userRecordName
        self.email = email
        self.permission = permission
    }
}

/// The share-only keys of a `cloudkit.share` record in `records/modify`.
public struct ShareSpec: Sendable, Equatable {
    /// The root record of a hierarchy share (`forRecord`); `nil` for a zone-wide share.
    public var forRecord: String?
    /// The root's `recordChangeTag` as the client last saw it, when given.
    public var forRecordTag: String?
    /// `nil`: unchanged (`NONE` on create).
    public var publicPermission: SharePermission?
    /// `nil`: unchanged (none on create). Otherwise the whole list: those left out are removed.
    public var participants: [ParticipantSpec]?

    public init(forRecord: String? = nil, forRecordTag: String? = nil, publicPermission: SharePermission? = nil,
                participants: [ParticipantSpec]? = nil) {
        self.forRecord = forRecord
        self.forRecordTag = forRecordTag
        self.publicPermission = publicPermission
        self.participants = participants
    }

    /// Most participants one share may have (CloudKit allows 100).
    public static let maximumParticipants = 100

    /// Whether `name` is one of a share record's fields (they alone start with `cloudkit.`).
    @inline(__always) public static func isShareField(_ name: String) -> Bool {
        name.utf8.first == UInt8(ascii: "c") && name.hasPrefix("cloudkit.") && fields[name] != nil
    }

    /// The fields a share record may carry, with their types (CloudKit JS `ShareRecordType`).
    public static let fields: [String: FieldType] = [
        "cloudkit.title": FieldType(.string),
        "cloudkit.type": FieldType(.string),
        "cloudkit.thumbnailImageData": FieldType(.bytes),
    ]

    /// Decodes the share keys of a record dictionary; `nil` when it has none.
    public static func decode(_ record: [String: JSON], recordName: String) throws(StratusError) -> ShareSpec? {
        func given(_ key: String) -> Bool { if let value = record[key] { return value != .null } else { return false } }
        guard given("forRecord") || given("publicPermission") || given("participants") else { return nil }
        var spec = ShareSpec()
        if let forJSON = record["forRecord"], forJSON != .null {
            guard let members = forJSON.objectValue, let name = members["recordName"]?.stringValue else {
                throw .badRequest("share '\(Names.printable(recordName))': forRecord must be {\"recordName\": …, \"recordChangeTag\": …}")
            }
            try Names.validateRecordName(name)
            spec.forRecord = name
            spec.forRecordTag = try Wire.string(members["recordChangeTag"], key: "forRecord.recordChangeTag")
        }
        if let text = try Wire.string(record["publicPermission"], key: "publicPermission") {
            guard let permission = SharePermission(wireName: text) else {
                throw .badRequest("publicPermission '\(Names.printable(text))' is not one of NONE, READ_ONLY, READ_WRITE")
            }
            spec.publicPermission = permission
        }
        if let listJSON = record["participants"], listJSON != .null {
            guard let list = listJSON.arrayValue else { throw .badRequest("'participants' must be an array of share participant dictionaries") }
            guard list.count <= maximumParticipants else {
                throw .badRequest("a share may have at most \(maximumParticipants) participants; this one names \(list.count)")
            }
            var participants: [ParticipantSpec] = []
            for (index, item) in list.enumerated() {
                participants.append(try decodeParticipant(item, key: "participants[\(index)]"))
            }
            spec.participants = participants
        }
        return spec
    }

    /// One participant dictionary: `userIdentity` (`userRecordName` or `lookupInfo`), or
    /// `lookupInfo` directly; `permission` (default READ_ONLY). `type` and `acceptanceStatus` are
    /// the server's to set: what a client sends is ignored (except that OWNER is refused).
    static func decodeParticipant(_ json: JSON, key: String) throws(StratusError) -> ParticipantSpec {
        guard let members = json.objectValue else { throw .badRequest("\(key) must be a share participant dictionary") }
        if members["type"]?.stringValue == "OWNER" {
            throw .badRequest("\(key) has type OWNER: the zone's owner owns the share and is not listed as a participant")
        }
        var permission = SharePermission.readOnly
        if let text = try Wire.string(members["permission"], key: "\(key).permission") {
            guard let parsed = SharePermission(wireName: text), parsed != .none else {
                throw .badRequest("\(key).permission '\(Names.printable(text))' is not READ_ONLY or READ_WRITE")
            }
            permission = parsed
        }
        let identity = members["userIdentity"]?.objectValue ?? [:]
        let lookup = identity["lookupInfo"]?.objectValue ?? members["lookupInfo"]?.objectValue ?? [:]
        var userRecordName = try Wire.string(identity["userRecordName"], key: "\(key).userIdentity.userRecordName")
        if userRecordName == nil { userRecordName = try Wire.string(lookup["userRecordName"], key: "\(key).lookupInfo.userRecordName") }
        let email = try Wire.string(lookup["emailAddress"], key: "\(key).lookupInfo.emailAddress")
        if let userRecordName {
            guard Names.isPrintableName(userRecordName, maximumBytes: 255) else {
                throw .badRequest("\(key): '\(Names.printable(userRecordName))' is not a user record name")
            }
            return ParticipantSpec(userRecordName: UserID(userRecordName), permission: permission)
        }
        if let email {
            guard email.contains("@"), Names.isPrintableName(email, maximumBytes: 320) else {
                throw .badRequest("\(key): '\(Names.printable(email))' is not an email address")
            }
            return ParticipantSpec(email: email, permission: permission)
        }
        if lookup["phoneNumber"] != nil {
            throw .badRequest("\(key): participants are found by userRecordName or emailAddress; phone numbers are not supported")
        }
        throw .badRequest("\(key) needs userIdentity.userRecordName or userIdentity.lookupInfo.emailAddress")
    }
}

/// Short GUIDs: the unguessable name of a share in its URL.
public enum ShortGUID {
    static let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz".utf8)

    /// 25 characters of base 62 (~148 random bits), the length CloudKit's look like.
    public static func mint() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = []
        bytes.reserveCapacity(25)
        while bytes.count < 25 {
            // 62 × 4 = 248: drawing below it keeps every character equally likely.
            let byte = UInt8.random(in: 0...255, using: &generator)
            if byte < 248 { bytes.append(alphabet[Int(byte % 62)]) }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether `text` could be a short GUID (cheap check before a lookup).
    public static func isWellFormed(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 64 && text.utf8.allSatisfy { alphabet.contains($0) }
    }
}
