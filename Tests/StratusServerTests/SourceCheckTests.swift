import Foundation
@testable import StratusTestSupport
import Testing

/// Checks on the tests' own source.
@Suite struct SourceCheckTests {
    /// Calls that block their thread until something outside the process happens.
    static let blocking: [(pattern: String, what: String)] = [
        (#"Subprocess\.run\("#, "waits for a child process (use Subprocess.runDetached)"),
        (#"waitUntilExit\("#, "waits for a child process"),
        (#"Thread\.sleep\("#, "sleeps the thread (use Task.sleep)"),
        (#"(?<![A-Za-z_.])u?sleep\("#, "sleeps the thread (use Task.sleep)"),
        (#"DispatchSemaphore\("#, "a semaphore waited on blocks the thread"),
        (#"\.wait\(\)"#, "waits on a thread"),
        (#"waitpid\((?![^)]*WNOHANG)"#, "waits for a child process (use Subprocess.waitForExit)"),
        (#"EmbeddedPostgres\.start\("#, "makes and starts a PostgreSQL cluster"),
        (#"cluster\.stop\(\)"#, "runs pg_ctl stop and waits"),
    ]

    /// The test process has one cooperative thread per core, two here: a test that blocks one
    /// (a child process waited for, a sleep, pg_ctl) stalls every other test's tasks queued for it,
    /// and blocking both stalls the run. Such calls belong on a thread of their own
    /// (`Subprocess.onOwnThread`, `runDetached`) or at process exit. A `defer` that waited for
    /// `cluster.sh down` with a blocking call was one such call.
    @Test func noTestBlocksACooperativeThread() throws {
        let root = TestCluster.repositoryRoot.appendingPathComponent("Tests")
        let folders = ["StratusServerTests", "StratusStoreTests", "StratusCLITests", "StratusCoreTests", "StratusBenchTests", "StratusTestSupport"]
        var found: [String] = []
        var scanned = 0
        for folder in folders {
            let base = root.appendingPathComponent(folder)
            guard let files = FileManager.default.enumerator(atPath: base.path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") && !file.hasSuffix("SourceCheckTests.swift") {
                scanned += 1
                let lines = try String(contentsOf: base.appendingPathComponent(file), encoding: .utf8).components(separatedBy: "\n")
                for (index, line) in lines.enumerated() {
                    let code = line.components(separatedBy: "//").first ?? line
                    for (pattern, what) in Self.blocking where code.range(of: pattern, options: .regularExpression) != nil {
                        // Allowed on a thread of its own, or at process exit.
                        let context = lines[max(0, index - 3)...index].joined(separator: "\n")
                        if context.contains("onOwnThread") || context.contains("Thread {") || context.contains("atexit") { continue }
                        found.append("\(folder)/\(file):\(index + 1): \(what): \(line.trimmingCharacters(in: .whitespaces))")
                    }
                }
            }
        }
        #expect(scanned > 50, "only \(scanned) test files were read")
        #expect(found.isEmpty, "blocking calls on a cooperative thread:\n\(found.joined(separator: "\n"))")
    }
}
