import StratusCore

/// Where a records page looks: environment, database, whose (for private and shared), zone.
struct RecordPlace: Sendable {
    var environment: ContainerEnvironment
    var database: String
    var user: String?
    /// Why an owner opens a user's database (kept in the audit log with each read).
    var reason: String?
    var zone: String

    init(_ read: (String) -> String?) {
        environment = read("environment").flatMap(ContainerEnvironment.init(rawValue:)) ?? .development
        database = ["private", "shared"].contains(read("database") ?? "") ? read("database")! : "public"
        user = database == "public" ? nil : read("user")
        reason = database == "public" ? nil : read("reason")
        zone = read("zone") ?? Names.defaultZone
    }

    /// Whether this is an app user's database (private or shared).
    var isUsers: Bool { database != "public" }

    /// The management body's keys for this place.
    var body: [String: JSON] {
        var members: [String: JSON] = ["environment": .string(environment.rawValue), "database": .string(database),
                                       "zoneID": ["zoneName": .string(zone)]]
        if let user { members["user"] = .string(user) }
        if let reason { members["reason"] = .string(reason) }
        return members
    }

    /// Query-string pairs for links that stay here.
    var pairs: [(String, String)] {
        [("environment", environment.rawValue), ("database", database), ("zone", zone)] + (user.map { [("user", $0)] } ?? [])
            + (reason.map { [("reason", $0)] } ?? [])
    }

    /// Refuses a user's database to someone who may not open it (an owner's permission, as the
    /// management API decides), before anything is read.
    func check(_ access: ConsoleAccess) throws {
        guard isUsers else { return }
        switch access.decide(ManagementAccess.userDatabase) {
        case .allowed: return
        case .notFound, .unauthenticated: throw ConsoleFailure(status: 404, reason: ManagementGate.notFound(container: access.container).reason)
        case .denied(let reason): throw ConsoleFailure(status: 403, reason: "an app user's \(database) database: \(reason)")
        }
    }

    /// Hidden form fields that carry the place.
    var hidden: HTML {
        HTML.join(pairs.map { "<input type=\"hidden\" name=\"\($0.0)\" value=\"\($0.1)\">" })
    }
}
