import Foundation
@testable import StratusTestSupport
import Testing

/// The operator's files in `Deploy/` stay true to the code: every `STRATUS_…` variable the
/// server or CLI reads is documented in the env-file example and the README, and the image and
/// unit keep what the issue asks of them (Docker and systemd are not on this machine to run them;
/// `Deploy/cluster.sh`, their loopback twin, is run by `ClusterTests`).
@Suite struct DeployFilesTests {
    static let root = TestCluster.repositoryRoot

    static func text(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The `STRATUS_…` names the sources read (string literals).
    static func variablesRead() throws -> Set<String> {
        var names: Set<String> = []
        let sources = root.appendingPathComponent("Sources")
        let files = FileManager.default.enumerator(atPath: sources.path)?.allObjects.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") } ?? []
        let pattern = try Regex(#""(STRATUS_[A-Z0-9_]+)""#)
        for file in files {
            let source = try String(contentsOf: sources.appendingPathComponent(file), encoding: .utf8)
            for match in source.matches(of: pattern) {
                if let name = match.output[1].substring { names.insert(String(name)) }
            }
        }
        return names
    }

    @Test func everyVariableIsDocumented() throws {
        let variables = try Self.variablesRead()
        #expect(variables.count >= 20, "found only \(variables.sorted())")
        let example = try Self.text("Deploy/stratus.env.example")
        let readme = try Self.text("README.md")
        let undocumented = variables.filter { !example.contains($0 + "=") }
        #expect(undocumented.isEmpty, "Deploy/stratus.env.example does not document \(undocumented.sorted())")
        let unlisted = variables.filter { !readme.contains("`\($0)`") }
        #expect(unlisted.isEmpty, "the README's variable table lacks \(unlisted.sorted())")
    }

    @Test func imageAndUnitKeepTheirPromises() throws {
        let dockerfile = try Self.text("Deploy/Dockerfile")
        #expect(dockerfile.split(separator: "\n").filter { $0.hasPrefix("FROM ") }.count >= 2, "Deploy/Dockerfile is not a multi-stage build")
        for promise in ["--static-swift-stdlib", "\nUSER stratus", "HEALTHCHECK", "/health"] {
            #expect(dockerfile.contains(promise), "Deploy/Dockerfile lacks \(promise)")
        }
        // The image's binary is built as `Deploy/run.sh` builds one (`build_release` in Deploy/lib.sh).
        let lib = try Self.text("Deploy/lib.sh")
        let build = try #require(lib.range(of: "build_release() {").map { lib[$0.upperBound...].prefix { $0 != "}" } },
                                 "Deploy/lib.sh has no build_release")
        let words = build.split(whereSeparator: \.isWhitespace)
        let flags = zip(words, words.dropFirst()).filter { $0.0 == "-Xswiftc" }.map { "-Xswiftc \($0.1)" }
        #expect(!flags.isEmpty, "build_release passes no compiler flags")
        let imageBuild = try #require(dockerfile.split(separator: "\n").first { $0.contains("swift build -c release") })
        for flag in flags {
            #expect(imageBuild.contains(flag), "Deploy/Dockerfile builds without \(flag), which build_release passes")
        }
        let unit = try Self.text("Deploy/stratus.service")
        for option in ["User=stratus", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes", "CapabilityBoundingSet=",
                       "RestrictAddressFamilies=", "SystemCallFilter=", "EnvironmentFile="] {
            #expect(unit.contains(option), "Deploy/stratus.service lacks \(option)")
        }
        let compose = try Self.text("Deploy/compose.yaml")
        for service in ["postgres:", "replica:", "stratus-1:", "stratus-2:", "lb:"] {
            #expect(compose.contains("\n  " + service), "Deploy/compose.yaml has no service \(service)")
        }
    }
}
