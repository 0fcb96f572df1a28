/// The security roles of one caller, which guard the public database: `_world` (anyone with an
/// API token), `_icloud` (any signed-in user), `_creator` (the user who created the record) and
/// the custom roles (`CREATE ROLE`) an administrator gave the user (`stratus role assign`).
/// Private databases are their owner's alone and take no roles. A server-to-server key acts with
/// the container administrator's privileges and is not restricted by roles at all.
///
/// A record type's grants say which roles may CREATE records of it, READ them and WRITE them
/// (update and delete). Choices where CloudKit's documentation is silent:
/// - a role granted WRITE may also read what it may change;
/// - a record type the schema lists without grants is closed to every role, as it reads;
/// - a write (create, change, delete) always needs a signed-in user: an anonymous caller is
///   asked to sign in (`AUTHENTICATION_REQUIRED`) even where `_world` holds CREATE or WRITE,
///   which then reaches every signed-in user (a record needs a creator);
/// - a custom role's grants apply to its members on every record of the type (it has no notion
///   of creator), and only to signed-in members.
public struct RecordAccess: Sendable, Equatable {
    /// The signed-in caller's user record name; `nil` for a caller with only an API token.
    public var user: UserID?
    /// The custom roles the signed-in caller holds in this environment.
    public var roles: Set<String>

    public init(user: UserID?, roles: Set<String> = []) {
        self.user = user
        self.roles = user == nil ? [] : roles
    }

    /// The roles that hold `permission` on `recordType` (WRITE counting as READ), in the order
    /// `_world`, `_icloud`, `_creator`, then custom roles by name.
    public static func roles(granting permission: Permission, on recordType: String, in schema: Schema) -> [String] {
        let grants = schema.grants[recordType] ?? [:]
        let system = [SystemRole.world, SystemRole.icloud, SystemRole.creator]
        return (system + grants.keys.filter { !system.contains($0) }.sorted()).filter { role in
            guard let held = grants[role] else { return false }
            return held.contains(permission) || (permission == .read && held.contains(.write))
        }
    }

    /// Whether the caller may `permission` records of `recordType`; `creator` is the existing
    /// record's creator (`nil` for one not written yet, or to ask about every record of the type).
    public func allows(_ permission: Permission, on recordType: String, creator: UserID?, in schema: Schema) -> Bool {
        let roles = Self.roles(granting: permission, on: recordType, in: schema)
        if roles.contains(SystemRole.world) { return true }
        guard let user else { return false }
        return roles.contains(SystemRole.icloud) || roles.contains(where: self.roles.contains)
            || (roles.contains(SystemRole.creator) && creator == user)
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
