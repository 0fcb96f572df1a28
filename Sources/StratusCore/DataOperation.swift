/// The data API's operations (CloudKit Web Services), each named by the path that follows
/// `/database/1/<container>/<environment>/<database>/`: the one place these names are spelled.
public enum DataOperation: String, CaseIterable, Sendable {
    case recordsModify = "records/modify"
    case recordsLookup = "records/lookup"
    case recordsQuery = "records/query"
    case recordsChanges = "records/changes"
    case recordsResolve = "records/resolve"
    case recordsAccept = "records/accept"
    case zonesList = "zones/list"
    case zonesLookup = "zones/lookup"
    case zonesModify = "zones/modify"
    case zonesChanges = "zones/changes"
    case changesZone = "changes/zone"
    case changesDatabase = "changes/database"
    case subscriptionsList = "subscriptions/list"
    case subscriptionsLookup = "subscriptions/lookup"
    case subscriptionsModify = "subscriptions/modify"
    case usersCaller = "users/caller"
    case usersCurrent = "users/current"
    case usersDiscover = "users/discover"
    case usersLookupEmail = "users/lookup/email"
    case usersLookupID = "users/lookup/id"
    case usersLookupContacts = "users/lookup/contacts"
    case assetsUpload = "assets/upload"
    case assetsRereference = "assets/rereference"

    /// The operation's family in the service's metrics: its first two path components
    /// (`users/lookup/email` counts as `users/lookup`).
    public var family: String { rawValue.split(separator: "/").prefix(2).joined(separator: "/") }
}
