import Foundation
import StratusStore
import Testing

/// `count` real `stratus serve` processes on one new test database, each on a port of its own,
/// killed when `body` returns (the tests of what several server processes share).
func withServeProcesses(_ count: Int, adminToken: String, name: String,
                        _ body: ([String]) async throws -> Void) async throws {
    try await withServeProcesses(count, adminToken: adminToken, name: name, arguments: { _ in [] }) { servers in
        try await body(servers.map(\.url))
    }
}

/// A `stratus serve` process of `withServeProcesses`: where it listens, its process id.
struct ServeProcess: Sendable {
    var url: String
    var pid: pid_t
    /// Its scratch folder (removed afterwards).
    var folder: String
}

/// `withServeProcesses`, with arguments of their own for each process (`arguments(folder)`:
/// the scratch folder is theirs to use), handing `body` the processes.
func withServeProcesses(_ count: Int, adminToken: String, name: String, arguments: (String) -> [String],
                        _ body: ([ServeProcess]) async throws -> Void) async throws {
    let configuration = try await TestCluster.shared.newDatabase()
    let folder = try Programs.scratchFolder(name)
    defer { try? FileManager.default.removeItem(atPath: folder) }
    let password = configuration.password.map { ":" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0) } ?? ""
    let url = "postgres://\(configuration.username)\(password)@\(configuration.host):\(configuration.port)/\(configuration.database)"
    let environment = Programs.serveEnvironment(adminToken: adminToken)
    var servers: [ServeProcess] = []
    var pids: [pid_t] = []
    defer {
        for pid in pids { Subprocess.killAndReap(pid) }
    }
    for index in 0..<count {
        let log = folder + "/serve\(index).log"
        // A free port is free only when asked: another test's server may take it before this one
        // binds it, and then answered this test's requests (with another admin token). So the
        // process must say it listens on the port, or it is started again on another.
        var started: (port: Int, pid: pid_t)?
        for _ in 0..<3 where started == nil {
            let port = Programs.freePort()
            let pid = try Subprocess.spawn([Programs.binary, "serve", "--port", String(port), "--database-url", url, "--bcrypt-cost", "4"]
                                           + ["--asset-dir", folder + "/assets"] + arguments(folder), outputPath: log, environment: environment)
            pids.append(pid)
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                if ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("listening on 127.0.0.1:\(port)") {
                    started = (port, pid)
                    break
                }
                if try await Subprocess.waitForExit(pid, within: .milliseconds(100)) != nil { break }
            }
        }
        let tail = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").suffix(2000)
        let (port, pid) = try #require(started, "stratus serve did not start listening: \(tail)")
        let server = "http://127.0.0.1:\(port)"
        let health = try await Programs.waitForHealth(server)
        try #require(health?.0 == 200, "server log: \(tail)")
        servers.append(ServeProcess(url: server, pid: pid, folder: folder))
    }
    try await body(servers)
}

/// A new container on `server` with a development API token and a signed-up user: the API token
/// and the user's web auth token, percent-encoded for a query string.
func serveTenant(_ server: String, adminToken: String, container: String) async throws -> (token: String, user: String) {
    let admin = ["Authorization": "Bearer \(adminToken)"]
    #expect(try await Programs.post(server + "/management/1/containers", #"{"name":"\#(container)"}"#, headers: admin).0 == 201)
    let token = try await Programs.post(server + "/management/1/containers/\(container)/tokens", #"{"environment":"development","name":"t"}"#, headers: admin)
    let apiToken = try #require(token.1["apiToken"]?.stringValue)
    let signup = try await Programs.post(server + "/auth/1/\(container)/development/signup?ckAPIToken=\(apiToken)",
                                              #"{"emailAddress":"ada@example.com","password":"correct horse"}"#)
    let user = try #require(signup.1["ckWebAuthToken"]?.stringValue)
    return (apiToken, user.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? user)
}
