import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// The published contract, `GET /openapi.json`, against the server's own router: a route missing
/// from the document, or a document naming a route the server does not have, fails here. The
/// routes come from the router's table, so a route added later is held to the document without
/// anyone adding it to this test.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct OpenAPIContractTests {
    /// A path with each parameter (`:name` or `{name}`) written `{}`, for comparing patterns.
    static func shape(_ path: String) -> String {
        path.split(separator: "/", omittingEmptySubsequences: false).map { part in
            part.hasPrefix(":") || (part.hasPrefix("{") && part.hasSuffix("}")) ? "{}" : String(part)
        }.joined(separator: "/")
    }

    static let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    @Test func theDocumentNamesExactlyTheRoutesTheServerHas() async throws {
        try await Harness.run { harness in
            let served = try await harness.send(.get, "/openapi.json")
            #expect(served.status == 200, "the document is served without credentials: \(served.json)")
            let document = served.json
            #expect(document["openapi"]?.stringValue?.hasPrefix("3.1") == true)
            let paths = try #require(document["paths"]?.objectValue, "the document has paths")

            var documented: Set<String> = []
            var operationIDs: [String: Int] = [:]
            for (path, item) in paths {
                for method in Self.methods {
                    guard let operation = item[method] else { continue }
                    documented.insert("\(method.uppercased()) \(Self.shape(path))")
                    operationIDs[operation["operationId"]?.stringValue ?? "(none) \(method) \(path)", default: 0] += 1
                    // Every operation says how it fails, and every failure is an error dictionary.
                    let responses = operation["responses"]?.objectValue ?? [:]
                    #expect(responses.keys.contains { $0.hasPrefix("2") }, "\(method) \(path) documents no success")
                    if path != "/health", path != "/openapi.json" {
                        #expect(responses.keys.contains { $0.hasPrefix("4") }, "\(method) \(path) documents no failure")
                    }
                    for (status, response) in responses where status.hasPrefix("4") {
                        #expect(response["$ref"]?.stringValue?.hasPrefix("#/components/responses/E") == true,
                                "\(method) \(path) \(status) is not an error dictionary response")
                    }
                }
            }
            let duplicated = operationIDs.filter { $0.value > 1 || $0.key.hasPrefix("(none)") }.keys.sorted()
            #expect(duplicated.isEmpty, "operations without a unique operationId: \(duplicated)")

            // The console's pages are HTML for people, not part of the API.
            let routes = Set(CredentialIsolationTests.routeTable(harness).filter { !$0.1.hasPrefix("/console") }.map { "\($0.0) \(Self.shape($0.1))" })
            #expect(routes.count >= 70, "the router has only \(routes.count) routes")
            let undocumented = routes.subtracting(documented).sorted()
            let unserved = documented.subtracting(routes).sorted()
            #expect(undocumented.isEmpty, "routes the document does not describe: \(undocumented)")
            #expect(unserved.isEmpty, "the document describes routes the server does not have: \(unserved)")

            // Every `$ref` resolves.
            var unresolved: [String] = []
            func walk(_ value: JSON) {
                switch value {
                case .object(let members):
                    if let target = members["$ref"]?.stringValue {
                        var node: JSON? = document
                        for part in target.dropFirst(2).split(separator: "/") { node = node?[String(part)] }
                        if node == nil { unresolved.append(target) }
                    }
                    members.values.forEach(walk)
                case .array(let items): items.forEach(walk)
                default: break
                }
            }
            walk(document)
            #expect(unresolved.isEmpty, "references to nothing: \(Set(unresolved).sorted())")
        }
    }

    /// The served document is the one in the repository (`Sources/StratusServer/Resources/openapi.json`).
    @Test func theServedDocumentIsTheRepositorysFile() async throws {
        try await Harness.run { harness in
            let file = TestCluster.repositoryRoot.appendingPathComponent("Sources/StratusServer/Resources/openapi.json")
            let text = try Data(contentsOf: file)
            let inRepository = try JSONParser.parse(Array(text))
            let served = try await harness.send(.get, "/openapi.json")
            #expect(served.json == inRepository)
        }
    }

    /// Each management operation says who may use it (`x-stratus-access`), as the role table
    /// (`ManagementAccess.routes`) has it, and the open one needs no credential.
    @Test func theDocumentSaysWhoMayUseEachManagementRoute() throws {
        let file = TestCluster.repositoryRoot.appendingPathComponent("Sources/StratusServer/Resources/openapi.json")
        let document = try JSONParser.parse(Array(try Data(contentsOf: file)))
        var checked = 0
        var wrong: [String] = []
        for (key, requirement) in ManagementAccess.routes {
            let method = String(key.prefix { $0 != " " }).lowercased()
            let path = String(key.drop { $0 != " " }.dropFirst()).replacing(/:([a-z]+)/) { "{" + $0.output.1 + "}" }
            let operation = document["paths"]?[path]?[method]
            checked += 1
            if operation?["x-stratus-access"]?.stringValue != requirement.summary {
                wrong.append("\"\(method.uppercased()) \(path)\": \"\(requirement.summary)\"")
            }
            let open = operation?["security"]?.arrayValue?.isEmpty == true
            if open != (requirement == .open) { wrong.append("\(key): security \(operation?["security"] ?? .null)") }
        }
        #expect(checked == ManagementAccess.routes.count)
        #expect(wrong.isEmpty, "\(wrong.sorted().joined(separator: ",\n"))")
    }

    /// `Deploy/REFERENCE.md`'s role table ("Operators and teams") is the role table.
    @Test func theReferenceRoleTableIsTheRoleTable() throws {
        let text = try String(contentsOf: TestCluster.repositoryRoot.appendingPathComponent("Deploy/REFERENCE.md"), encoding: .utf8)
        var documented: [String: String] = [:]
        for match in text.matches(of: /\| `(GET|POST|PATCH|DELETE) (\/[^`]*)` \| ([^|]+) \|/) {
            documented["\(match.output.1) /management/1\(match.output.2)"] = String(match.output.3).trimmingCharacters(in: .whitespaces)
        }
        let expected = Dictionary(uniqueKeysWithValues: ManagementAccess.routes.map { key, requirement in
            (key.replacing(/:([a-z]+)/) { "{" + $0.output.1 + "}" }, requirement.summary)
        })
        #expect(documented == expected, "rows to fix: \(expected.filter { documented[$0.key] != $0.value }.keys.sorted()); rows of no route: \(Set(documented.keys).subtracting(expected.keys).sorted())")
    }
}
