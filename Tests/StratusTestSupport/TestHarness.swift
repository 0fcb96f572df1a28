import Foundation
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import StratusCore
@testable import StratusServer
import StratusStore
import Testing

/// The embedded cluster the test process uses (stopped and removed at exit).
nonisolated(unsafe) var testClusterForExit: EmbeddedPostgres?

/// One real PostgreSQL cluster per test process; a template database migrated once; a fresh
/// database per test created from the template (`CREATE DATABASE … TEMPLATE`).
actor TestCluster {
    static let shared = TestCluster()
    /// The servers' logger: to the console at `STRATUS_TEST_LOG_LEVEL` (critical by default),
    /// and at debug level to `.build/test-output/server-logs/` for the secrets check (`TestSecrets`).
    static let logger: Logger = {
        let consoleLevel = ProcessInfo.processInfo.environment["STRATUS_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        var logger = Logger(label: "stratus-tests") { FileLogHandler(label: $0, consoleLevel: consoleLevel) }
        logger.logLevel = min(consoleLevel, .debug)
        return logger
    }()

    private var cluster: Task<EmbeddedPostgres, any Error>?
    private var counter = 0

    /// The repository root (for Migrations/ and the built binary).
    static let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// The cluster, started on first use (`initdb` and `pg_ctl` on a thread of their own: run
    /// on one of Swift concurrency's few shared threads they stalled every test's tasks). The
    /// tests run side by side, each with its own pool, and served binaries open 16 each: with
    /// PostgreSQL's 200 connections, pools failed to connect until their circuit breaker tripped.
    func server() async throws -> EmbeddedPostgres {
        if cluster == nil {
            let directory = NSTemporaryDirectory() + "stratus-tests-\(getpid())"
            cluster = Task {
                let started = try await Subprocess.onOwnThread {
                    try EmbeddedPostgres.start(directory: directory, logger: Self.logger, maximumConnections: 1000)
                }
                testClusterForExit = started
                atexit {
                    if let cluster = testClusterForExit {
                        cluster.stop()
                        // Its log stays for `Deploy/test.sh` to show after a failed run.
                        let kept = TestCluster.repositoryRoot.appendingPathComponent(".build/test-output/postgres-\(getpid()).log").path
                        try? FileManager.default.removeItem(atPath: kept)
                        try? FileManager.default.copyItem(atPath: cluster.dataDirectory + "/server.log", toPath: kept)
                        try? FileManager.default.removeItem(atPath: cluster.dataDirectory)
                        try? FileManager.default.removeItem(atPath: cluster.stateDirectory)
                    }
                }
                return started
            }
        }
        return try await cluster!.value
    }

    private var template: Task<Void, any Error>?

    /// The ports of a Citus coordinator and its workers on this machine (`STRATUS_TEST_CITUS`,
    /// such as `19090,19091,19092`: `Deploy/citus/cluster.sh up` makes them, user `postgres`
    /// without a password), or nil: the embedded cluster.
    static let citusPorts: [Int]? = ProcessInfo.processInfo.environment["STRATUS_TEST_CITUS"]
        .map { $0.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) } }
        .flatMap { $0.count >= 2 ? $0 : nil }

    /// A new, migrated, empty database (on Citus, distributed as `Deploy/citus/distribute.sql`
    /// says): a copy (`CREATE DATABASE … TEMPLATE`, on every node of a Citus cluster) of a template
    /// set up once per test process. On Citus, setting one up took about 9 s (most of it
    /// `distribute.sql`); a copy takes 0.2–0.6 s per node.
    func newDatabase() async throws -> DatabaseConfiguration {
        let citus = Self.citusPorts
        let servers = if let citus { citus.map { Self.citusNode($0, "postgres") } } else { [try await server().configuration] }
        let templateName = citus == nil ? "stratus_template" : "citus_template_\(getpid())"
        if template == nil {
            template = Task { [servers] in
                if let citus {
                    try await Self.setUpCitusTemplate(templateName, ports: citus)
                } else {
                    try await Self.run(["DROP DATABASE IF EXISTS \(templateName)", "CREATE DATABASE \(templateName)"], on: servers[0])
                    try await Self.migrate(servers[0].with(database: templateName))
                }
            }
        }
        try await template!.value
        counter += 1
        let name = "test_\(getpid())_\(counter)"
        for server in servers {
            // CREATE DATABASE waits up to 5 s for the template's last sessions to end.
            try await Self.run(["CREATE DATABASE \(name) TEMPLATE \(templateName)"], on: server)
        }
        var database = servers[0].with(database: name)
        if citus != nil { database.useCitus() }
        return database
    }
}

extension TestCluster {
    /// A database of the same name on the coordinator (`ports[0]`) and every worker, with the
    /// citus extension in each, the workers added, the migrations run on the coordinator and
    /// `distribute.sql` applied (what an operator does), then closed to connections: a database
    /// is copied only while nobody is connected to it, and Citus's maintenance daemon and the
    /// coordinator's connections to the workers stay. The coordinator first, so that it opens no
    /// new connection to a worker.
    private static func setUpCitusTemplate(_ name: String, ports: [Int]) async throws {
        for port in ports {
            try await Self.run(["CREATE DATABASE \(name)"], on: Self.citusNode(port, "postgres"))
            try await Self.run(["CREATE EXTENSION citus"], on: Self.citusNode(port, name))
        }
        var coordinator = Self.citusNode(ports[0], name)
        try await Self.run(["SELECT citus_set_coordinator_host('127.0.0.1', \(ports[0]))"]
                           + ports.dropFirst().map { "SELECT citus_add_node('127.0.0.1', \($0))" }, on: coordinator)
        coordinator.useCitus()
        try await Self.migrate(coordinator)
        let placing = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("Deploy/citus/distribute.sql"), encoding: .utf8)
        try await Self.run(Self.statements(of: placing), on: coordinator)
        for port in ports {
            try await Self.run(["ALTER DATABASE \(name) WITH ALLOW_CONNECTIONS false",
                                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '\(name)'"],
                               on: Self.citusNode(port, "postgres"))
        }
    }

    /// Runs the repository's migrations on `database`.
    private static func migrate(_ database: DatabaseConfiguration) async throws {
        let migrations = try Migration.load(from: Self.repositoryRoot.appendingPathComponent("Migrations"))
        try await withDatabase(database, maximumConnections: 1) { db in
            try await MigrationRunner(migrations: migrations, logger: Self.logger).run(on: db)
        }
    }

    static func citusNode(_ port: Int, _ database: String) -> DatabaseConfiguration {
        DatabaseConfiguration(host: "127.0.0.1", port: port, username: "postgres", password: nil, database: database)
    }

    /// Runs each statement to its end, rows read (a statement whose answer is left unread can be
    /// cut off when the connection closes: a worker was once left out of a cluster that way).
    static func run(_ statements: [String], on node: DatabaseConfiguration) async throws {
        try await withDatabase(node, maximumConnections: 1) { db in
            try await db.withConnection { connection in
                for statement in statements {
                    for try await _ in try await connection.query(PostgresQuery(unsafeSQL: statement), logger: Self.logger) {}
                }
            }
        }
    }

    /// The statements of a SQL file whose statements each end a line with `;` (comments dropped;
    /// a function body between `$$` lines is one statement with the line that closes it).
    static func statements(of text: String) -> [String] {
        var statements: [String] = []
        var current = ""
        var inBody = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if !inBody && (trimmed.hasPrefix("--") || trimmed.isEmpty) { continue }
            current += line + "\n"
            if line.components(separatedBy: "$$").count % 2 == 0 { inBody.toggle() }
            if !inBody && trimmed.hasSuffix(";") {
                statements.append(current)
                current = ""
            }
        }
        return statements
    }
}

/// Runs `body` with a connection pool whose `run()` is active for the body's duration.
func withDatabase<T: Sendable>(_ configuration: DatabaseConfiguration, maximumConnections: Int = 4,
                               _ body: @Sendable (Database) async throws -> T) async throws -> T {
    var configuration = configuration
    configuration.maximumConnections = maximumConnections
    let db = Database(configuration: configuration, logger: TestCluster.logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await db.run() }
        defer { group.cancelAll() }
        do {
            return try await body(db)
        } catch let error as PSQLError {
            // PSQLError's description hides the server's message; a test failing on one needs it.
            Issue.record("PostgreSQL error: \(String(reflecting: error))")
            throw error
        }
    }
}

/// A Stratus app on a fresh database, and helpers to speak to it.
struct Harness: Sendable {
    static let adminToken = "test-admin-token"
    let client: any TestClientProtocol
    let database: Database
    let app: StratusApp

    /// Runs `body` against a new app (in-process router by default, or a live server);
    /// `database` adjusts the pool's settings (timeouts).
    static func run(live: Bool = false, port: Int = 0, poolSize: Int = 4, idleTimeout: Duration? = nil, on given: DatabaseConfiguration? = nil,
                    database adjust: @Sendable (inout DatabaseConfiguration) -> Void = { _ in },
                    server configure: @Sendable (inout ServerConfiguration) -> Void = { _ in }, verifyUsage: Bool = true,
                    _ body: @escaping @Sendable (Harness) async throws -> Void) async throws {
        // At most `HarnessSlots.limit` apps at once (a harness run inside another takes no slot).
        if Self.holdsSlot {
            return try await runApp(live: live, port: port, poolSize: poolSize, idleTimeout: idleTimeout, on: given, database: adjust,
                                    server: configure, verifyUsage: verifyUsage, body)
        }
        await HarnessSlots.shared.acquire()
        do {
            try await Self.$holdsSlot.withValue(true) {
                try await runApp(live: live, port: port, poolSize: poolSize, idleTimeout: idleTimeout, on: given, database: adjust,
                                 server: configure, verifyUsage: verifyUsage, body)
            }
        } catch {
            await HarnessSlots.shared.release()
            throw error
        }
        await HarnessSlots.shared.release()
    }

    /// Whether the current task runs inside a harness (and holds a slot).
    @TaskLocal static var holdsSlot = false

    private static func runApp(live: Bool, port: Int, poolSize: Int, idleTimeout: Duration?, on given: DatabaseConfiguration?,
                               database adjust: @Sendable (inout DatabaseConfiguration) -> Void,
                               server configure: @Sendable (inout ServerConfiguration) -> Void, verifyUsage: Bool,
                               _ body: @escaping @Sendable (Harness) async throws -> Void) async throws {
        var configuration = if let given { given } else { try await TestCluster.shared.newDatabase() }
        adjust(&configuration)
        try await withDatabase(configuration, maximumConnections: poolSize) { db in
            var server = Self.serverConfiguration
            configure(&server)
            let stratus = try await StratusApp.make(database: db, configuration: server, logger: TestCluster.logger)
            // Live tests run the server `stratus serve` runs; router tests skip HTTP.
            try await TestApp.run(router: stratus.router(), server: stratus.httpServer(idleTimeout: idleTimeout), port: port,
                                  services: [stratus.background], logger: TestCluster.logger, mode: live ? .live : .router) { client in
                try await Self.waitUntilListening(stratus)
                try await body(Harness(client: client, database: db, app: stratus))
            }
            // Whatever a test did through the service, the usage meters must equal a recount of
            // its data (`stratus usage --verify`); tests that write rows behind the service's back opt out.
            if verifyUsage {
                let differences = try await AdminStore(database: db, logger: TestCluster.logger).metering.verifyUsage(containerID: nil, environment: nil)
                #expect(differences.isEmpty, "usage counters differ from the data after the test: \(differences)")
            }
        }
    }

    /// Waits for the app's invalidation listener to be up before a test counts on it (on a busy
    /// machine connecting took seconds): what another process changes before then is forgotten
    /// when the listener starts, but a test timing the news would be waiting for that.
    static func waitUntilListening(_ stratus: StratusApp) async throws {
        let waitedFrom = ContinuousClock.now
        while !stratus.invalidations.listening, ContinuousClock.now - waitedFrom < .seconds(60) {
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(stratus.invalidations.listening, "the invalidation listener did not start within 60 s")
    }

    /// The tests' server settings: bcrypt at its cheapest; no statistics keeper (dozens of test
    /// databases share one cluster, and their ANALYZEs competed with every test's requests;
    /// `PlannerStatisticsTests` turns it on, as `stratus serve` has it by default).
    static let serverConfiguration: ServerConfiguration = {
        var configuration = ServerConfiguration(adminToken: adminToken, maximumBodyBytes: 4 * 1024 * 1024, bcryptCost: 4)
        configuration.statisticsInterval = nil
        return configuration
    }()

    /// Runs `body` against a second server process on the same database: another app with its
    /// own caches and its own background work (as a second `stratus serve` would have), in
    /// process, through its router.
    func otherProcess(_ body: @escaping @Sendable (Harness) async throws -> Void) async throws {
        let stratus = try await StratusApp.make(database: database, configuration: app.configuration, logger: TestCluster.logger)
        try await TestApp.run(router: stratus.router(), services: [stratus.background], logger: TestCluster.logger, mode: .router) { client in
            try await Self.waitUntilListening(stratus)
            try await body(Harness(client: client, database: database, app: stratus))
        }
    }

    /// Sends a request; the body is sent as is (text/plain, like CloudKit JS).
    @discardableResult
    func send(_ method: HTTPRequest.Method, _ uri: String, body: String? = nil, headers: HTTPFields = [:]) async throws -> (status: Int, json: JSON) {
        var allHeaders = headers
        if body != nil, allHeaders[.contentType] == nil { allHeaders[.contentType] = "text/plain" }
        TestSecrets.scan(uri: uri, body: body, headers: allHeaders)
        let answer = try await client.execute(uri: uri, method: method, headers: allHeaders, body: body.map { ByteBuffer(string: $0) }) { response in
            let bytes = Array(response.body.readableBytesView)
            let json = (try? JSONParser.parse(bytes)) ?? .string(String(decoding: bytes, as: UTF8.self))
            return (Int(response.status.code), json)
        }
        TestSecrets.scan(answer: answer.1)
        return answer
    }

    /// Sends JSON.
    @discardableResult
    func send(_ method: HTTPRequest.Method, _ uri: String, json: JSON, headers: HTTPFields = [:]) async throws -> (status: Int, json: JSON) {
        try await send(method, uri, body: JSONWriter.string(json), headers: headers)
    }

    /// Sends a management request with the admin token.
    @discardableResult
    func admin(_ method: HTTPRequest.Method, _ path: String, json: JSON? = nil) async throws -> (status: Int, json: JSON) {
        let headers: HTTPFields = [.authorization: "Bearer \(Self.adminToken)"]
        if let json { return try await send(method, "/management/1/" + path, json: json, headers: headers) }
        return try await send(method, "/management/1/" + path, body: nil, headers: headers)
    }

    /// Sends a management request with `credential` (an operator's, the admin token, or none).
    @discardableResult
    func management(_ credential: String?, _ method: HTTPRequest.Method, _ path: String, json: JSON? = nil) async throws -> (status: Int, json: JSON) {
        let headers: HTTPFields = credential.map { [.authorization: "Bearer \($0)"] } ?? [:]
        if let json { return try await send(method, "/management/1/" + path, json: json, headers: headers) }
        return try await send(method, "/management/1/" + path, body: method == .get || method == .delete ? nil : "{}", headers: headers)
    }

    /// An operator account, signed in.
    struct Operator: Sendable {
        var email: String
        var password: String
        var credential: String
        var credentialID: Int64
    }

    /// Adds an operator (with the admin token), puts them in each container's team with the role
    /// given, and signs them in.
    func signedInOperator(_ email: String = "operator\(UInt32.random(in: 0...UInt32.max))@example.com", superuser: Bool = false,
                          teams: [(container: String, role: TeamRole)] = []) async throws -> Operator {
        let password = "operator password \(UInt32.random(in: 0...UInt32.max))"
        let added = try await admin(.post, "operators", json: ["emailAddress": .string(email), "password": .string(password), "superuser": .bool(superuser)])
        #expect(added.status == 201, "operator add: \(added.json)")
        for (container, role) in teams {
            let joined = try await admin(.post, "containers/\(container)/team", json: ["operator": .string(email), "role": .string(role.description)])
            #expect(joined.status == 201, "team add: \(joined.json)")
        }
        let login = try await send(.post, "/management/1/login", json: ["emailAddress": .string(email), "password": .string(password)])
        #expect(login.status == 200, "login: \(login.json)")
        return Operator(email: email, password: password, credential: login.json["credential"]?.stringValue ?? "",
                        credentialID: login.json["credentialID"]?.intValue ?? 0)
    }

    /// Creates a container with an API token and returns a ``Session`` for it (no user yet).
    func container(_ name: String = "iCloud.com.example.Test\(UInt32.random(in: 0...UInt32.max))",
                   environment: ContainerEnvironment = .development) async throws -> Session {
        let created = try await admin(.post, "containers", json: ["name": .string(name)])
        #expect(created.status == 201)
        let token = try await admin(.post, "containers/\(name)/tokens", json: ["environment": .string(environment.rawValue), "name": "test"])
        #expect(token.status == 201)
        return Session(harness: self, container: name, environment: environment, apiToken: token.json["apiToken"]?.stringValue ?? "")
    }

    /// Imports `schema` into `container`'s development environment and deploys it to production.
    func deploy(_ schema: String, to container: String) async throws {
        let imported = try await admin(.post, "containers/\(container)/schema/import", json: ["schema": .string(schema)])
        #expect(imported.status == 200, "import: \(imported.json)")
        let deployed = try await admin(.post, "containers/\(container)/schema/deploy", json: [:])
        #expect(deployed.json["applied"] == true, "deploy: \(deployed.json)")
    }

    /// A new container whose production runs `schema`, and a user signed up there.
    func production(_ schema: String, prefix: String = "Production") async throws -> Session {
        let name = "iCloud.com.example.\(prefix)\(UInt32.random(in: 0...UInt32.max))"
        _ = try await container(name)
        try await deploy(schema, to: name)
        let token = try await admin(.post, "containers/\(name)/tokens", json: ["environment": "production"])
        return try await Session(harness: self, container: name, environment: .production,
                                 apiToken: token.json["apiToken"]?.stringValue ?? "").signedUp()
    }

    /// Runs the index builds a deploy started until they are done (at most 20 batches of 100).
    func buildIndexes(_ container: String) async throws {
        var done = false
        for _ in 0..<20 where !done {
            done = try await admin(.post, "containers/\(container)/schema/indexes/build", json: ["batch": 100]).json["done"] == true
        }
        #expect(done, "the index builds of \(container) did not finish")
    }
}

/// A client of one container-environment, optionally signed in.
struct Session: Sendable {
    let harness: Harness
    let container: String
    let environment: ContainerEnvironment
    let apiToken: String
    var webAuthToken: String?
    var userRecordName: String?

    /// Signs up a new user and returns the session signed in as them.
    func signedUp(_ email: String = "user\(UInt32.random(in: 0...UInt32.max))@example.com", password: String = "correct horse") async throws -> Session {
        let response = try await harness.send(.post, "/auth/1/\(container)/\(environment.rawValue)/signup?ckAPIToken=\(apiToken)",
                                              json: ["emailAddress": .string(email), "password": .string(password)])
        // A failed sign-up ends the test here, not at a later force-unwrap of the user's name
        // (which crashed the whole test process when PostgreSQL was away).
        try #require(response.status == 200, "signup: \(response.json)")
        var copy = self
        copy.webAuthToken = response.json["ckWebAuthToken"]?.stringValue
        copy.userRecordName = response.json["userRecordName"]?.stringValue
        return copy
    }

    /// Signs in as an existing user and returns the session signed in as them.
    func signedIn(_ email: String, password: String = "correct horse") async throws -> (status: Int, session: Session, json: JSON) {
        let response = try await harness.send(.post, "/auth/1/\(container)/\(environment.rawValue)/signin?ckAPIToken=\(apiToken)",
                                              json: ["emailAddress": .string(email), "password": .string(password)])
        var copy = self
        copy.webAuthToken = response.json["ckWebAuthToken"]?.stringValue
        copy.userRecordName = response.json["userRecordName"]?.stringValue
        return (response.status, copy, response.json)
    }

    /// The same client seen by another server process's harness.
    func on(_ other: Harness) -> Session {
        Session(harness: other, container: container, environment: environment, apiToken: apiToken,
                webAuthToken: webAuthToken, userRecordName: userRecordName)
    }

    /// The query string CloudKit JS sends: API token, user token and its own extra parameters.
    var query: String {
        var text = "ckAPIToken=\(apiToken)&ckjsVersion=2.6.4&ckjsBuildVersion=2425ABCD"
        if let webAuthToken { text += "&ckWebAuthToken=" + (webAuthToken.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? webAuthToken) }
        return text
    }

    func path(_ database: String, _ operation: String) -> String {
        "/database/1/\(container)/\(environment.rawValue)/\(database)/\(operation)?\(query)"
    }

    /// POSTs a JSON body to a data endpoint.
    @discardableResult
    func post(_ database: String, _ operation: String, _ body: JSON) async throws -> (status: Int, json: JSON) {
        try await harness.send(.post, path(database, operation), json: body)
    }

    /// POSTs raw text to a data endpoint.
    @discardableResult
    func post(_ database: String, _ operation: String, raw: String) async throws -> (status: Int, json: JSON) {
        try await harness.send(.post, path(database, operation), body: raw)
    }

    /// GETs a data endpoint.
    @discardableResult
    func get(_ database: String, _ operation: String) async throws -> (status: Int, json: JSON) {
        try await harness.send(.get, path(database, operation))
    }

    /// Saves records with one modify request and returns the response.
    @discardableResult
    func modify(_ database: String, zone: String? = nil, atomic: Bool? = nil, _ operations: [JSON]) async throws -> (status: Int, json: JSON) {
        var body: [String: JSON] = ["operations": .array(operations)]
        if let zone { body["zoneID"] = ["zoneName": .string(zone)] }
        if let atomic { body["atomic"] = .bool(atomic) }
        return try await post(database, "records/modify", .object(body))
    }
}

/// A `records/modify` operation.
func op(_ type: String, _ name: String, type recordType: String? = "Note", tag: String? = nil, fields: [String: JSON] = [:]) -> JSON {
    var record: [String: JSON] = ["recordName": .string(name)]
    if let recordType { record["recordType"] = .string(recordType) }
    if let tag { record["recordChangeTag"] = .string(tag) }
    if !fields.isEmpty { record["fields"] = .object(fields) }
    return ["operationType": .string(type), "record": .object(record)]
}

extension JSON {
    /// `records[i]` of a response.
    func record(_ index: Int) -> JSON? { self["records"]?.arrayValue.flatMap { index < $0.count ? $0[index] : nil } }
    /// The `serverErrorCode` of an error dictionary.
    var errorCode: String? { self["serverErrorCode"]?.stringValue }
}


/// How many harnesses (apps with pools, listeners and clients of their own) run at once. Swift
/// Testing starts every test together; ~190 of them on 2 cores left the run queue at 20–30 and
/// requests waiting past their clients' 15 s limit. Swift Testing's own experimental width limit
/// (`SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH`) did the same job but once left a run with
/// every test waiting and none running; this one is a plain FIFO semaphore. Waiting counts
/// against a test's time limit, which is why the suites' limits allow several minutes.
actor HarnessSlots {
    static let limit = Int(ProcessInfo.processInfo.environment["STRATUS_TEST_WIDTH"] ?? "") ?? 6
    static let shared = HarnessSlots(limit: limit)

    private var free: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) { free = max(1, limit) }

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        let queued = ContinuousClock.now
        let ahead = waiting.count
        await withCheckedContinuation { waiting.append($0) }
        // A suite's time limit counts this wait: one that runs out should say where its time went.
        let waited = ContinuousClock.now - queued
        if waited > .seconds(60) {
            print("HarnessSlots: a test waited \(waited.components.seconds) s for a slot (\(ahead) waiting before it)")
        }
    }

    func release() {
        if waiting.isEmpty {
            free += 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
