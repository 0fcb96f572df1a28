import Foundation

/// Runs a program to completion with `posix_spawn` and `waitpid`, capturing its output in a
/// temporary file. (Foundation's `Process.waitUntilExit` can hang when called from Swift
/// concurrency's threads on Linux.)
public enum Subprocess {
    public struct Output: Sendable {
        public var status: Int32
        public var text: String
    }

    public static func run(_ arguments: [String], environment: [String: String]? = nil) throws -> Output {
        let outputPath = NSTemporaryDirectory() + "stratus-cmd-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).log"
        defer { unlink(outputPath) }
        let pid = try spawn(arguments, outputPath: outputPath, environment: environment)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = (status & 0x7f) == 0
        return Output(status: exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), text: text)
    }

    /// Runs a program on a thread of its own, so waiting for it never blocks Swift concurrency's
    /// shared threads (a server in the same process keeps answering it).
    public static func runDetached(_ arguments: [String], environment: [String: String]? = nil) async throws -> Output {
        try await onOwnThread { try run(arguments, environment: environment) }
    }

    /// Runs blocking work (a child process, `pg_ctl`) on a thread of its own. Swift concurrency
    /// has one shared thread per core; blocking one stalls every task queued for it, and blocking
    /// them all stalls the process, including anything the blocking work itself waits for.
    public static func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try work() })
            }
            thread.start()
        }
    }

    /// Kills a started program (SIGKILL) and reaps it on a thread of its own: callable from a
    /// `defer` in async code without waiting there.
    public static func killAndReap(_ pid: pid_t) {
        kill(pid, SIGKILL)
        Thread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        }.start()
    }

    /// Waits up to `limit` for a started program to exit, without blocking a thread; its wait
    /// status, or `nil` if it is still running.
    public static func waitForExit(_ pid: pid_t, within limit: Duration) async throws -> Int32? {
        let deadline = ContinuousClock.now + limit
        var status: Int32 = 0
        repeat {
            if waitpid(pid, &status, WNOHANG) == pid { return status }
            try await Task.sleep(for: .milliseconds(50))
        } while ContinuousClock.now < deadline
        return nil
    }

    /// Starts a program without waiting for it; its standard output and error go to `outputPath`.
    public static func spawn(_ arguments: [String], outputPath: String, environment: [String: String]? = nil) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Nothing else of this process's: NIO opens its sockets without close-on-exec, so a child
        // inherited every open connection, and a connection the server closed stayed open for as
        // long as the child ran (its client never saw the end).
        _ = closeFrom?(&actions, 3)
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        var spawned: Int32
        if let environment {
            var envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") }
            envp.append(nil)
            defer { for pointer in envp { free(pointer) } }
            spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        } else {
            spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, environ)
        }
        guard spawned == 0 else {
            throw SpawnError(message: "could not start \(arguments[0]): \(String(cString: strerror(spawned)))")
        }
        return pid
    }

    /// Whether started programs get none of this process's open descriptors but their standard
    /// ones: false on a C library without `posix_spawn_file_actions_addclosefrom_np` (glibc
    /// before 2.34), where a child keeps copies of the server's open connections while it runs
    /// (`stratus serve` warns at start).
    public static var closesInheritedDescriptors: Bool { closeFrom != nil }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc
    /// module does not declare; `nil` where the C library lacks it.
    private static let closeFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    struct SpawnError: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }
}
