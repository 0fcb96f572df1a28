import Foundation
import Logging
import StratusCore

/// A PostgreSQL cluster that Stratus creates and runs itself with the system's `initdb` and
/// `pg_ctl` (Debian's `postgresql` package), listening on 127.0.0.1 only, with a generated password.
///
/// PostgreSQL refuses to run as root. Started as root, the cluster belongs to the `postgres`
/// account; when that account cannot reach the requested folder (for example one under `/root`),
/// the cluster lives under `/var/lib/postgresql/stratus/` (or the temporary folder) instead, and
/// ``dataDirectory`` says where.
public final class EmbeddedPostgres: Sendable {
    /// The cluster's data folder.
    public let dataDirectory: String
    /// The folder Stratus was asked to use (holds the password file).
    public let stateDirectory: String
    /// The TCP port on 127.0.0.1.
    public let port: Int
    public let password: String
    let binDirectory: String
    let runAsUser: String?
    let logger: Logger
    /// Whether `start` found the cluster already running (a `stratus serve` has it): then a
    /// command that only borrows it leaves it running (`stopIfStarted`).
    public let adopted: Bool

    /// The superuser Stratus creates.
    public static let username = "stratus"

    private init(dataDirectory: String, stateDirectory: String, port: Int, password: String, binDirectory: String,
                 runAsUser: String?, logger: Logger, adopted: Bool = false) {
        self.adopted = adopted
        self.dataDirectory = dataDirectory
        self.stateDirectory = stateDirectory
        self.port = port
        self.password = password
        self.binDirectory = binDirectory
        self.runAsUser = runAsUser
        self.logger = logger
    }

    /// How to connect to the cluster.
    public var configuration: DatabaseConfiguration {
        DatabaseConfiguration(host: "127.0.0.1", port: port, username: Self.username, password: password, database: "postgres")
    }

    /// Creates the cluster under `directory` if needed and starts it (or adopts the one already
    /// running there). `maximumConnections` is its `max_connections` (a server process opens 16).
    public static func start(directory: String, logger: Logger, maximumConnections: Int = 200) throws -> EmbeddedPostgres {
        let fileManager = FileManager.default
        let state = URL(fileURLWithPath: directory).standardizedFileURL.path
        try fileManager.createDirectory(atPath: state, withIntermediateDirectories: true)
        guard let bin = findBinDirectory() else {
            throw StratusError(.internalError, "PostgreSQL server binaries (initdb, pg_ctl) were not found; install them with 'apt-get install -y postgresql', or set STRATUS_DATABASE_URL to use an existing server")
        }
        let runAs: String? = geteuid() == 0 ? "postgres" : nil
        if let runAs, getpwnam(runAs) == nil {
            throw StratusError(.internalError, "running as root needs the '\(runAs)' account to own the embedded PostgreSQL cluster; install Debian's postgresql package, or run as another user")
        }

        var data = state + "/pg"
        if let runAs {
            if !fileManager.fileExists(atPath: data) { try fileManager.createDirectory(atPath: data, withIntermediateDirectories: true) }
            try chown(data, to: runAs)
            if !canAccess(data, as: runAs) {
                let fallbackRoot = fileManager.fileExists(atPath: "/var/lib/postgresql") ? "/var/lib/postgresql/stratus" : NSTemporaryDirectory() + "stratus-postgres"
                let fallback = fallbackRoot + "/" + stableName(for: state)
                try? fileManager.removeItem(atPath: data)
                try fileManager.createDirectory(atPath: fallback, withIntermediateDirectories: true)
                try chown(fallbackRoot, to: runAs)
                try chown(fallback, to: runAs)
                logger.notice("the postgres account cannot enter the data folder; the embedded PostgreSQL cluster lives elsewhere",
                              metadata: ["stratus.requested": "\(data)", "stratus.cluster": "\(fallback)"])
                data = fallback
            }
        }

        let passwordFile = state + "/postgres-password"
        let password: String
        if let existing = try? String(contentsOfFile: passwordFile, encoding: .utf8), !existing.isEmpty,
           fileManager.fileExists(atPath: data + "/PG_VERSION") {
            password = existing.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            password = randomHex(24)
            try password.write(toFile: passwordFile, atomically: true, encoding: .utf8)
            chmod(passwordFile, 0o600)
        }

        let cluster = EmbeddedPostgres(dataDirectory: data, stateDirectory: state, port: 0, password: password,
                                       binDirectory: bin, runAsUser: runAs, logger: logger)
        if !fileManager.fileExists(atPath: data + "/PG_VERSION") {
            try cluster.initialize()
        }
        if let running = cluster.runningPort() {
            logger.info("adopting the embedded PostgreSQL already running", metadata: ["stratus.cluster": "\(data)", "stratus.port": "\(running)"])
            return EmbeddedPostgres(dataDirectory: data, stateDirectory: state, port: running, password: password,
                                    binDirectory: bin, runAsUser: runAs, logger: logger, adopted: true)
        }
        let port = try freePort()
        let started = EmbeddedPostgres(dataDirectory: data, stateDirectory: state, port: port, password: password,
                                       binDirectory: bin, runAsUser: runAs, logger: logger)
        try started.launch(maximumConnections: maximumConnections)
        logger.info("embedded PostgreSQL started", metadata: ["stratus.cluster": "\(data)", "stratus.port": "\(port)"])
        return started
    }

    /// Stops the cluster unless it was running before `start` (another process's).
    public func stopIfStarted() {
        if !adopted { stop() }
    }

    /// Stops the cluster (fast shutdown: open transactions roll back, committed data stays).
    public func stop() {
        _ = try? run([binDirectory + "/pg_ctl", "stop", "-D", dataDirectory, "-m", "fast", "-w", "-t", "30"])
        logger.info("embedded PostgreSQL stopped", metadata: ["stratus.cluster": "\(dataDirectory)"])
    }

    private func initialize() throws {
        let pwfile = dataDirectory + ".pwfile"
        try password.write(toFile: pwfile, atomically: true, encoding: .utf8)
        if let runAsUser { try Self.chown(pwfile, to: runAsUser) }
        chmod(pwfile, 0o600)
        defer { try? FileManager.default.removeItem(atPath: pwfile) }
        let output = try run([binDirectory + "/initdb", "-D", dataDirectory, "-U", Self.username, "--auth=scram-sha-256",
                              "--pwfile=" + pwfile, "-E", "UTF8", "--locale=C"])
        guard output.status == 0 else {
            throw StratusError(.internalError, "initdb failed: \(output.text.suffix(800))")
        }
    }

    private func launch(maximumConnections: Int) throws {
        let options = "-c listen_addresses=127.0.0.1 -p \(port) -c unix_socket_directories='' -c max_connections=\(maximumConnections) -c shared_buffers=256MB -c max_wal_size=2GB"
        let output = try run([binDirectory + "/pg_ctl", "start", "-D", dataDirectory, "-w", "-t", "60", "-l", dataDirectory + "/server.log", "-o", options])
        guard output.status == 0 else {
            let log = (try? String(contentsOfFile: dataDirectory + "/server.log", encoding: .utf8)) ?? ""
            throw StratusError(.internalError, "pg_ctl start failed: \(output.text.suffix(400)) \(log.suffix(800))")
        }
    }

    /// The port of a postmaster already running on this data folder, if any.
    private func runningPort() -> Int? {
        guard let status = try? run([binDirectory + "/pg_ctl", "status", "-D", dataDirectory]), status.status == 0 else { return nil }
        guard let pidFile = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8) else { return nil }
        let lines = pidFile.split(separator: "\n", omittingEmptySubsequences: false)
        guard lines.count > 3 else { return nil }
        return Int(lines[3].trimmingCharacters(in: .whitespaces))
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, text: String) {
        let full = runAsUser.map { ["/usr/sbin/runuser", "-u", $0, "--"] + arguments } ?? arguments
        let output = try Subprocess.run(full)
        return (output.status, output.text)
    }

    /// The newest `…/postgresql/NN/bin` with `initdb`, or the folder of `initdb` on PATH.
    static func findBinDirectory() -> String? {
        let fileManager = FileManager.default
        if let versions = try? fileManager.contentsOfDirectory(atPath: "/usr/lib/postgresql") {
            for version in versions.sorted(by: { (Int($0) ?? 0) > (Int($1) ?? 0) }) {
                let bin = "/usr/lib/postgresql/\(version)/bin"
                if fileManager.isExecutableFile(atPath: bin + "/initdb"), fileManager.isExecutableFile(atPath: bin + "/pg_ctl") { return bin }
            }
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
            let bin = String(directory)
            if fileManager.isExecutableFile(atPath: bin + "/initdb"), fileManager.isExecutableFile(atPath: bin + "/pg_ctl") { return bin }
        }
        return nil
    }

    static func canAccess(_ path: String, as user: String) -> Bool {
        (try? Subprocess.run(["/usr/sbin/runuser", "-u", user, "--", "/usr/bin/test", "-w", path, "-a", "-x", path]).status) == 0
    }

    static func chown(_ path: String, to user: String) throws {
        guard let entry = getpwnam(user) else { throw StratusError(.internalError, "no account named \(user)") }
        if Foundation.chown(path, entry.pointee.pw_uid, entry.pointee.pw_gid) != 0 {
            throw StratusError(.internalError, "could not give \(path) to \(user) (errno \(errno))")
        }
        chmod(path, 0o700)
    }

    static func stableName(for path: String) -> String { FNV1a.hex(path) }

    static func randomHex(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// A TCP port on 127.0.0.1 that is free right now.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw StratusError(.internalError, "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw StratusError(.internalError, "bind() failed") }
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { throw StratusError(.internalError, "getsockname() failed") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
