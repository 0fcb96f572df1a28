import StratusCore

extension Subscription {
    /// The subscription dictionary of the wire. `zoneID` is rendered by the caller (its owner
    /// name depends on the database).
    func wireJSON(zoneID: JSON?) -> JSON {
        var members: [String: JSON] = ["subscriptionID": .string(id), "subscriptionType": .string(kind.rawValue)]
        if let zoneID { members["zoneID"] = zoneID }
        if kind == .query {
            members["query"] = queryJSON ?? .null
            members["firesOn"] = .array(Firing.names.filter { firesOn.contains($0.1) }.map { .string($0.0) })
            members["firesOnce"] = .bool(firesOnce)
            members["zoneWide"] = .bool(zoneName == nil)
        }
        if let notificationInfo { members["notificationInfo"] = notificationInfo }
        return .object(members)
    }
}
