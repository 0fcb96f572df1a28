import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// The authorization matrix (issue 23, "Done when"): every principal × generated grants ×
/// operation × record ownership, through the HTTP API on real PostgreSQL, checked against an
/// oracle written here from the rules as documented (README, security roles), not from the
/// server's code. Prints its case count; any unauthorized success or wrong denial fails it.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct AuthorizationMatrixTests {
    static let roles = ["_world", "_icloud", "_creator", "Editor"]
    static let permissions = ["CREATE", "READ", "WRITE"]

    /// A record type's grants: role → permissions.
    typealias Grants = [String: Set<String>]

    /// One grant per type for each role and permission, then seeded random mixes, then none.
    static func generatedGrants() -> [Grants] {
        var all: [Grants] = []
        for role in roles { for permission in permissions { all.append([role: [permission]]) } }
        var state: UInt64 = 0x5EED_2026
        func next() -> UInt64 {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return state >> 33
        }
        for _ in 0..<20 {
            var grants: Grants = [:]
            for role in roles { for permission in permissions where next() % 10 < 3 { grants[role, default: []].insert(permission) } }
            all.append(grants)
        }
        all.append([:])
        return all
    }

    enum Kind: Equatable {
        case world, user(String), serverKey, disabled, foreign
    }

    struct Principal {
        var name: String
        var kind: Kind
        var roles: Set<String> = []
        var session: Session?
        var signer: Signer?
    }

    enum Operation: String, CaseIterable {
        case create, lookup, query, update, delete, feed
        var permission: String {
            switch self {
            case .create: "CREATE"
            case .lookup, .query, .feed: "READ"
            case .update, .delete: "WRITE"
            }
        }
    }

    /// The oracle: what the documented rules allow. WRITE includes READ; `_creator` applies to
    /// the record's creator only (never to a record not yet written); a custom role applies to
    /// its members on every record; a write needs a signed-in user (`_world` CREATE or WRITE
    /// reaches anonymous callers only as a sign-in); a server-to-server key is not restricted by roles; a disabled
    /// user and another container's credentials reach nothing.
    static func oracle(_ principal: Principal, _ operation: Operation, grants: Grants, owner: String?) -> Bool {
        func holds(_ role: String) -> Bool {
            let held = grants[role] ?? []
            return held.contains(operation.permission) || (operation.permission == "READ" && held.contains("WRITE"))
        }
        switch principal.kind {
        case .disabled, .foreign: return false
        case .serverKey: return true
        case .world:
            // Writing needs a signed-in user, whatever `_world` holds (README: security roles).
            return operation.permission == "READ" && holds("_world")
        case .user(let user):
            return holds("_world") || holds("_icloud") || principal.roles.contains(where: holds) || (holds("_creator") && owner != nil && owner == user)
        }
    }

    static func schema(_ types: [(name: String, grants: Grants)], permissive: Bool) -> String {
        var text = "DEFINE SCHEMA\n  CREATE ROLE Editor;\n"
        for (name, grants) in types {
            var clauses = ["title STRING QUERYABLE"]
            if permissive {
                clauses.append("GRANT CREATE, READ, WRITE TO \"_icloud\"")
            } else {
                for role in roles {
                    guard let held = grants[role], !held.isEmpty else { continue }
                    let quoted = role.hasPrefix("_") ? "\"\(role)\"" : role
                    clauses.append("GRANT \(permissions.filter(held.contains).joined(separator: ", ")) TO \(quoted)")
                }
            }
            text += "  RECORD TYPE \(name) (\(clauses.joined(separator: ", ")));\n"
        }
        return text
    }

    @Test func everyPrincipalGetsExactlyWhatItsRolesGrant() async throws {
        try await Harness.run(poolSize: 8) { harness in
            let home = try await harness.container()
            let types = Self.generatedGrants().enumerated().map { (name: "T\($0.offset)", grants: $0.element) }
            let imported = try await harness.admin(.post, "containers/\(home.container)/schema/import",
                                                   json: ["schema": .string(Self.schema(types, permissive: true))])
            try #require(imported.status == 200, "\(imported.json)")
            let alice = try await home.signedUp()
            let bob = try await home.signedUp()
            let carol = try await home.signedUp()
            let dave = try await home.signedUp()
            let foreignContainer = try await harness.container().signedUp()
            let key = try await ServerKeyTests.addKey(harness, container: home.container)
            let owners = [alice.userRecordName!, bob.userRecordName!]
            let principals = [
                Principal(name: "world", kind: .world, session: home),
                Principal(name: "alice", kind: .user(owners[0]), session: alice),
                Principal(name: "bob", kind: .user(owners[1]), session: bob),
                Principal(name: "carol (Editor)", kind: .user(carol.userRecordName!), roles: ["Editor"], session: carol),
                Principal(name: "dave (disabled)", kind: .disabled, session: dave),
                Principal(name: "server key", kind: .serverKey, signer: key),
                Principal(name: "other container", kind: .foreign,
                          session: Session(harness: harness, container: home.container, environment: .development, apiToken: foreignContainer.apiToken,
                                           webAuthToken: foreignContainer.webAuthToken, userRecordName: foreignContainer.userRecordName)),
            ]
            func names(_ type: String, _ owner: Int, _ purpose: String) -> String { "\(type)-o\(owner)-\(purpose)" }

            // Seed, while every signed-in user may do anything: per type and owner, one record
            // to read and one to change and one to delete per principal.
            for (index, owner) in [alice, bob].enumerated() {
                var operations: [JSON] = []
                for type in types {
                    operations.append(op("create", names(type.name, index, "seed"), type: type.name, fields: ["title": ["value": "seed"]]))
                    for principal in principals.indices {
                        operations.append(op("create", names(type.name, index, "upd\(principal)"), type: type.name, fields: ["title": ["value": "target"]]))
                        operations.append(op("create", names(type.name, index, "del\(principal)"), type: type.name, fields: ["title": ["value": "target"]]))
                    }
                }
                for start in stride(from: 0, to: operations.count, by: 200) {
                    let saved = try await owner.modify("public", Array(operations[start..<min(start + 200, operations.count)]))
                    let failed = saved.json["records"]?.arrayValue?.filter { $0.errorCode != nil } ?? []
                    try #require(saved.status == 200 && failed.isEmpty, "seeding: \(saved.status) \(failed.prefix(3))")
                }
            }
            // The real grants, Carol's role, Dave disabled.
            let real = try await harness.admin(.post, "containers/\(home.container)/schema/import", json: ["schema": .string(Self.schema(types, permissive: false))])
            try #require(real.status == 200, "\(real.json)")
            #expect(try await harness.admin(.post, "containers/\(home.container)/roles/Editor/members", json: ["user": .string(carol.userRecordName!)]).status == 200)
            #expect(try await harness.admin(.post, "containers/\(home.container)/users/\(dave.userRecordName!)/disable").status == 200)

            var signedRequests = 0
            func send(_ principal: Principal, _ operation: String, _ body: JSON) async throws -> (status: Int, json: JSON) {
                if let signer = principal.signer {
                    signedRequests += 1
                    let path = "/database/1/\(home.container)/development/public/\(operation)"
                    let text = JSONWriter.string(body)
                    return try await harness.send(.post, path, body: text,
                                                  headers: signer.headers(signedPath: path, body: text, date: Date().addingTimeInterval(Double(signedRequests))))
                }
                return try await principal.session!.post("public", operation, body)
            }

            var cases = 0
            var unauthorized: [String] = []
            var wrongDenials: [String] = []
            func check(_ principal: Principal, _ operation: Operation, _ type: (name: String, grants: Grants), owner: Int?, succeeded: Bool, _ detail: @autoclosure () -> String) {
                cases += 1
                let expected = Self.oracle(principal, operation, grants: type.grants, owner: owner.map { owners[$0] })
                let label = "\(principal.name) \(operation.rawValue) \(type.name) \(type.grants) owner \(owner.map { "o\($0)" } ?? "-"): \(detail())"
                if succeeded, !expected { unauthorized.append(label) }
                if !succeeded, expected { wrongDenials.append(label) }
            }

            for principal in principals {
                // Lookup: every seed in one request.
                let seeds = types.flatMap { type in (0..<2).map { names(type.name, $0, "seed") } }
                let lookup = try await send(principal, "records/lookup", ["records": .array(seeds.map { ["recordName": .string($0)] })])
                for (typeIndex, type) in types.enumerated() {
                    for owner in 0..<2 {
                        let item = lookup.status == 200 ? lookup.json.record(typeIndex * 2 + owner) : nil
                        check(principal, .lookup, type, owner: owner, succeeded: item?["fields"]?["title"]?["value"] == "seed", "\(lookup.status) \(item ?? lookup.json)")
                    }
                }
                // Query: the seeds of each type by their title; nothing else may come back.
                for type in types {
                    let found = try await send(principal, "records/query", ["query": ["recordType": .string(type.name),
                        "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "seed"]]]]])
                    let returned = Set(found.status == 200 ? found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? [] : [])
                    for owner in 0..<2 {
                        check(principal, .query, type, owner: owner, succeeded: returned.contains(names(type.name, owner, "seed")), "\(found.status) \(found.json.errorCode ?? "")")
                    }
                    #expect(returned.isSubset(of: Set((0..<2).map { names(type.name, $0, "seed") })), "\(principal.name) query \(type.name): \(returned)")
                }
                // Change feed of the public database's default zone, every page.
                var seen: Set<String> = []
                var token: JSON?
                var feedFailed = false
                for _ in 0..<100 {
                    var zone: [String: JSON] = ["zoneID": ["zoneName": "_defaultZone"], "resultsLimit": 200]
                    if let token { zone["syncToken"] = token }
                    let page = try await send(principal, "changes/zone", ["zones": [.object(zone)]])
                    guard page.status == 200, let result = page.json["zones"]?.arrayValue?.first, result.errorCode == nil else { feedFailed = true; break }
                    for record in result["records"]?.arrayValue ?? [] where record["deleted"] != true {
                        if let name = record["recordName"]?.stringValue { seen.insert(name) }
                    }
                    token = result["syncToken"]
                    if result["moreComing"] != true { break }
                }
                for type in types {
                    for owner in 0..<2 {
                        check(principal, .feed, type, owner: owner, succeeded: !feedFailed && seen.contains(names(type.name, owner, "seed")), "feed")
                    }
                }
            }

            var untouched: [String] = []
            for (index, principal) in principals.enumerated() {
                // Create: one new record per type.
                let created = try await send(principal, "records/modify", ["operations": .array(types.map {
                    op("create", "\($0.name)-new-\(index)", type: $0.name, fields: ["title": ["value": "new"]])
                })])
                for (typeIndex, type) in types.enumerated() {
                    let item = created.status == 200 ? created.json.record(typeIndex) : nil
                    check(principal, .create, type, owner: nil, succeeded: item?["recordChangeTag"] != nil, "\(created.status) \(item ?? created.json)")
                }
                // Update and delete: the principal's own targets, of both owners.
                for operation in [Operation.update, .delete] {
                    var targets: [(type: (name: String, grants: Grants), owner: Int)] = []
                    var operations: [JSON] = []
                    for type in types {
                        for owner in 0..<2 {
                            targets.append((type, owner))
                            let name = names(type.name, owner, (operation == .update ? "upd" : "del") + "\(index)")
                            operations.append(operation == .update ? op("forceUpdate", name, type: type.name, fields: ["title": ["value": "changed"]])
                                                                    : op("forceDelete", name, type: nil))
                        }
                    }
                    let answer = try await send(principal, "records/modify", ["operations": .array(operations)])
                    for (position, target) in targets.enumerated() {
                        let item = answer.status == 200 ? answer.json.record(position) : nil
                        let succeeded = operation == .update ? item?["fields"]?["title"]?["value"] == "changed" : item?["deleted"] == true
                        check(principal, operation, target.type, owner: target.owner, succeeded: succeeded, "\(answer.status) \(item ?? answer.json)")
                        if !succeeded { untouched.append(operations[position]["record"]?["recordName"]?.stringValue ?? "") }
                    }
                }
            }
            // Refused writes left their targets as they were.
            for start in stride(from: 0, to: untouched.count, by: 200) {
                let chunk = Array(untouched[start..<min(start + 200, untouched.count)])
                let read = try await send(principals[5], "records/lookup", ["records": .array(chunk.map { ["recordName": .string($0)] })])
                for (position, name) in chunk.enumerated() {
                    #expect(read.json.record(position)?["fields"]?["title"]?["value"] == "target", "\(name) was changed by a refused write: \(read.json.record(position) ?? read.json)")
                }
            }

            print("authorization matrix: \(types.count) record types × 7 principals × 6 operations × ownership = \(cases) cases, "
                  + "\(unauthorized.count) unauthorized successes, \(wrongDenials.count) wrong denials")
            #expect(cases > 2000)
            #expect(unauthorized.isEmpty, "\(unauthorized.prefix(20).joined(separator: "\n"))")
            #expect(wrongDenials.isEmpty, "\(wrongDenials.prefix(20).joined(separator: "\n"))")
        }
    }
}
