/// The security roles of one caller, which guard the public database: `_world` (anyone with an
/// API token), `_icloud` (any signed-in user) and `_creator` (the user who created the record).
/// Private databases are their owner's alone and take no roles.
///
/// A record type's grants say which roles may CREATE records of it, READ them and WRITE them
/// (update and delete). Choices where CloudKit's documentation is silent:
/// - a role granted WRITE may also read what it may change;
/// - a record type the schema lists without grants is closed to every role, as it reads;
/// - custom roles (`CREATE ROLE`) grant nothing yet: no user can be given one.
public struct RecordAccess: Sendable, Equatable {
    /// The signed-in caller's user record name; `nil` for a caller with only an API token.
    public var user: String?

    public init(user: String?) {
        self.user = user
    }

    /// The roles that hold `permission` on `recordType` (WRITE counting as READ), in the order
    /// `_world`, `_icloud`, `_creator`.
    public static func roles(granting permission: Permission, on recordType: String, in schema: Schema) -> [String] {
        let grants = schema.grants[recordType] ?? [:]
        return [SystemRole.world, SystemRole.icloud, SystemRole.creator].filter { role in
            guard let held = grants[role] else { return false }
            return held.contains(permission) || (permission == .read && held.contains(.write))
        }
    }

    /// Whether the caller may `permission` records of `recordType`; `creator` is the existing
    /// record's creator (`nil` for one not written yet, or to ask about every record of the type).
    public func allows(_ permission: Permission, on recordType: String, creator: String?, in schema: Schema) -> Bool {
        let roles = Self.roles(granting: permission, on: recordType, in: schema)
        if roles.contains(SystemRole.world) { return true }
        guard let user else { return false }
        return roles.contains(SystemRole.icloud) || (roles.contains(SystemRole.creator) && creator == user)
    }

    /// Whether the caller may read only the records they created (the type grants READ to
    /// `_creator` but to none of the caller's other roles).
    public func readsOnlyOwnRecords(of recordType: String, in schema: Schema) -> Bool {
        guard user != nil, !allows(.read, on: recordType, creator: nil, in: schema) else { return false }
        return Self.roles(granting: .read, on: recordType, in: schema).contains(SystemRole.creator)
    }

    /// The error for a refused `permission`, naming the roles that would have it.
    public static func denial(_ permission: Permission, on recordType: String, recordName: String?, in schema: Schema) -> StratusError {
        let roles = roles(granting: permission, on: recordType, in: schema)
        let subject = recordName.map { "record '\(Names.printable($0))'" } ?? "records"
        let verb = switch permission {
        case .create: "create"
        case .read: "read"
        case .write: "change or delete"
        }
        let holders = roles.isEmpty
            ? (schema.grants[recordType]?.values.contains { !$0.isEmpty } == true ? "no role"
               : "no role (the schema has no GRANT for this type; add one, such as GRANT \(permission.rawValue) TO \"_icloud\")")
            : roles.joined(separator: ", ")
        let hint = roles == [SystemRole.creator] ? " (only the user who created a record)" : ""
        return StratusError(.accessDenied, "you may not \(verb) \(subject) of type '\(recordType)' in the public database: its security roles give \(permission.rawValue) to \(holders)\(hint)")
    }
}
