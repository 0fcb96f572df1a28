import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore
import StratusStore

/// A data-API request after authentication: who calls, which database, the body.
struct DataRequest {
    var caller: Caller
    var scope: DatabaseScope
    var body: [String: JSON]
    var signInURL: String

    /// The database the caller addresses: public, or the caller's own private database.
    func database(requireUser: Bool) throws(StratusError) -> DatabaseRef {
        switch scope {
        case .public:
            if requireUser { _ = try caller.requireUser(signInURL: signInURL) }
            return DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: .public, owner: "")
        case .private, .shared:
            let user = try caller.requireUser(signInURL: signInURL)
            return DatabaseRef(containerID: caller.container.id, environment: caller.environment, scope: scope, owner: user)
        }
    }

    /// The zone named by a `zoneID` dictionary (default zone when absent). Another owner's zone
    /// in the private database is answered exactly like a missing zone.
    func zoneName(_ json: JSON?, key: String = "zoneID") throws(StratusError) -> String {
        guard let json, json != .null else { return Names.defaultZone }
        guard let members = json.objectValue else { throw .badRequest("'\(key)' must be an object like {\"zoneName\": \"…\"}") }
        guard let name = members["zoneName"]?.stringValue else { throw .badRequest("'\(key)' needs a string 'zoneName'") }
        try Names.validateZone(name)
        if let owner = try Wire.string(members["ownerRecordName"], key: "\(key).ownerRecordName"),
           owner != "__defaultOwner__", owner != "_defaultOwner", owner != caller.user {
            throw StratusError(.zoneNotFound, "zone '\(name)' does not exist in this database")
        }
        if scope == .public, name != Names.defaultZone {
            throw StratusError(.zoneNotFound, "the public database has only the default zone '_defaultZone'")
        }
        return name
    }

    /// The `zoneID` dictionary responses carry for a zone of this database.
    func zoneIDJSON(_ name: String) -> JSON {
        var members: [String: JSON] = ["zoneName": .string(name)]
        if scope == .public {
            members["ownerRecordName"] = "_defaultOwner"
        } else if let user = caller.user {
            members["ownerRecordName"] = .string(user)
        }
        return .object(members)
    }
}

extension StratusApp {
    /// Authenticates, reads the body and runs `handler` for a data endpoint.
    func dataEndpoint(_ request: Request, _ context: BasicRequestContext, hasBody: Bool,
                      _ handler: (DataRequest) async throws -> JSON) async throws -> Response {
        let containerName = context.parameters.get("container") ?? ""
        let environment = context.parameters.get("environment") ?? ""
        let caller = try await authenticator.authenticate(request, containerName: containerName, environmentSegment: environment)
        let scope = try DatabaseScope(segment: context.parameters.get("database") ?? "public")
        let body = hasBody ? try await readObject(request) : [:]
        let data = DataRequest(caller: caller, scope: scope, body: body,
                               signInURL: authenticator.signInURL(container: caller.container.name, environment: caller.environment))
        let result = try await handler(data)
        var headers: HTTPFields = [:]
        if let token = caller.webAuthToken, let name = HTTPField.Name("x-apple-cloudkit-session") {
            headers[name] = token
        }
        return .json(result, headers: headers)
    }

    func addDataRoutes(to router: Router<BasicRequestContext>) {
        let base = "/database/1/:container/:environment/:database"
        router.post("\(base)/records/modify") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.modifyRecords($0) }
        }
        router.post("\(base)/records/lookup") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.lookupRecords($0) }
        }
        router.post("\(base)/records/query") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.queryRecords($0) }
        }
        router.post("\(base)/records/changes") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.recordChanges($0) }
        }
        router.get("\(base)/zones/list") { request, context in
            try await self.dataEndpoint(request, context, hasBody: false) { try await self.listZones($0) }
        }
        router.post("\(base)/zones/list") { request, context in
            try await self.dataEndpoint(request, context, hasBody: false) { try await self.listZones($0) }
        }
        router.post("\(base)/zones/lookup") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.lookupZones($0) }
        }
        router.post("\(base)/zones/modify") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.modifyZones($0) }
        }
        router.post("\(base)/zones/changes") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.zoneListChanges($0, legacy: true) }
        }
        router.post("\(base)/changes/database") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.zoneListChanges($0, legacy: false) }
        }
        router.post("\(base)/changes/zone") { request, context in
            try await self.dataEndpoint(request, context, hasBody: true) { try await self.zoneChanges($0) }
        }
        for method in [HTTPRequest.Method.get, .post] {
            router.on("\(base)/users/caller", method: method) { request, context in
                try await self.dataEndpoint(request, context, hasBody: false) { try self.caller($0) }
            }
            router.on("\(base)/users/current", method: method) { request, context in
                try await self.dataEndpoint(request, context, hasBody: false) { try self.currentUser($0) }
            }
        }
    }
}
