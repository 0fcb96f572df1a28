import Foundation
import HTTPTypes
import Logging
import StratusCore
import Synchronization

/// The suite's check that no secret reaches a log line (issue 23: "no token, password or
/// signature ever appears in a log line"). Every server log of the test process (the in-process
/// servers' logger at debug level, and the logs of served binaries) goes to
/// `.build/test-output/server-logs/`; every token, password and signature a test sends or
/// receives through the harness is written to `.build/test-output/secrets-<pid>.txt`. After the
/// suite, `Deploy/test.sh` greps the logs for each secret and fails if one is found.
enum TestOutput {
    static let folder = TestCluster.repositoryRoot.appendingPathComponent(".build/test-output")
    static let logs = folder.appendingPathComponent("server-logs")

    /// Keeps a served binary's log with the others (call before its scratch folder goes).
    static func keepServerLog(_ path: String, name: String) {
        try? FileManager.default.createDirectory(at: logs, withIntermediateDirectories: true)
        let target = logs.appendingPathComponent("\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log")
        try? FileManager.default.copyItem(atPath: path, toPath: target.path)
    }
}

enum TestSecrets {
    private static let file = Mutex<FileHandle?>({
        try? FileManager.default.createDirectory(at: TestOutput.folder, withIntermediateDirectories: true)
        let path = TestOutput.folder.appendingPathComponent("secrets-\(getpid()).txt").path
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return FileHandle(forWritingAtPath: path)
    }())

    /// Notes a secret (long enough to be one; short words would match log text by chance).
    static func record(_ secret: String?) {
        guard let secret, secret.count >= 8, !secret.contains("\n") else { return }
        file.withLock { $0?.write(Data((secret + "\n").utf8)) }
    }

    /// The secrets in an outgoing request: credentials in the query string, passwords in the
    /// body, signatures and bearer tokens in the headers.
    static func scan(uri: String, body: String?, headers: HTTPFields) {
        if let query = URLComponents(string: uri)?.queryItems {
            for item in query where ["ckAPIToken", "ckWebAuthToken", "ckSession"].contains(item.name) { record(item.value) }
        }
        if let body, let json = try? JSONParser.parse(Array(body.utf8)) {
            for key in ["password", "newPassword"] { record(json[key]?.stringValue) }
        }
        for field in headers where field.name == .authorization || field.name.canonicalName.hasPrefix("x-apple-cloudkit-request-signature") {
            record(field.name == .authorization ? String(field.value.dropFirst("Bearer ".count)) : field.value)
        }
    }

    /// The secrets in an answer: new web auth tokens and API tokens.
    static func scan(answer json: JSON) {
        for key in ["ckWebAuthToken", "apiToken", "credential"] { record(json[key]?.stringValue) }
    }
}

/// Writes every log line (debug and up) to a file, for the secrets check, and those at
/// `consoleLevel` or above to standard error. (`MultiplexLogHandler` would not do: setting its
/// level sets every handler's, so the console got the debug lines too.)
struct FileLogHandler: LogHandler {
    static let handle = Mutex<FileHandle?>({
        try? FileManager.default.createDirectory(at: TestOutput.logs, withIntermediateDirectories: true)
        let path = TestOutput.logs.appendingPathComponent("tests-\(getpid()).log").path
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        return FileHandle(forWritingAtPath: path)
    }())
    let label: String
    var consoleLevel: Logger.Level
    var console: StreamLogHandler
    var logLevel: Logger.Level = .debug
    var metadata: Logger.Metadata = [:]

    init(label: String, consoleLevel: Logger.Level) {
        self.label = label
        self.consoleLevel = consoleLevel
        self.console = StreamLogHandler.standardError(label: label)
        self.console.logLevel = .trace
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
        let all = metadata.merging(explicit ?? [:]) { $1 }
        let text = "\(level) \(label): \(message) \(all.map { "\($0)=\($1)" }.sorted().joined(separator: " "))\n"
        Self.handle.withLock { $0?.write(Data(text.utf8)) }
        if level >= consoleLevel {
            var console = console
            console.metadata = metadata
            console.log(level: level, message: message, metadata: explicit, source: source, file: file, function: function, line: line)
        }
    }
}
