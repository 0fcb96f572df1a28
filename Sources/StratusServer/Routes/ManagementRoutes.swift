import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// The management API under `/management/1/`, guarded by the admin token. The CLI is its client.
extension StratusApp {
    func addManagementRoutes(to router: Router<BasicRequestContext>) {
        manage(router, .createContainer) { call -> ManagementReply in
            let grant = call.grant
            let body = try call.object()
            guard let name = try Wire.string(body["name"], key: "name") else { throw StratusError.badRequest("missing required key 'name'") }
            try Names.validateContainer(name)
            let container = try await self.admin.createContainer(name: name, by: grant.actor)
            return .json(["container": Self.containerJSON(container)], status: .created)
        }
        manage(router, .containers) { call -> ManagementReply in
            let grant = call.grant
            // A superuser sees every container; an operator only those whose team they are in, with their role.
            if let operatorID = grant.caller?.operatorID, !grant.isSuperuser {
                let containers = try await self.admin.teamContainers(operatorID: operatorID)
                return .json(["containers": .array(containers.map { Self.containerJSON($0.container, role: $0.role) })])
            }
            let containers = try await self.admin.listContainers()
            return .json(["containers": .array(containers.map { Self.containerJSON($0) })])
        }
        manage(router, .createToken) { call -> ManagementReply in
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
            return .json(["apiToken": .string(secret), "token": Self.tokenJSON(info)], status: .created)
        }
        manage(router, .audit) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let entries = try await self.auditEntries(call, containerID: container.id)
            return .json(["container": .string(container.name), "entries": .array(entries.map(Self.auditJSON))])
        }
        // The server-wide log: operator accounts added, removed, disabled, enabled, their passwords set.
        manage(router, .serverAudit) { call -> ManagementReply in
            let entries = try await self.auditEntries(call, containerID: serverAuditContainerID)
            return .json(["entries": .array(entries.map(Self.auditJSON))])
        }
        manage(router, .users) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try Self.environmentParameter(call)
            let users = try await self.admin.users(containerID: container.id, environment: environment)
            return .json(["users": .array(users.map(Self.userJSON))])
        }
        manage(router, .user) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let user = try Self.userParameter(call)
            guard let found = try await self.admin.users(containerID: container.id, environment: try Self.environmentParameter(call), user: user).first else {
                throw StratusError(.notFound, "no user '\(user)' in this container; give a user record name or an email address")
            }
            return .json(["user": Self.userJSON(found)])
        }
        for (route, disabled) in [(ManagementRoute.disableUser, true), (.enableUser, false)] {
            manage(router, route) { call -> ManagementReply in
                let grant = call.grant
                let container = try grant.container
                let user = try await self.admin.setUserDisabled(containerID: container.id, user: try Self.userParameter(call), disabled: disabled,
                                                                by: grant.actor)
                self.authenticator.invalidate(.userSessions(containerID: container.id, user: user.userRecordName))
                return .json(["user": Self.userJSON(user)])
            }
        }
        manage(router, .shares) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try Self.environmentParameter(call)
            let user = try await self.userFilter(call, containerID: container.id, environment: environment)
            let shares = try await self.records.allShares(containerID: container.id, environment: environment, user: user)
            return .json(["shares": .array(shares.map(self.dataAPI.shares.shareAdminJSON))])
        }
        manage(router, .subscriptions) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try Self.environmentParameter(call)
            let user = try await self.userFilter(call, containerID: container.id, environment: environment)
            let found = try await self.records.allSubscriptions(containerID: container.id, environment: environment, owner: user)
            return .json(["subscriptions": .array(found.map(Self.subscriptionAdminJSON))])
        }
        manage(router, .quota) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try Self.environmentParameter(call)
            let settings = try await self.admin.quotaSettings(containerID: container.id, environment: environment)
            return .json(Self.quotaJSON(settings, environment: environment))
        }
        manage(router, .setQuota) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ContainerEnvironment(segment: try Wire.string(body["environment"], key: "environment") ?? "development")
            let changes = try QuotaLimits.changes(body, ignoring: ["environment", "by"])
            let settings = try await self.admin.setQuotaLimits(containerID: container.id, environment: environment, changes: changes,
                                                               by: grant.actor)
            // This process forgets the old limits before answering; the others when the change's
            // notification reaches them (`Invalidations`), which under load can come after the
            // caller's next request.
            self.rateLimiter.invalidate(.quota(containerID: container.id, environment: environment))
            return .json(Self.quotaJSON(settings, environment: environment))
        }
        manage(router, .usage) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try Self.environmentParameter(call)
            let report = try await self.admin.usageReport(containerID: container.id, environment: environment)
            var json = Self.usageJSON(report, container: container.name, environment: environment)
            // The container's stored assets (both environments share them: content-addressed per container).
            let (assets, assetBytes) = try await self.assets.totals(containerID: container.id)
            if case .object(var members) = json {
                members["storedAssets"] = ["count": .int(assets), "bytes": .int(assetBytes)]
                json = .object(members)
            }
            return .json(json)
        }
        manage(router, .verifyUsage) { call -> ManagementReply in
            var containerID: Int64?
            if let name = call.queryParameters.get("container") {
                containerID = try await self.authenticator.container(named: String(name)).id
            }
            let environment = try call.queryParameters.get("environment").map { try ContainerEnvironment(segment: String($0)) }
            let differences = try await self.admin.verifyUsage(containerID: containerID, environment: environment)
            return .json(["differences": .array(differences.map(Self.differenceJSON))])
        }
        addRoleRoutes(to: router)
        addLogRoutes(to: router)
        addKeyRoutes(to: router)
        manage(router, .stats) { call -> ManagementReply in
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
        manage(router, .tokens) { call -> ManagementReply in
            let grant = call.grant
            var containerID: Int64?
            // An operator who is not a superuser sees the tokens of their teams' containers only.
            var visible: Set<Int64>?
            if let operatorID = grant.caller?.operatorID, !grant.isSuperuser {
                visible = Set(try await self.admin.teamContainers(operatorID: operatorID).map(\.container.id))
            }
            if let name = call.queryParameters.get("container").map { String($0) } {
                let container = try await self.authenticator.container(named: name)
                if let visible, !visible.contains(container.id) { throw ManagementGate.notFound(container: name) }
                containerID = container.id
            }
            let tokens = try await self.admin.listAPITokens(containerID: containerID).filter { visible?.contains($0.containerID) ?? true }
            return .json(["tokens": .array(tokens.map(Self.tokenJSON))])
        }
        manage(router, .updateToken) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let token = try Self.tokenParameter(call.input)
            let body = try call.object()
            let options = try Self.tokenOptions(body)
            guard options.origins != nil || options.callback != nil else {
                throw StratusError.badRequest("nothing to change: give 'allowedOrigins' (an array, [] for any) or 'signInCallback' (a URL, or null for none)")
            }
            let info = try await self.admin.updateAPIToken(containerID: container.id, idOrPrefix: token, allowedOrigins: options.origins,
                                                           signInCallback: options.callback, by: grant.actor)
            self.authenticator.forget(tokenID: info.tokenID)
            return .json(["token": Self.tokenJSON(info)])
        }
        manage(router, .revokeToken) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let token = try Self.tokenParameter(call.input)
            let info = try await self.admin.revokeAPIToken(containerID: container.id, idOrPrefix: token, by: grant.actor)
            self.authenticator.forget(tokenID: info.tokenID)
            return .json(["token": Self.tokenJSON(info)])
        }
    }

    /// The `:token` path parameter: a token's id or prefix.
    static func tokenParameter(_ input: ManagementCall.Input) throws(StratusError) -> String {
        let token = input.decodedParameter("token") ?? ""
        guard !token.isEmpty, token.utf8.count <= 64, token.unicodeScalars.allSatisfy({ Names.isPrintable($0) }) else {
            throw StratusError.badRequest("give the token's id (from 'stratus token list') or its prefix")
        }
        return token
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

    static func iso(_ date: Date) -> JSON {
        .string(ISO8601DateFormatter().string(from: date))
    }

    /// A container, with the caller's role in its team when they are in it.
    static func containerJSON(_ container: ContainerInfo, role: TeamRole? = nil) -> JSON {
        var members: [String: JSON] = ["name": .string(container.name), "createdAt": iso(container.createdAt)]
        if let role { members["role"] = .string(role.description) }
        return .object(members)
    }

    /// A container-environment's limits: each value, and which were set (the rest are defaults).
    static func quotaJSON(_ settings: QuotaSettings, environment: ContainerEnvironment) -> JSON {
        var limits: [String: JSON] = [:]
        var defaults: [String: JSON] = [:]
        for key in QuotaLimits.keys {
            limits[key.name] = .int(settings.limits[keyPath: key.path])
            defaults[key.name] = .int(QuotaLimits.defaults[keyPath: key.path])
        }
        return ["environment": .string(environment.rawValue), "limits": .object(limits), "defaults": .object(defaults),
                "set": .array(settings.set.sorted().map { .string($0) }), "enforced": true]
    }

    static func usageJSON(_ report: UsageReport, container: String, environment: ContainerEnvironment) -> JSON {
        func requests(_ period: UsageReport.Requests) -> JSON {
            ["requests": .int(period.requests), "throttled": .int(period.throttled), "refused": .int(period.refused),
             "notifications": .int(period.notifications), "notificationsDropped": .int(period.notificationsDropped),
             "signups": .int(period.signups), "signupsThrottled": .int(period.signupsThrottled)]
        }
        var limits: [String: JSON] = [:]
        for key in QuotaLimits.keys { limits[key.name] = .int(report.limits[keyPath: key.path]) }
        return ["container": .string(container), "environment": .string(environment.rawValue),
                "records": .int(report.records), "bytes": .int(report.bytes), "limits": .object(limits),
                "requests": ["lastMinute": requests(report.lastMinute), "lastHour": requests(report.lastHour), "lastDay": requests(report.lastDay)],
                "topUsers": .array(report.topUsers.map { ["userRecordName": .string($0.user), "records": .int($0.records), "bytes": .int($0.bytes)] })]
    }

    static func differenceJSON(_ difference: UsageDifference) -> JSON {
        ["container": .string(difference.container),
         "environment": .string(difference.environment == ContainerEnvironment.production.code ? "production" : "development"),
         "scope": difference.owner.isEmpty ? "container" : .string("user \(difference.owner)"),
         "countedRecords": .int(difference.countedRecords), "meteredRecords": .int(difference.meteredRecords),
         "countedBytes": .int(difference.countedBytes), "meteredBytes": .int(difference.meteredBytes)]
    }

    /// The `environment` query parameter (development when absent).
    static func environmentParameter(_ call: ManagementCall) throws(StratusError) -> ContainerEnvironment {
        try ContainerEnvironment(segment: call.queryParameters.get("environment").map { String($0) } ?? "development")
    }

    /// The `:user` path parameter: a user record name or an email address.
    static func userParameter(_ call: ManagementCall) throws(StratusError) -> String {
        let user = Self.pathParameter(call, "user")
        guard !user.isEmpty, user.utf8.count <= 254, user.unicodeScalars.allSatisfy(Names.isPrintable) else {
            throw .badRequest("give the user's record name (_ and 32 hex digits) or email address")
        }
        return user
    }

    /// A path parameter, percent-decoded (`ada%40example.com` is `ada@example.com`).
    static func pathParameter(_ context: BasicRequestContext, _ name: String) -> String {
        let raw = context.parameters.get(name) ?? ""
        return raw.removingPercentEncoding ?? raw
    }

    /// A management call's path parameter, percent-decoded.
    static func pathParameter(_ call: ManagementCall, _ name: String) -> String {
        call.input.decodedParameter(name) ?? ""
    }

    static func userJSON(_ user: UserSummary) -> JSON {
        ["userRecordName": .string(user.userRecordName), "emailAddress": .string(user.email), "createdAt": iso(user.createdAt),
         "disabledAt": user.disabledAt.map(iso) ?? .null, "liveSessions": .int(user.liveSessions)]
    }

    /// A log's entries as the query asks: `since` (ISO 8601), `limit` (1–10000, default 1000),
    /// `order` (oldest or newest first), `action`, `actor` (contained, any case).
    func auditEntries(_ call: ManagementCall, containerID: Int64) async throws -> [AuditEntry] {
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
        return try await admin.auditLog(containerID: containerID, since: since, limit: limit, newestFirst: order == "newest", action: action, actor: actor)
    }

    static func auditJSON(_ entry: AuditEntry) -> JSON {
        ["id": .int(entry.id), "at": iso(entry.at), "actor": .string(entry.actor), "address": .string(entry.address),
         "action": .string(entry.action), "environment": entry.environment.map { .string($0.rawValue) } ?? .null,
         "target": .string(entry.target), "detail": .string(entry.detail)]
    }

    static func tokenJSON(_ token: APITokenInfo) -> JSON {
        var members: [String: JSON] = [
            "id": .int(token.tokenID), "container": .string(token.containerName), "environment": .string(token.environment.rawValue),
            "name": .string(token.name), "prefix": .string(token.prefix), "createdAt": iso(token.createdAt),
        ]
        members["revokedAt"] = token.revokedAt.map(iso) ?? .null
        members["allowedOrigins"] = .array(token.allowedOrigins.map { .string($0) })
        members["signInCallback"] = token.signInCallback.map { .string($0) } ?? .null
        return .object(members)
    }

    /// The `user` query parameter (a user record name or an email address) as a user record name;
    /// `nil` when absent, `NOT_FOUND` when no such user exists.
    func userFilter(_ call: ManagementCall, containerID: Int64, environment: ContainerEnvironment) async throws -> String? {
        guard let given = call.queryParameters.get("user").map({ String($0) }) else { return nil }
        guard Names.isPrintableName(given, maximumBytes: 320) else {
            throw StratusError.badRequest("give the user's record name (_ and 32 hex digits) or email address")
        }
        guard let found = try await admin.users(containerID: containerID, environment: environment, user: given).first else {
            throw StratusError(.notFound, "no user '\(Names.printable(given))' in this container; give a user record name or an email address")
        }
        return found.userRecordName
    }

    /// A subscription for the operator: its subscriber and database beside the wire dictionary.
    static func subscriptionAdminJSON(_ listing: SubscriptionListing) -> JSON {
        var zoneID: JSON?
        if let zone = listing.subscription.zoneName {
            zoneID = ["zoneName": .string(zone), "ownerRecordName": .string(listing.subscription.zoneOwner ?? "")]
        }
        guard case .object(var members) = listing.subscription.wireJSON(zoneID: zoneID) else { return .null }
        members["owner"] = .string(listing.owner)
        members["database"] = .string(listing.scope.rawValue)
        members["createdAt"] = iso(listing.createdAt)
        return .object(members)
    }
}
