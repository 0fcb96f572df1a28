import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// The management API under `/management/1/`, guarded by the admin token. The CLI is its client.
struct ContainerManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let records: RecordStore
    let authenticator: Authenticator
    let rateLimiter: RateLimiter
    let assets: AssetStore
    let replicaReads: ReplicaReads?
    /// Renders shares for operators.
    let shares: SharesController

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .createContainer) { call -> ManagementReply in
            let grant = call.grant
            let body = try call.object()
            guard let name = try Wire.string(body["name"], key: "name") else { throw StratusError.badRequest("missing required key 'name'") }
            try Names.validateContainer(name)
            let container = try await self.admin.createContainer(name: name, by: grant.actor)
            return .json(["container": ManagementJSON.containerJSON(container)], status: .created)
        }
        api.manage(router, .containers) { call -> ManagementReply in
            let grant = call.grant
            // A superuser sees every container; an operator only those whose team they are in, with their role.
            if let operatorID = grant.caller?.operatorID, !grant.isSuperuser {
                let containers = try await self.admin.operatorStore.teamContainers(operatorID: operatorID)
                return .json(["containers": .array(containers.map { ManagementJSON.containerJSON($0.container, role: $0.role) })])
            }
            let containers = try await self.admin.listContainers()
            return .json(["containers": .array(containers.map { ManagementJSON.containerJSON($0) })])
        }
        api.manage(router, .createToken) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ManagementGate.environment(in: body, default: nil)
            let name = try Wire.string(body["name"], key: "name") ?? "token"
            guard !name.isEmpty, name.utf8.count <= 200, name.unicodeScalars.allSatisfy(Names.isPrintable) else {
                throw StratusError.badRequest("the token name must be 1–200 printable characters")
            }
            let options = try Self.tokenOptions(body)
            let secret = TokenSealer.randomAPIToken()
            let info = try await self.admin.createAPIToken(container: container, environment: environment, name: name,
                                                           tokenHash: TokenSealer.hash(secret), prefix: String(secret.prefix(10)),
                                                           allowedOrigins: options.origins ?? [], signInCallback: options.callback ?? nil,
                                                           by: grant.actor)
            return .json(["apiToken": .string(secret), "token": ManagementJSON.tokenJSON(info)], status: .created)
        }
        api.manage(router, .audit) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let entries = try await self.auditEntries(call, containerID: container.id)
            return .json(["container": .string(container.name), "entries": .array(entries.map(ManagementJSON.auditJSON))])
        }
        // The server-wide log: operator accounts added, removed, disabled, enabled, their passwords set.
        api.manage(router, .serverAudit) { call -> ManagementReply in
            let entries = try await self.auditEntries(call, containerID: serverAuditContainerID)
            return .json(["entries": .array(entries.map(ManagementJSON.auditJSON))])
        }
        api.manage(router, .users) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let limit = try call.queryParameters.get("limit").map { text throws(StratusError) -> Int in
                guard let value = Int(text), (1...10_000).contains(value) else { throw .badRequest("'limit' must be 1–10000") }
                return value
            } ?? 10_000
            let users = try await self.admin.users(containerID: container.id, environment: environment, limit: limit)
            return .json(["users": .array(users.map(ManagementJSON.userJSON))])
        }
        api.manage(router, .user) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let user = try call.userParameter()
            guard let found = try await self.admin.users(containerID: container.id, environment: try call.environmentParameter(), user: user).first else {
                throw StratusError(.notFound, "no user '\(user)' in this container; give a user record name or an email address")
            }
            return .json(["user": ManagementJSON.userJSON(found)])
        }
        for (route, disabled) in [(ManagementRoute.disableUser, true), (.enableUser, false)] {
            api.manage(router, route) { call -> ManagementReply in
                let grant = call.grant
                let container = try grant.container
                let user = try await self.admin.setUserDisabled(containerID: container.id, user: try call.userParameter(), disabled: disabled,
                                                                by: grant.actor)
                self.authenticator.invalidate(.userSessions(containerID: container.id, user: user.userRecordName))
                return .json(["user": ManagementJSON.userJSON(user)])
            }
        }
        api.manage(router, .shares) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let user = try await call.userFilter(self.admin, containerID: container.id, environment: environment)
            let shares = try await self.records.sharing.allShares(containerID: container.id, environment: environment, user: user)
            return .json(["shares": .array(shares.map(self.shares.shareAdminJSON))])
        }
        api.manage(router, .subscriptions) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let user = try await call.userFilter(self.admin, containerID: container.id, environment: environment)
            let found = try await self.records.subscriptions.allSubscriptions(containerID: container.id, environment: environment, owner: user)
            return .json(["subscriptions": .array(found.map(ManagementJSON.subscriptionAdminJSON))])
        }
        api.manage(router, .quota) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let settings = try await self.admin.metering.quotaSettings(containerID: container.id, environment: environment)
            return .json(ManagementJSON.quotaJSON(settings, environment: environment))
        }
        api.manage(router, .setQuota) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ContainerEnvironment(segment: try Wire.string(body["environment"], key: "environment") ?? "development")
            let changes = try QuotaLimits.changes(body, ignoring: ["environment", "by"])
            let settings = try await self.admin.metering.setQuotaLimits(containerID: container.id, environment: environment, changes: changes,
                                                               by: grant.actor)
            // This process forgets the old limits before answering; the others when the change's
            // notification reaches them (`Invalidations`), which under load can come after the
            // caller's next request.
            self.rateLimiter.invalidate(.quota(containerID: container.id, environment: environment))
            return .json(ManagementJSON.quotaJSON(settings, environment: environment))
        }
        api.manage(router, .usage) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try call.environmentParameter()
            let report = try await self.admin.metering.usageReport(containerID: container.id, environment: environment)
            var json = ManagementJSON.usageJSON(report, container: container.name, environment: environment)
            // The container's stored assets (both environments share them: content-addressed per container).
            let (assets, assetBytes) = try await self.assets.totals(containerID: container.id)
            if case .object(var members) = json {
                members["storedAssets"] = ["count": .int(assets), "bytes": .int(assetBytes)]
                json = .object(members)
            }
            return .json(json)
        }
        api.manage(router, .verifyUsage) { call -> ManagementReply in
            var containerID: ContainerID?
            if let name = call.queryParameters.get("container") {
                containerID = try await self.authenticator.container(named: String(name)).id
            }
            let environment = try call.queryParameters.get("environment").map { try ContainerEnvironment(segment: String($0)) }
            let differences = try await self.admin.metering.verifyUsage(containerID: containerID, environment: environment)
            return .json(["differences": .array(differences.map(ManagementJSON.differenceJSON))])
        }
        api.manage(router, .stats) { call -> ManagementReply in
            var stats: [String: JSON] = ["rssBytes": Self.residentBytes().map { .int($0) } ?? .null, "pid": .int(Int64(getpid()))]
            // The process's CPU time and context switches, all threads: `stratus-bench` divides their growth by its requests.
            var usage = rusage()
            getrusage(RUSAGE_SELF.rawValue, &usage)
            stats["cpuSeconds"] = .double(Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6)
            stats["contextSwitches"] = .int(Int64(usage.ru_nvcsw + usage.ru_nivcsw))
            if let replicas = self.replicaReads {
                stats["replicaReads"] = ["servedByReplica": .int(Int64(replicas.servedByReplica.load(ordering: .relaxed))),
                                         "servedByPrimary": .int(Int64(replicas.servedByPrimary.load(ordering: .relaxed))),
                                         "replicas": .array(replicas.replicas.map { ["replayedLSN": .int($0.replayed.load(ordering: .relaxed))] })]
            }
            return .json(.object(stats))
        }
        api.manage(router, .tokens) { call -> ManagementReply in
            let grant = call.grant
            var containerID: ContainerID?
            // An operator who is not a superuser sees the tokens of their teams' containers only.
            var visible: Set<ContainerID>?
            if let operatorID = grant.caller?.operatorID, !grant.isSuperuser {
                visible = Set(try await self.admin.operatorStore.teamContainers(operatorID: operatorID).map(\.container.id))
            }
            if let name = call.queryParameters.get("container") {
                let container = try await self.authenticator.container(named: name)
                if let visible, !visible.contains(container.id) { throw ManagementGate.notFound(container: name) }
                containerID = container.id
            }
            let tokens = try await self.admin.listAPITokens(containerID: containerID).filter { visible?.contains($0.containerID) ?? true }
            return .json(["tokens": .array(tokens.map(ManagementJSON.tokenJSON))])
        }
        api.manage(router, .updateToken) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let token = try call.input.tokenParameter()
            let body = try call.object()
            let options = try Self.tokenOptions(body)
            guard options.origins != nil || options.callback != nil else {
                throw StratusError.badRequest("nothing to change: give 'allowedOrigins' (an array, [] for any) or 'signInCallback' (a URL, or null for none)")
            }
            let info = try await self.admin.updateAPIToken(containerID: container.id, idOrPrefix: token, allowedOrigins: options.origins,
                                                           signInCallback: options.callback, by: grant.actor)
            self.authenticator.forget(tokenID: info.tokenID)
            return .json(["token": ManagementJSON.tokenJSON(info)])
        }
        api.manage(router, .revokeToken) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let token = try call.input.tokenParameter()
            let info = try await self.admin.revokeAPIToken(containerID: container.id, idOrPrefix: token, by: grant.actor)
            self.authenticator.forget(tokenID: info.tokenID)
            return .json(["token": ManagementJSON.tokenJSON(info)])
        }
    }

    /// An API token's options in a management body: `allowedOrigins` (web origins such as
    /// `https://app.example.com`, at most 20; [] for any) and `signInCallback` (an http(s) URL, or
    /// null for none). `nil` for what the body does not name.
    static func tokenOptions(_ body: [String: JSON]) throws(StratusError) -> (origins: [String]?, callback: String??) {
        var origins: [String]?
        if let list = body["allowedOrigins"], list != .null {
            guard let items = list.arrayValue else { throw .badRequest("'allowedOrigins' must be an array of origins such as \"https://app.example.com\"") }
            guard items.count <= 20 else { throw .badRequest("at most 20 allowed origins per API token") }
            origins = try items.map { item throws(StratusError) in
                guard let text = item.stringValue, let origin = WebOrigin.normalize(text) else {
                    throw .badRequest("'\(item.stringValue ?? JSONWriter.string(item))' is not a web origin: give scheme and host (and port), such as https://app.example.com, with no path")
                }
                return origin
            }
        }
        var callback: String??
        if let value = body["signInCallback"] {
            if value == .null {
                callback = .some(nil)
            } else {
                guard let text = value.stringValue, WebOrigin.isCallbackURL(text) else {
                    throw .badRequest("'signInCallback' must be an absolute http or https URL (at most 2000 characters, no fragment), such as https://app.example.com/signed-in")
                }
                callback = .some(text)
            }
        }
        return (origins, callback)
    }

    /// The server process's resident memory, from `/proc/self/status` (Linux).
    static func residentBytes() -> Int64? {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.split(separator: " ").dropFirst().first.flatMap { Int64($0) }
            return digits.map { $0 * 1024 }
        }
        return nil
    }

    /// A log's entries as the query asks: `since` (ISO 8601), `limit` (1–10000, default 1000),
    /// `order` (oldest or newest first), `action`, `actor` (contained, any case).
    func auditEntries(_ call: ManagementCall, containerID: ContainerID) async throws -> [AuditEntry] {
        let query = call.queryParameters
        var since: Date?
        if let text = query.get("since") {
            guard let date = ISO8601DateFormatter().date(from: String(text)) else {
                throw StratusError.badRequest("'since' must be an ISO 8601 time such as 2026-11-24T10:00:00Z")
            }
            since = date
        }
        let limit = try query.get("limit").map { text throws(StratusError) -> Int in
            guard let value = Int(text), (1...10_000).contains(value) else { throw .badRequest("'limit' must be 1–10000") }
            return value
        } ?? 1000
        let order = query.get("order").map { String($0) } ?? "oldest"
        guard order == "oldest" || order == "newest" else { throw StratusError.badRequest("'order' must be oldest or newest") }
        let action = query.get("action").map { String($0) }
        let actor = query.get("actor").map { String($0) }
        for (name, value) in [("action", action), ("actor", actor)] {
            if let value, !Names.isPrintableName(value, maximumBytes: 200) { throw StratusError.badRequest("'\(name)' must be 1–200 printable characters") }
        }
        let before = try query.get("before").map { text throws(StratusError) -> Int64 in
            guard let value = Int64(text), value > 0 else { throw .badRequest("'before' must be an entry's id (a positive whole number)") }
            return value
        }
        return try await admin.auditLog(containerID: containerID, since: since, limit: limit, newestFirst: order == "newest", action: action, actor: actor,
                                        before: before)
    }
}
