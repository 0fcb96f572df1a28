import Foundation
import StratusCore
import StratusStore
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The built programs (`stratus`, `stratus-bench`) and what the tests that run them share:
/// free ports, scratch folders, the served process's environment, plain HTTP calls.
enum Programs {
    /// The `stratus` executable next to the test bundle (SwiftPM builds both into the same folder).
    static var binary: String { executable("stratus") }

    /// The load generator, `stratus-bench`, built beside it.
    static var benchBinary: String { executable("stratus-bench") }

    static func executable(_ name: String) -> String {
        let folder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for candidate in [folder, folder.deletingLastPathComponent()] {
            let path = candidate.appendingPathComponent(name).path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
        }
        return TestCluster.repositoryRoot.appendingPathComponent(".build/debug/" + name).path
    }

    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static func get(_ url: String) async -> (Int, String)? {
        guard let url = URL(string: url) else { return nil }
        do {
            let (data, response) = try await URLSession.shared.data(from: url)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
        } catch {
            return nil
        }
    }

    /// A new empty folder under the temporary directory (the caller removes it).
    static func scratchFolder(_ prefix: String) throws -> String {
        let folder = NSTemporaryDirectory() + "\(prefix)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        return folder
    }

    /// This process's environment plus what `stratus serve` needs here: the admin token (and its
    /// own compiled-in migrations, never a folder).
    static func serveEnvironment(adminToken: String) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["STRATUS_ADMIN_TOKEN"] = adminToken
        environment["STRATUS_MIGRATIONS_DIR"] = nil
        // Asset files of servers the tests start stay out of the working tree.
        environment["STRATUS_ASSET_DIR"] = NSTemporaryDirectory() + "stratus-test-assets-\(getpid())"
        TestSecrets.record(adminToken)
        return environment
    }

    /// Polls `/health` for up to a minute; returns its last answer (200 once the server is up).
    static func waitForHealth(_ server: String) async throws -> (Int, String)? {
        var health: (Int, String)?
        for _ in 0..<240 {
            health = await get(server + "/health")
            if health?.0 == 200 { break }
            try await Task.sleep(for: .milliseconds(250))
        }
        return health
    }

    /// Runs the CLI; returns exit status and combined output.
    static func cli(_ arguments: [String], server: String, token: String = "e2e-admin") async throws -> Subprocess.Output {
        var environment = ProcessInfo.processInfo.environment
        environment["STRATUS_SERVER"] = server
        environment["STRATUS_ADMIN_TOKEN"] = token
        return try await Subprocess.runDetached([binary] + arguments, environment: environment)
    }

    /// POSTs `body` and returns status and the parsed answer.
    static func post(_ url: String, _ body: String, headers: [String: String] = [:]) async throws -> (Int, JSON) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "POST"
        request.httpBody = Data(body.utf8)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONParser.parse(Array(data))) ?? .null)
    }

    /// GETs `url` and returns the parsed answer (`.null` when it is not JSON).
    static func getJSON(_ url: String, headers: [String: String]) async throws -> JSON {
        var request = URLRequest(url: URL(string: url)!)
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        let (data, _) = try await URLSession.shared.data(for: request)
        return (try? JSONParser.parse(Array(data))) ?? .null
    }
}
