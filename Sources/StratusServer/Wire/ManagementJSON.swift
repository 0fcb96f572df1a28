import Foundation
import StratusCore
import StratusStore

/// The management API's answers: how each value an operator reads is written as JSON (the
/// CLI and the console read these shapes).
enum ManagementJSON {
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
             "pushes": .int(period.pushes),
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
         "scope": difference.owner.isNobody ? "container" : .string("user \(difference.owner)"),
         "countedRecords": .int(difference.countedRecords), "meteredRecords": .int(difference.meteredRecords),
         "countedBytes": .int(difference.countedBytes), "meteredBytes": .int(difference.meteredBytes)]
    }

    static func userJSON(_ user: UserSummary) -> JSON {
        ["userRecordName": .string(user.userRecordName.rawValue), "emailAddress": .string(user.email), "createdAt": iso(user.createdAt),
         "disabledAt": user.disabledAt.map(iso) ?? .null, "liveSessions": .int(user.liveSessions)]
    }

    static func auditJSON(_ entry: AuditEntry) -> JSON {
        ["id": .int(entry.id), "at": iso(entry.at), "actor": .string(entry.actor), "address": .string(entry.address),
         "action": .string(entry.action), "environment": entry.environment.map { .string($0.rawValue) } ?? .null,
         "target": .string(entry.target), "detail": .string(entry.detail)]
    }

    static func tokenJSON(_ token: APITokenInfo) -> JSON {
        var members: [String: JSON] = [
            "id": .int(token.tokenID.rawValue), "container": .string(token.containerName), "environment": .string(token.environment.rawValue),
            "name": .string(token.name), "prefix": .string(token.prefix), "createdAt": iso(token.createdAt),
        ]
        members["revokedAt"] = token.revokedAt.map(iso) ?? .null
        members["allowedOrigins"] = .array(token.allowedOrigins.map { .string($0) })
        members["signInCallback"] = token.signInCallback.map { .string($0) } ?? .null
        return .object(members)
    }

    /// A subscription for the operator: its subscriber and database beside the wire dictionary.
    static func subscriptionAdminJSON(_ listing: SubscriptionListing) -> JSON {
        var zoneID: JSON?
        if let zone = listing.subscription.zoneName {
            zoneID = ["zoneName": .string(zone), "ownerRecordName": .string(listing.subscription.zoneOwner?.rawValue ?? "")]
        }
        guard case .object(var members) = listing.subscription.wireJSON(zoneID: zoneID) else { return .null }
        members["owner"] = .string(listing.owner.rawValue)
        members["database"] = .string(listing.scope.rawValue)
        members["createdAt"] = iso(listing.createdAt)
        return .object(members)
    }

    static func keyJSON(_ key: ServerKeyInfo) -> JSON {
        ["keyID": .string(key.keyID), "container": .string(key.containerName), "environment": .string(key.environment.rawValue),
         "name": .string(key.name), "createdAt": iso(key.createdAt), "revokedAt": key.revokedAt.map(iso) ?? .null]
    }

    static func operatorJSON(_ info: OperatorInfo) -> JSON {
        ["emailAddress": .string(info.email), "superuser": .bool(info.superuser), "createdAt": iso(info.createdAt),
         "disabledAt": info.disabledAt.map(iso) ?? .null]
    }

    static func teamMemberJSON(_ member: TeamMember) -> JSON {
        ["emailAddress": .string(member.operatorInfo.email), "role": .string(member.role.description), "addedAt": iso(member.addedAt),
         "disabled": .bool(member.operatorInfo.disabledAt != nil)]
    }

    static func memberJSON(_ member: RoleMember) -> JSON {
        ["userRecordName": .string(member.userRecordName.rawValue), "emailAddress": .string(member.email), "addedAt": iso(member.addedAt)]
    }

    static func logEntryJSON(_ entry: RequestLogEntry, formatter: ISO8601DateFormatter) -> JSON {
        ["seq": .int(entry.seq), "at": .string(formatter.string(from: entry.at)), "database": entry.database.map { .string($0.rawValue) } ?? .null,
         "operation": .string(entry.operation), "status": .int(Int64(entry.status)),
         "serverErrorCode": entry.errorCode.map { .string($0) } ?? .null, "reason": entry.reason.map { .string($0) } ?? .null,
         "durationMs": .double(Double(entry.durationMicroseconds) / 1000), "userRecordName": entry.userRecordName.map { .string($0.rawValue) } ?? .null,
         "requestID": .string(entry.requestID), "clientAddress": entry.clientAddress.map { .string($0) } ?? .null]
    }

    static func buildJSON(_ build: IndexBuild) -> JSON {
        ["recordType": .string(build.recordType), "field": .string(build.field), "built": .int(build.built), "total": .int(build.total), "done": .bool(build.done)]
    }
}
