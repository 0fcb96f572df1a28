import Foundation
import HTTPTypes
import OpenAPIRuntime
import OpenAPIURLSession

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

// StratusClientCheck BASE_URL ADMIN_TOKEN: uses the client swift-openapi-generator made from
// Stratus's OpenAPI document against a live server, as an app developer's Swift code would:
// creates a container and an API token, signs a user up, reads users/caller, saves and queries a
// record, and reads a failure as an error dictionary. Exits 1 on the first answer it did not expect.

/// Adds the credentials the document's security schemes name: `ckAPIToken` and `ckWebAuthToken`
/// query parameters, and the admin bearer token on the management API.
final class Credentials: ClientMiddleware, @unchecked Sendable {
    private let lock = NSLock()
    private var apiToken: String?
    private var webAuthToken: String?
    let adminToken: String

    init(adminToken: String) { self.adminToken = adminToken }

    func set(apiToken: String? = nil, webAuthToken: String? = nil) {
        lock.withLock {
            if let apiToken { self.apiToken = apiToken }
            if let webAuthToken { self.webAuthToken = webAuthToken }
        }
    }

    func intercept(_ request: HTTPRequest, body: HTTPBody?, baseURL: URL, operationID: String,
                   next: (HTTPRequest, HTTPBody?, URL) async throws -> (HTTPResponse, HTTPBody?)) async throws -> (HTTPResponse, HTTPBody?) {
        var request = request
        let path = request.path ?? "/"
        if path.hasPrefix("/management/") {
            request.headerFields[.authorization] = "Bearer \(adminToken)"
        } else {
            let (api, web) = lock.withLock { (apiToken, webAuthToken) }
            var query: [String] = []
            if let api { query.append("ckAPIToken=" + api) }
            if let web, !path.contains("/signup") {
                query.append("ckWebAuthToken=" + (web.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? web))
            }
            if !query.isEmpty { request.path = path + (path.contains("?") ? "&" : "?") + query.joined(separator: "&") }
        }
        return try await next(request, body, baseURL)
    }
}

struct CheckFailed: Error, CustomStringConvertible {
    var description: String
}

func expect(_ condition: Bool, _ what: @autoclosure () -> String) throws {
    if !condition { throw CheckFailed(description: what()) }
}

@main struct StratusClientCheck {
    static func main() async {
        let arguments = CommandLine.arguments
        guard arguments.count == 3, let server = URL(string: arguments[1]) else {
            FileHandle.standardError.write(Data("usage: StratusClientCheck BASE_URL ADMIN_TOKEN\n".utf8))
            exit(64)
        }
        do {
            try await run(server: server, adminToken: arguments[2])
        } catch {
            FileHandle.standardError.write(Data("generated client: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run(server: URL, adminToken: String) async throws {
        let credentials = Credentials(adminToken: adminToken)
        let client = Client(serverURL: server, transport: URLSessionTransport(), middlewares: [credentials])
        let container = "iCloud.com.example.GeneratedClient\(UInt32.random(in: 0...UInt32.max))"

        guard case .ok(let health) = try await client.health() else { throw CheckFailed(description: "health did not answer 200") }
        try expect(try health.body.json.status == .ok, "health: \(health)")

        guard case .created = try await client.createContainer(body: .json(.init(name: container))) else {
            throw CheckFailed(description: "createContainer did not answer 201")
        }
        guard case .created(let created) = try await client.createAPIToken(path: .init(container: container),
                                                                            body: .json(.init(environment: .development, name: "generated client"))) else {
            throw CheckFailed(description: "createAPIToken did not answer 201")
        }
        let apiToken = try created.body.json.apiToken
        try expect(apiToken.utf8.count == 64 && apiToken.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "API token form: \(apiToken)")
        credentials.set(apiToken: apiToken)

        guard case .ok(let signedUp) = try await client.signUp(path: .init(container: container, environment: .development),
                                                               body: .json(.init(emailAddress: "generated@example.com", password: "correct horse battery"))) else {
            throw CheckFailed(description: "signUp did not answer 200")
        }
        let session = try signedUp.body.json
        credentials.set(webAuthToken: session.ckWebAuthToken)

        let database = Operations.CallerIdentity.Input.Path(container: container, environment: .development, database: ._private)
        guard case .ok(let caller) = try await client.callerIdentity(path: database) else {
            throw CheckFailed(description: "callerIdentity did not answer 200")
        }
        let identity = try caller.body.json
        try expect(identity.userRecordName == session.userRecordName, "users/caller: \(identity) for \(session.userRecordName)")

        let note = Components.Schemas.RecordInput(recordName: "generated-1", recordType: "Note",
                                                   fields: .init(additionalProperties: ["title": .init(value: "from the generated client")]))
        guard case .ok(let modified) = try await client.modifyRecords(
            path: .init(container: container, environment: .development, database: ._private),
            body: .json(.init(operations: [.init(operationType: .create, record: note)]))) else {
            throw CheckFailed(description: "modifyRecords did not answer 200")
        }
        let saved = try modified.body.json.records
        guard saved.count == 1, let record = saved[0].value1, saved[0].value2 == nil else { throw CheckFailed(description: "records/modify: \(saved)") }
        try expect(record.recordChangeTag != nil && record.recordName == "generated-1", "saved record: \(record)")

        guard case .ok(let queried) = try await client.queryRecords(
            path: .init(container: container, environment: .development, database: ._private),
            body: .json(.init(query: .init(recordType: "Note")))) else {
            throw CheckFailed(description: "queryRecords did not answer 200")
        }
        let found = try queried.body.json.records
        try expect(found.count == 1 && found[0].fields?.additionalProperties["title"]?.value == "from the generated client", "records/query: \(found)")

        // A client mistake comes back as the error dictionary the document describes.
        let refused = try await client.lookupRecords(path: .init(container: container, environment: .development, database: ._private),
                                                     body: .json(.init(records: [.init(recordName: String(repeating: "x", count: 300))])))
        guard case .badRequest(let failure) = refused else { throw CheckFailed(description: "an over-long record name: \(refused)") }
        let error = try failure.body.json
        try expect(error.serverErrorCode == .badRequest && !error.reason.isEmpty, "error dictionary: \(error)")

        print("generated client: container, API token, sign-up, users/caller (\(identity.userRecordName)), records/modify, records/query and an error dictionary all as the document says")
    }
}
