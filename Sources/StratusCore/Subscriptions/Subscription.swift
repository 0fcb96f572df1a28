/// A CKWS subscription: what a user asked to be notified of in one database.
///
/// Query subscriptions watch the records a query matches (in every zone, or one), zone
/// subscriptions every change in one zone, database subscriptions every change in the database.
public struct Subscription: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        case query, zone, database

        /// The code stored in PostgreSQL.
        public var code: Int16 {
            switch self {
            case .query: return 1
            case .zone: return 2
            case .database: return 3
            }
        }

        public init?(code: Int16) {
            guard let kind = Kind.allCases.first(where: { $0.code == code }) else { return nil }
            self = kind
        }
    }

    /// What a query subscription fires on: bits of ``firesOn``.
    public struct Firing: OptionSet, Sendable, Hashable {
        public let rawValue: Int16
        public init(rawValue: Int16) { self.rawValue = rawValue }

        public static let create = Firing(rawValue: 1)
        public static let update = Firing(rawValue: 2)
        public static let delete = Firing(rawValue: 4)
        public static let all: Firing = [.create, .update, .delete]

        /// The CKWS spellings, in this order.
        public static let names: [(String, Firing)] = [("create", .create), ("update", .update), ("delete", .delete)]
    }

    /// Most subscriptions one user may have in one database.
    public static let maximumPerDatabase = 1_000
    /// Longest subscription ID, in bytes.
    public static let maximumIDBytes = 255

    public var id: String
    public var kind: Kind
    /// The watched zone: a zone subscription's, or a query subscription's when not zone-wide.
    /// `nil` for database subscriptions and zone-wide query subscriptions.
    public var zoneName: String?
    /// The owner of the watched zone, in the shared database (whose zones are other users').
    public var zoneOwner: UserID?
    /// The query of a query subscription, as validated against the schema.
    public var query: Query?
    /// The query dictionary as the client gave it, rendered back unchanged.
    public var queryJSON: JSON?
    public var firesOn: Firing
    public var firesOnce: Bool
    /// The notification-info dictionary, rendered back and used for the notification's `aps`.
    public var notificationInfo: JSON?

    public init(id: String, kind: Kind, zoneName: String? = nil, zoneOwner: UserID? = nil, query: Query? = nil, queryJSON: JSON? = nil,
                firesOn: Firing = .all, firesOnce: Bool = false, notificationInfo: JSON? = nil) {
        self.id = id
        self.kind = kind
        self.zoneName = zoneName
        self.zoneOwner = zoneOwner
        self.query = query
        self.queryJSON = queryJSON
        self.firesOn = firesOn
        self.firesOnce = firesOnce
        self.notificationInfo = notificationInfo
    }

    /// The record type a query subscription watches.
    public var recordType: String? { query?.recordType }

    /// Checks a client-chosen subscription ID.
    public static func validateID(_ id: String, key: String) throws(StratusError) {
        guard Names.isPrintableName(id, maximumBytes: maximumIDBytes) else {
            throw .badRequest("'\(key)' must be 1-\(maximumIDBytes) bytes of printable characters")
        }
    }

    /// The keys of a notification-info dictionary and the JSON kind each takes.
    static let notificationInfoKeys: [String: String] = [
        "alertBody": "string", "alertLocalizationKey": "string", "alertLocalizationArgs": "strings",
        "alertActionLocalizationKey": "string", "alertLaunchImage": "string", "soundName": "string",
        "shouldBadge": "bool", "shouldSendContentAvailable": "bool",
        // As CloudKit's CKNotificationInfo: the APNs category, and record fields a query
        // notification carries (`ck.qry.af`).
        "category": "string", "desiredKeys": "strings",
    ]

    /// Checks a notification-info dictionary: known keys with values of their kind.
    public static func validateNotificationInfo(_ json: JSON, key: String) throws(StratusError) {
        guard let members = json.objectValue else { throw .badRequest("'\(key)' must be an object") }
        for (name, value) in members where value != .null {
            switch notificationInfoKeys[name] {
            case "string"?:
                guard let text = value.stringValue, text.utf8.count <= 4_096 else {
                    throw .badRequest("'\(key).\(name)' must be a string of at most 4096 bytes")
                }
            case "bool"?:
                _ = try Wire.bool(value, key: "\(key).\(name)")
            case "strings"?:
                guard let list = value.arrayValue, list.count <= 32, list.allSatisfy({ $0.stringValue.map { $0.utf8.count <= 1_024 } ?? false }) else {
                    throw .badRequest("'\(key).\(name)' must be an array of at most 32 strings")
                }
            default:
                throw .badRequest("'\(key)' has an unknown key '\(Names.printable(name))'; the keys are \(notificationInfoKeys.keys.sorted().joined(separator: ", "))")
            }
        }
    }

    /// Reads `firesOn`: an array of "create", "update", "delete" (all three when absent).
    public static func parseFiresOn(_ json: JSON?, key: String) throws(StratusError) -> Firing {
        guard let json, json != .null else { return .all }
        guard let list = json.arrayValue, !list.isEmpty else {
            throw .badRequest("'\(key)' must be a non-empty array of \"create\", \"update\" and \"delete\"")
        }
        var firing: Firing = []
        for item in list {
            guard let name = item.stringValue, let bit = Firing.names.first(where: { $0.0 == name })?.1 else {
                throw .badRequest("'\(key)' may hold only \"create\", \"update\" and \"delete\", not \(item.stringValue.map { "'\(Names.printable($0))'" } ?? item.kindName)")
            }
            firing.insert(bit)
        }
        return firing
    }
}
