import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// Who runs the CLI, `user@host`: recorded by the commands that work on the database directly
/// (`stratus container import`); the management API records the authenticated operator instead.
func operatorName() -> String {
    "\(ProcessInfo.processInfo.environment["USER"] ?? ProcessInfo.processInfo.userName)@\(ProcessInfo.processInfo.hostName)"
}

/// Asks a yes/no question on the terminal; without a terminal the answer is no.
func confirm(_ question: String) -> Bool {
    guard isatty(STDIN_FILENO) != 0 else {
        printError("\(question) — no terminal to ask on; pass --yes to confirm")
        return false
    }
    FileHandle.standardError.write(Data("\(question) [y/N] ".utf8))
    let answer = readLine()?.trimmingCharacters(in: .whitespaces).lowercased()
    return answer == "y" || answer == "yes"
}

struct SchemaCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "schema",
        abstract: "Export, import, validate, diff, deploy, reset and audit schemas (CloudKit's .ckdb language).",
        discussion: Help.text("""
            Development creates types and fields just-in-time; production changes only by deploy, and only
            additively (no removed types or fields, no changed field types).

              stratus schema export --container C --environment production > prod.ckdb
              stratus schema validate --file schema.ckdb
              stratus schema import --container C --file schema.ckdb
              stratus schema diff --container C
              stratus schema deploy --container C [--dry-run] [--yes]
              stratus schema history --container C --environment production
              stratus schema reset --container C
            """),
        subcommands: [Export.self, Import.self, Validate.self, Diff.self, Deploy.self, History.self, Reset.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print an environment's schema as .ckdb text.")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment = "development"
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(container)/schema?environment=\(environment)")
                options.output(response) { response["schema"]?.stringValue ?? "" }
            }
        }
    }

    struct Validate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Check a .ckdb file offline; errors name the line and column.")
        @Option(help: "The .ckdb file.") var file: String
        @Flag(help: "Print one JSON document instead of text.") var json = false

        func run() async throws {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                printError("cannot read \(file)")
                throw ExitCode.failure
            }
            do {
                let schema = try SchemaLanguage.parse(text)
                print(json ? JSONWriter.string(["valid": true, "recordTypes": .int(Int64(schema.recordTypes.count)), "roles": .int(Int64(schema.roles.count))])
                      : "\(file): valid (\(schema.recordTypes.count) record types, \(schema.roles.count) custom roles)")
            } catch {
                if json { print(JSONWriter.string(["valid": false, "line": .int(Int64(error.line)), "column": .int(Int64(error.column)), "message": .string(error.message)])) }
                printError("\(file):\(error.line):\(error.column): \(error.message)")
                throw ExitCode.failure
            }
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Replace the development schema with a .ckdb file (shows what changes, asks first).")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "The .ckdb file.") var file: String
        @Flag(help: "Apply without asking.") var yes = false
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { throw CLIError("cannot read \(file)") }
                do throws(SchemaLanguage.Failure) { _ = try SchemaLanguage.parse(text) } catch { throw CLIError("\(file):\(error.line):\(error.column): \(error.message)") }
                let client = try options.client
                let path = "management/1/containers/\(container)/schema/import"
                let preview = try await client.send("POST", path, body: ["schema": .string(text), "dryRun": true])
                if !options.json { print("Import into \(container) development:\n\(preview["planText"]?.stringValue ?? "")") }
                guard preview["plan"]?.arrayValue?.isEmpty == false else {
                    options.output(preview) { "nothing to import: development already matches \(file)" }
                    return
                }
                guard yes || confirm("Replace the development schema?") else { throw CLIError("import cancelled; nothing changed") }
                let applied = try await client.send("POST", path, body: ["schema": .string(text)])
                options.output(applied) { "development schema replaced (version \(applied["version"].map { JSONWriter.string($0) } ?? "?"))" }
            }
        }
    }

    struct Diff: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show what deploying development to production would change (same format as the deploy plan).")
        @Option(help: "Container identifier.") var container: String
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(container)/schema/diff")
                options.output(response) { "development → production for \(container):\n\(response["planText"]?.stringValue ?? "")" }
                if case .int(let refused)? = response["refused"], refused > 0 { throw ExitCode.failure }
            }
        }
    }

    struct Deploy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Promote the development schema to production: prints the plan, asks, applies it in one transaction, then builds new indexes over existing production records.",
            discussion: "Refused changes (removed types or fields, changed field types) stop the deploy with a non-zero exit. An interrupted index build resumes when you run deploy again.")
        @Option(help: "Container identifier.") var container: String
        @Flag(name: .customLong("dry-run"), help: "Print the plan and change nothing.") var dryRun = false
        @Flag(help: "Apply without asking.") var yes = false
        @Option(help: "Records per index-build step.") var batch = 5000
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let client = try options.client
                let base = "management/1/containers/\(container)/schema"
                let plan = try await client.send("GET", base + "/diff")
                // A refused deploy says what is refused, not the plan it will not apply.
                if case .int(let refused)? = plan["refused"], refused > 0 {
                    if options.json { print(JSONWriter.string(plan)) }
                    let lines = (plan["plan"]?.arrayValue ?? []).filter { $0["refused"] == true }
                        .map { "  \($0["kind"]?.stringValue ?? ""): \($0["detail"]?.stringValue ?? "")" }
                    throw CLIError("deploy refused: production is additive only, and \(refused) change\(refused == 1 ? " is" : "s are") not; production is unchanged. "
                                   + "Put \(refused == 1 ? "it" : "them") back in development ('stratus schema import'), then deploy:\n" + lines.joined(separator: "\n"))
                }
                if !options.json { print("Deploy plan for \(container), development → production:\n\(plan["planText"]?.stringValue ?? "")") }
                var result = plan
                if dryRun {
                    if options.json { print(JSONWriter.string(plan)) } else { print("dry run: nothing changed") }
                    return
                }
                if plan["plan"]?.arrayValue?.isEmpty == false {
                    guard yes || confirm("Apply these changes to production?") else { throw CLIError("deploy cancelled; production is unchanged") }
                    result = try await client.send("POST", base + "/deploy", body: [:])
                    if !options.json { print("deployed: production schema is now version \(result["version"].map { JSONWriter.string($0) } ?? "?")") }
                } else if !options.json {
                    print("production already matches development")
                }
                // Build (or resume building) index entries for existing production records.
                var builds: [JSON] = []
                while true {
                    let step = try await client.send("POST", base + "/indexes/build", body: ["batch": .int(Int64(batch))])
                    builds = step["builds"]?.arrayValue ?? []
                    for build in builds where build["done"] != true || !options.json {
                        if !options.json { progress(build) }
                    }
                    if step["done"] == true { break }
                }
                if !options.json, !builds.isEmpty { FileHandle.standardError.write(Data("\n".utf8)) }
                if options.json {
                    var members = result.objectValue ?? [:]
                    members["indexBuilds"] = .array(builds)
                    print(JSONWriter.string(.object(members)))
                }
            }
        }

        func progress(_ build: JSON) {
            guard case .int(let built)? = build["built"], case .int(let total)? = build["total"] else { return }
            let width = 30
            let filled = total == 0 ? width : Int(Double(built) / Double(max(total, 1)) * Double(width))
            let bar = String(repeating: "#", count: min(width, filled)) + String(repeating: "-", count: max(0, width - filled))
            let name = "\(build["recordType"]?.stringValue ?? "").\(build["field"]?.stringValue ?? "")"
            FileHandle.standardError.write(Data("\r  building index \(name) [\(bar)] \(built)/\(total) records\(build["done"] == true ? " done\n" : "")".utf8))
        }
    }

    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List deploys (production) or imports and resets (development), newest first, each with its plan.")
        @Option(help: "Container identifier.") var container: String
        @Option(help: "development or production.") var environment = "production"
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                let response = try await options.client.send("GET", "management/1/containers/\(container)/schema/history?environment=\(environment)")
                options.output(response) {
                    let entries = response["history"]?.arrayValue ?? []
                    guard !entries.isEmpty else { return "no schema changes recorded for \(container) \(environment)" }
                    return entries.map { entry in
                        "#\(entry["id"].map { JSONWriter.string($0) } ?? "") \(entry["kind"]?.stringValue ?? "") → version \(entry["version"].map { JSONWriter.string($0) } ?? "") by \(entry["by"]?.stringValue ?? "") at \(entry["at"]?.stringValue ?? "")\n\(entry["plan"]?.stringValue ?? "")"
                    }.joined(separator: "\n\n")
                }
            }
        }
    }

    struct Reset: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Reset development to the production schema and delete all development data (asks first).")
        @Option(help: "Container identifier.") var container: String
        @Flag(help: "Reset without asking.") var yes = false
        @OptionGroup var options: ClientOptions

        func run() async throws {
            try await runAdmin {
                guard yes || confirm("Delete ALL development records of \(container) and reset its development schema to production?") else {
                    throw CLIError("reset cancelled; nothing changed")
                }
                let response = try await options.client.send("POST", "management/1/containers/\(container)/schema/reset", body: ["by": .string(operatorName())])
                options.output(response) { "development reset to production (version \(response["version"].map { JSONWriter.string($0) } ?? "?")); \(response["deletedRecords"].map { JSONWriter.string($0) } ?? "0") development records deleted" }
            }
        }
    }
}
