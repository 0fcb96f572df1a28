import Foundation

/// Runs a program to completion with `posix_spawn` and `waitpid`, capturing its output in a
/// temporary file. (Foundation's `Process.waitUntilExit` can hang when called from Swift
/// concurrency's threads on Linux.)
public enum Subprocess {
    public struct Output {
        public var status: Int32
        public var text: String
    }

    public static func run(_ arguments: [String]) throws -> Output {
        let outputPath = NSTemporaryDirectory() + "stratus-cmd-\(getpid())-\(UInt64.random(in: 0...UInt64.max)).log"
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) }
        argv.append(nil)
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, arguments[0], &actions, nil, argv, environ)
        guard spawned == 0 else {
            return Output(status: 127, text: "could not start \(arguments[0]): \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = (status & 0x7f) == 0
        return Output(status: exited ? (status >> 8) & 0xff : 128 + (status & 0x7f), text: text)
    }
}
