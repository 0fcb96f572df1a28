import Foundation
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// The built `stratus` binary's help and errors, as a person at an 80-column terminal reads
/// them: every command's help wrapped once (no prose line broken short, no example broken but
/// after a `\`), one error style on standard error with a non-zero exit, and tables aligned on a
/// terminal (tab-separated in a pipe).
@Suite struct HelpAndErrorsTests {
    static func run(_ arguments: [String]) async throws -> Subprocess.Output {
        var environment = ProcessInfo.processInfo.environment
        environment["COLUMNS"] = "80"
        environment["STRATUS_SERVER"] = "http://127.0.0.1:9"
        return try await Subprocess.runDetached([Programs.binary] + arguments, environment: environment)
    }

    /// The subcommands a help screen lists.
    static func subcommands(_ help: String) -> [String] {
        guard let section = help.components(separatedBy: "SUBCOMMANDS:\n").dropFirst().first else { return [] }
        return section.split(separator: "\n").compactMap { line in
            guard line.hasPrefix("  "), !line.hasPrefix("   ") else { return nil }
            return line.split(separator: " ").first.map(String.init).flatMap { $0 == "See" ? nil : $0 }
        }
    }

    @Test func everyHelpScreenIsWrappedOnce() async throws {
        var queue: [[String]] = [[]]
        var problems: [String] = []
        var screens = 0
        while let path = queue.popLast() {
            let help = try await Self.run(["help"] + path)
            #expect(help.status == 0, "stratus help \(path.joined(separator: " ")): \(help.text)")
            screens += 1
            queue += Self.subcommands(help.text).filter { $0 != "help" }.map { path + [$0] }
            // The part before USAGE: the abstract and discussion.
            let top = help.text.components(separatedBy: "\nUSAGE:").first ?? ""
            for paragraph in top.components(separatedBy: "\n\n") {
                let lines = paragraph.split(separator: "\n").map(String.init)
                // Runs of prose and of indented lines (examples, lists).
                var runs: [(indented: Bool, lines: [String])] = []
                for line in lines {
                    let indented = line.hasPrefix("  ")
                    if runs.last?.indented == indented { runs[runs.count - 1].lines.append(line) } else { runs.append((indented, [line])) }
                }
                for (index, run) in runs.enumerated() {
                    if run.indented {
                        // A line indented deeper only after a `\`.
                        for (position, line) in run.lines.enumerated() where line.hasPrefix("      ") && position > 0 {
                            if !run.lines[position - 1].hasSuffix("\\") && !run.lines[position - 1].hasPrefix("      ") {
                                problems.append("\(path): '\(line)' continues a line without a \\")
                            }
                        }
                    } else {
                        // Prose: each line but a run's last fills the width (a short one was broken twice); a
                        // prose line right after an example is an example the wrapper broke.
                        if index > 0, !run.lines[0].hasSuffix(":") { problems.append("\(path): '\(run.lines[0])' is an example broken by the wrapper") }
                        for line in run.lines.dropLast() where line.count < 50 {
                            problems.append("\(path): '\(line)' is a prose line broken short")
                        }
                    }
                }
                for line in lines where line.count > 80 { problems.append("\(path): '\(line)' is wider than 80 columns") }
            }
        }
        print("help: \(screens) screens read at 80 columns, \(problems.count) problems")
        #expect(screens > 40)
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }

    @Test func mistakesAreOneLineOnStandardErrorWithANonZeroExit() async throws {
        for (arguments, expected) in [
            (["help", "nonsense"], "stratus: no command 'nonsense'; 'stratus help' lists the commands"),
            (["help", "schema", "nonsense"], "stratus: no command 'schema nonsense'"),
            (["nonsense"], "stratus: Unexpected argument 'nonsense' (see 'stratus --help')"),
            (["logs", "--container", "x", "--since", "soon"], "stratus: --since must be an ISO 8601 time"),
            (["schema", "deploy"], "stratus: Missing expected argument '--container <container>' (see 'stratus schema deploy --help')"),
            // A server that cannot be reached is said so, in the same style.
            (["container", "list", "--admin-token", "t"], "stratus: "),
        ] as [([String], String)] {
            let answer = try await Self.run(arguments)
            #expect(answer.status != 0, "\(arguments): exit \(answer.status)")
            #expect(answer.text.hasPrefix(expected), "\(arguments): \(answer.text)")
            #expect(!answer.text.contains("Error: ") && !answer.text.contains("USAGE"), "\(arguments): \(answer.text)")
        }
    }

    @Test func tablesAlignOnATerminalAndStayTabSeparatedInAPipe() async throws {
        try await Harness.run(live: true) { harness in
            let server = "http://127.0.0.1:\(harness.client.port ?? 0)"
            _ = try await harness.signedInOperator("a-rather-long-name@example.com")
            _ = try await harness.signedInOperator("bo@example.com")
            let piped = try await Programs.cli(["operator", "list"], server: server, token: Harness.adminToken)
            #expect(piped.status == 0 && piped.text.contains("bo@example.com\t"), "\(piped.text)")
            // On a terminal (script(1) gives the command one): the columns line up, no tabs.
            var environment = ProcessInfo.processInfo.environment
            environment["STRATUS_SERVER"] = server
            environment["STRATUS_ADMIN_TOKEN"] = Harness.adminToken
            let shown = try await Subprocess.runDetached(["/usr/bin/script", "-qec", "\(Programs.binary) operator list", "/dev/null"], environment: environment)
            let lines = shown.text.replacingOccurrences(of: "\r", with: "").split(separator: "\n").map(String.init)
            let rows = lines.filter { $0.contains("@example.com") }
            #expect(rows.count >= 2 && !shown.text.contains("\t"), "\(shown.text)")
            // Each row's second column starts at the same place as the header's.
            let header = try #require(lines.first)
            let second = try #require(header.range(of: "  ", options: [])?.upperBound).utf16Offset(in: header)
            let column = header.dropFirst(second).prefix { $0 == " " }.count + second
            for row in rows {
                let index = row.index(row.startIndex, offsetBy: column)
                #expect(row[row.index(before: index)] == " " && row[index] != " ", "\(header)\n\(row)")
            }
        }
    }
}
