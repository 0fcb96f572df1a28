import Foundation
import HTTPTypes
import Hummingbird
import StratusCore
import StratusStore
import Synchronization

/// The schema part of the management API: export, import, validate, diff, deploy, index builds,
/// history and reset, under `/management/1/containers/{container}/schema`.
struct SchemaManagement: Sendable {
    let api: ManagementAPI
    let records: RecordStore
    let queryShapes: QueryShapeNotes

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .schema) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try ContainerEnvironment(segment: call.queryParameters.get("environment").map { String($0) } ?? "development")
            let schema = try await self.records.schemas.load(containerID: container.id, environment: environment)
            var answer: [String: JSON] = ["schema": .string(SchemaLanguage.print(schema)), "version": .int(schema.version), "environment": .string(environment.rawValue)]
            if environment == .production {
                // What a deploy left to index over existing records ('stratus schema deploy' resumes them).
                answer["indexBuilds"] = .array(try await self.records.schemas.unfinishedBuilds(containerID: container.id).map(ManagementJSON.buildJSON))
            }
            return .json(.object(answer))
        }
        api.manage(router, .validateSchema) { call -> ManagementReply in
            let text = try await self.schemaText(call)
            let schema = try Self.parseSchema(text)
            return .json(["valid": true, "recordTypes": .int(Int64(schema.recordTypes.count)), "schema": .string(SchemaLanguage.print(schema))])
        }
        api.manage(router, .importSchema) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            guard let text = try Wire.string(body["schema"], key: "schema") else { throw StratusError.badRequest("missing required key 'schema' (the .ckdb text)") }
            let dryRun = try Wire.bool(body["dryRun"], key: "dryRun") ?? false
            let schema = try Self.parseSchema(text)
            let (plan, version, records) = try await self.records.schemas.importDevelopment(schema, containerID: container.id, by: grant.actor, dryRun: dryRun)
            let warnings = Self.grantWarnings(schema)
            let planText = ([plan.text()] + warnings.map { "  warning: \($0.stringValue ?? "")" }).joined(separator: "\n")
            return .json(["plan": plan.json(), "planText": .string(planText), "applied": .bool(!dryRun && !plan.isEmpty), "version": .int(version),
                          "warnings": .array(warnings), "records": .object(records.mapValues { .int($0) })])
        }
        api.manage(router, .schemaDiff) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let (plan, counts, _, _) = try await self.records.schemas.deploy(containerID: container.id, by: grant.actor, dryRun: true)
            return .json(try await self.planResponse(plan, counts: counts, containerID: container.id, applied: false, version: nil))
        }
        api.manage(router, .deploySchema) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let dryRun = try Wire.bool(body["dryRun"], key: "dryRun") ?? false
            let (plan, counts, applied, version) = try await self.records.schemas.deploy(containerID: container.id, by: grant.actor, dryRun: dryRun)
            let response = try await self.planResponse(plan, counts: counts, containerID: container.id, applied: applied, version: version)
            if !plan.refused.isEmpty {
                // The plan goes with the refusal, for the client to show what was refused.
                return .failure(StratusError(.badRequest, "the deploy is refused: production is additive only (\(plan.refused.count) refused change\(plan.refused.count == 1 ? "" : "s")); nothing was changed"),
                                details: ["serverRecord": response])
            }
            return .json(response)
        }
        api.manage(router, .buildIndexes) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let batch = Int(try Wire.int(body["batch"], key: "batch") ?? 2000)
            guard (1...20_000).contains(batch) else { throw StratusError.badRequest("batch must be 1–20000") }
            let builds = try await self.records.schemas.buildIndexes(containerID: container.id, batch: batch)
            self.records.schemas.forget(containerID: container.id, environment: .production)
            return .json(["builds": .array(builds.map(ManagementJSON.buildJSON)), "done": .bool(builds.allSatisfy(\.done))])
        }
        api.manage(router, .schemaHistory) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let environment = try ContainerEnvironment(segment: call.queryParameters.get("environment").map { String($0) } ?? "production")
            let entries = try await self.records.schemas.history(containerID: container.id, environment: environment)
            return .json(["history": .array(entries.map { entry in
                ["id": .int(entry.id), "version": .int(entry.version), "by": .string(entry.by), "at": ManagementJSON.iso(entry.at),
                 "kind": .string(entry.kind), "plan": .string(entry.plan)]
            })])
        }
        api.manage(router, .resetSchema) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let (version, deleted) = try await self.records.schemas.resetDevelopment(containerID: container.id, by: grant.actor)
            return .json(["version": .int(version), "deletedRecords": .int(deleted)])
        }
    }

    static func parseSchema(_ text: String) throws(StratusError) -> Schema {
        do {
            return try SchemaLanguage.parse(text)
        } catch {
            throw StratusError.badRequest("schema error at \(error.description)")
        }
    }

    func schemaText(_ call: ManagementCall) async throws -> String {
        let body = try call.object()
        guard let text = try Wire.string(body["schema"], key: "schema") else { throw StratusError.badRequest("missing required key 'schema' (the .ckdb text)") }
        return text
    }

    /// A warning for each record type without any grant: the public database refuses every role
    /// its records (`RecordAccess`), which is rarely what a schema written by hand means.
    static func grantWarnings(_ schema: Schema) -> [JSON] {
        schema.recordTypes.keys.sorted().filter { type in (schema.grants[type] ?? [:]).values.allSatisfy(\.isEmpty) }.map { type in
            .string("record type \(type) has no GRANT: in the public database no role may create, read or change its records (CloudKit's defaults are GRANT WRITE TO \"_creator\", GRANT CREATE TO \"_icloud\", GRANT READ TO \"_world\")")
        }
    }

    /// The plan with backfill counts and warnings about development queries production would not
    /// index and record types without grants.
    func planResponse(_ plan: SchemaPlan, counts: [String: Int64], containerID: ContainerID, applied: Bool, version: Int64?) async throws -> JSON {
        await queryShapes.settle()
        let development = try await records.schemas.load(containerID: containerID, environment: .development)
        var warnings: [JSON] = []
        for (type, field, usage) in try await records.schemas.recentQueryShapes(containerID: containerID, days: 7) {
            guard let schema = development.field(field, of: type) else {
                warnings.append(.string("development queries used \(type).\(field) (\(usage)), which the schema no longer has"))
                continue
            }
            let indexed = usage == "sort" || usage == "range" ? schema.sortable : schema.queryable
            if !indexed {
                warnings.append(.string("development queries in the last 7 days \(usage == "sort" ? "sorted by" : "filtered on") \(type).\(field), which production would not index (\(usage == "sort" || usage == "range" ? "SORTABLE" : "QUERYABLE") missing)"))
            }
        }
        warnings += Self.grantWarnings(development)
        var text = plan.text(counts: counts)
        for warning in warnings { text += "\n  warning: \(warning.stringValue ?? "")" }
        var members: [String: JSON] = ["plan": plan.json(counts: counts), "planText": .string(text), "refused": .int(Int64(plan.refused.count)),
                                       "applied": .bool(applied), "warnings": .array(warnings)]
        if let version { members["version"] = .int(version) }
        members["backfills"] = .array(plan.backfills.map { ["recordType": .string($0.recordType), "field": .string($0.field), "records": .int(counts[$0.recordType] ?? 0)] })
        return .object(members)
    }
}

