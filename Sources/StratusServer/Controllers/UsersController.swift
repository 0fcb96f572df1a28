import Foundation
import Hummingbird
import HummingbirdBcrypt
import NIOPosix
import StratusCore
import StratusStore

/// `users/caller`, `users/current`, `users/discover` and the legacy `users/lookup/…`: who the
/// caller is, and the users who let themselves be found.
struct UsersController: Sendable {
    let admin: AdminStore
    let records: RecordStore

    /// `users/caller`: the caller's identity dictionary itself, at the top level, as CloudKit JS
    /// (`setUpAuth()`, `fetchCurrentUserIdentity()`) and MistKit read it: `userRecordName`,
    /// `lookupInfo` (their record name and, for a user, their own email address) and
    /// `nameComponents` (their own names, discoverable or not). A server-to-server key's caller is
    /// `_key_<key ID>`, with no names.
    func caller(_ request: DataRequest) async throws -> JSON {
        let profile = try await callerProfile(request)
        var lookupInfo: [String: JSON] = ["userRecordName": .string(profile.userRecordName.rawValue)]
        if !profile.email.isEmpty { lookupInfo["emailAddress"] = .string(profile.email) }
        return Self.identityJSON(profile, lookupInfo: lookupInfo)
    }

    /// `users/current` (legacy): the caller's user dictionary.
    func currentUser(_ request: DataRequest) async throws -> JSON {
        Self.userDictionary(try await callerProfile(request))
    }

    /// The signed-in caller's profile (a server-to-server key has only its name).
    func callerProfile(_ request: DataRequest) async throws -> UserProfile {
        let user = try request.caller.requireUser(signInURL: request.signInURL)
        let profile = request.caller.serverKey == nil ? try await admin.profile(containerID: request.caller.container.id, user: user) : nil
        return profile ?? UserProfile(userRecordName: user, email: "")
    }

    /// Creates the user's record of type `Users` in the public database, named by their user
    /// record name and created by them (so the type's `_creator` grant lets them change it), if
    /// it does not exist yet. In development the type is made just-in-time (CloudKit's grants for
    /// it: `_creator` WRITE, `_world` READ); production has it once a deploy brought it, and
    /// until then its users get their record at their first sign-in after the deploy.
    func ensureUserRecord(_ user: UserID, containerID: ContainerID, environment: ContainerEnvironment) async throws {
        let schema = try await records.schemas.schema(containerID: containerID, environment: environment)
        if environment == .production, schema.recordTypes[SystemRole.usersRecordType] == nil { return }
        let db = DatabaseRef(containerID: containerID, environment: environment, scope: .public, owner: .nobody)
        let body: JSON = ["operations": [["operationType": "create", "record": ["recordName": .string(user.rawValue), "recordType": .string(SystemRole.usersRecordType)]]]]
        let request = try ModifyRequest.decode(body, newRecordName: { user.rawValue })
        _ = try await records.modify(db, zone: Names.defaultZone, request: request, caller: user, now: now(),
                                     allowSchemaChanges: environment == .development, access: nil)
    }

    /// Most lookup infos or users in one discovery or lookup request.
    static let maximumDiscover = 200

    /// `POST users/discover` with `{"lookupInfos": [{"emailAddress"} | {"userRecordName"} | {"phoneNumber"}]}`:
    /// the identities of the users who let themselves be found, each echoing the lookup info
    /// that matched it. Anyone else (no such user, not discoverable, disabled) is left out alike;
    /// Stratus knows no phone numbers, so those never match. Needs a signed-in caller.
    func discoverUsers(_ request: DataRequest) async throws -> JSON {
        _ = try request.caller.requireUser(signInURL: request.signInURL)
        guard !request.body.isEmpty else {
            // GET (or an empty POST): the caller's address book, which a self-hosted service does not have.
            return ["users": []]
        }
        let infos = try Self.lookupItems(request.body, key: "lookupInfos")
        var emails: [String] = []
        var names: [String] = []
        for (index, info) in infos.enumerated() {
            let email = try Wire.string(info["emailAddress"], key: "lookupInfos[\(index)].emailAddress")
            let name = try Wire.string(info["userRecordName"], key: "lookupInfos[\(index)].userRecordName")
            let phone = try Wire.string(info["phoneNumber"], key: "lookupInfos[\(index)].phoneNumber")
            guard email != nil || name != nil || phone != nil else {
                throw StratusError.badRequest("lookupInfos[\(index)] needs 'emailAddress', 'userRecordName' or 'phoneNumber'")
            }
            if let email { emails.append(Self.normalizedEmail(email)) }
            if let name { names.append(name) }
        }
        let found = try await admin.discoverableUsers(containerID: request.caller.container.id, emails: emails, userRecordNames: names)
        var users: [JSON] = []
        for info in infos {
            let match: UserProfile? = if let email = info["emailAddress"]?.stringValue {
                found.first { $0.email == Self.normalizedEmail(email) }
            } else if let name = info["userRecordName"]?.stringValue {
                found.first { $0.userRecordName.rawValue == name }
            } else { nil }
            if let match { users.append(Self.identityJSON(match, lookupInfo: info)) }
        }
        return ["users": .array(users)]
    }

    /// `POST users/lookup/email` and `users/lookup/id` (legacy): `{"users": [{"emailAddress"}]}` or
    /// `{"users": [{"userRecordName"}]}` → the user dictionaries of discoverable users (with the
    /// email address for lookups by email).
    func lookUpUsers(_ request: DataRequest, byEmail: Bool) async throws -> JSON {
        _ = try request.caller.requireUser(signInURL: request.signInURL)
        let key = byEmail ? "emailAddress" : "userRecordName"
        let items = try Self.lookupItems(request.body, key: "users")
        var wanted: [String] = []
        for (index, item) in items.enumerated() {
            guard let value = try Wire.string(item[key], key: "users[\(index)].\(key)") else {
                throw StratusError.badRequest("users[\(index)] needs a string '\(key)'")
            }
            wanted.append(byEmail ? Self.normalizedEmail(value) : value)
        }
        let found = try await admin.discoverableUsers(containerID: request.caller.container.id,
                                                      emails: byEmail ? wanted : [], userRecordNames: byEmail ? [] : wanted)
        let users: [JSON] = wanted.compactMap { value in
            guard let match = found.first(where: { byEmail ? $0.email == value : $0.userRecordName.rawValue == value }) else { return nil }
            var user = Self.userDictionary(match)
            if byEmail, case .object(var members) = user {
                members["emailAddress"] = .string(match.email)
                user = .object(members)
            }
            return user
        }
        return ["users": .array(users)]
    }

    /// `users/lookup/contacts` (legacy): the caller's contacts who use the app. A self-hosted
    /// service has no contacts: always none.
    func lookUpContacts(_ request: DataRequest) throws -> JSON {
        _ = try request.caller.requireUser(signInURL: request.signInURL)
        return ["users": []]
    }

    /// The array under `key` of a discovery or lookup body: objects, at most `maximumDiscover`.
    static func lookupItems(_ body: [String: JSON], key: String) throws(StratusError) -> [[String: JSON]] {
        guard let list = body[key] else { throw .badRequest("missing required key '\(key)'") }
        guard let items = list.arrayValue else { throw .badRequest("'\(key)' must be an array of objects") }
        guard items.count <= maximumDiscover else {
            throw .badRequest("\(items.count) items in '\(key)'; at most \(maximumDiscover) are allowed in one request")
        }
        return try items.enumerated().map { index, item throws(StratusError) in
            guard let members = item.objectValue else { throw .badRequest("\(key)[\(index)] must be an object") }
            return members
        }
    }

    static func normalizedEmail(_ email: String) -> String {
        email.trimmingCharacters(in: .whitespaces).lowercased()
    }

    /// A user identity dictionary: `userRecordName`, `lookupInfo`, `nameComponents`.
    static func identityJSON(_ profile: UserProfile, lookupInfo: [String: JSON]) -> JSON {
        var names: [String: JSON] = [:]
        if let given = profile.givenName { names["givenName"] = .string(given) }
        if let family = profile.familyName { names["familyName"] = .string(family) }
        return ["userRecordName": .string(profile.userRecordName.rawValue), "lookupInfo": .object(lookupInfo), "nameComponents": .object(names)]
    }

    /// A (legacy) user dictionary: `userRecordName`, `firstName`, `lastName`.
    static func userDictionary(_ profile: UserProfile) -> JSON {
        ["userRecordName": .string(profile.userRecordName.rawValue), "firstName": profile.givenName.map { .string($0) } ?? .null,
         "lastName": profile.familyName.map { .string($0) } ?? .null]
    }
}
