import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import StratusCore
import StratusStore
import Testing

/// `Deploy/cluster.sh` (issue 28): the compose topology on loopback — PostgreSQL primary and
/// streaming replica, two `stratus serve`, HAProxy in front — comes up, serves through the load
/// balancer, loses no acknowledged write when one server is killed, and goes down cleanly.
@Suite(.timeLimit(.minutes(10))) struct ClusterTests {
    /// A base port with the eleven after it free (the script takes P…P+2 and P+10, P+11).
    static func freeBase() -> Int {
        while true {
            let base = Int.random(in: 20_000...50_000)
            if [0, 1, 2, 10, 11].allSatisfy({ portIsFree(base + $0) }) { return base }
        }
    }

    static func portIsFree(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    static func script(_ arguments: [String]) async throws -> Subprocess.Output {
        try await Subprocess.runDetached([TestCluster.repositoryRoot.appendingPathComponent("Deploy/cluster.sh").path] + arguments)
    }

    /// A POST that answers nil when the connection fails (a killed server's request).
    static func tryPost(_ url: String, _ body: String, headers: [String: String] = [:]) async -> (Int, JSON)? {
        try? await EndToEndTests.post(url, body, headers: headers)
    }

    /// What the writers saw while PostgreSQL restarted.
    actor Tally {
        var acknowledged: [String] = []
        var errors: [String] = []
        var retryLater = 0
        var unreachable = 0
        var restartedAt: Duration?
        var successesAfterRestart = 0

        func note(_ name: String, _ answer: (Int, JSON)?, at time: Duration) {
            guard let (status, json) = answer else { unreachable += 1; return }
            let item = json["records"]?.arrayValue?.first
            if status == 200, item?["serverErrorCode"] == nil {
                acknowledged.append(name)
                if let restartedAt, time > restartedAt { successesAfterRestart += 1 }
            } else if (json["serverErrorCode"] ?? item?["serverErrorCode"]) == "TRY_AGAIN_LATER", status == 503 || status == 200,
                      (json["retryAfter"] ?? item?["retryAfter"]) != nil {
                retryLater += 1
            } else {
                errors.append("\(status) \(json)")
            }
        }

        func restarted(at time: Duration) { restartedAt = time }

        func snapshot() -> (acknowledged: [String], errors: [String], retryLater: Int, unreachable: Int, restartedAt: Duration?, recoveredAfterRestart: Bool) {
            (acknowledged, errors, retryLater, unreachable, restartedAt, successesAfterRestart > 0)
        }
    }

    @Test func twoServersBehindTheBalancerLoseNoAcknowledgedWriteWhenOneIsKilled() async throws {
        let folder = try EndToEndTests.scratchFolder("cluster")
        let base = Self.freeBase()
        let up = try await Self.script(["up", "--dir", folder + "/c", "--port", String(base), "--bin", EndToEndTests.binary])
        defer {
            let down = try? Subprocess.run([TestCluster.repositoryRoot.appendingPathComponent("Deploy/cluster.sh").path, "down", "--dir", folder + "/c"])
            if down?.status != 0 { print("cluster.sh down: \(down?.text ?? "")") }
            try? FileManager.default.removeItem(atPath: folder)
        }
        try #require(up.status == 0, "cluster.sh up failed: \(up.text.suffix(3000))")
        var settings: [String: String] = [:]
        for line in up.text.split(separator: "\n") where line.hasPrefix("STRATUS_") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { settings[String(parts[0])] = String(parts[1]) }
        }
        let lb = try #require(settings["STRATUS_CLUSTER_URL"], "\(up.text)")
        let admin = try #require(settings["STRATUS_ADMIN_TOKEN"])
        TestSecrets.record(admin)
        let servers = [settings["STRATUS_CLUSTER_SERVER_1"] ?? "", settings["STRATUS_CLUSTER_SERVER_2"] ?? ""]
        let firstPID = try #require(settings["STRATUS_CLUSTER_PID_1"].flatMap { pid_t($0) })

        let tenant = try await serveTenant(lb, adminToken: admin, container: "iCloud.com.example.Cluster")
        let query = "ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)"
        let modify = lb + "/database/1/iCloud.com.example.Cluster/development/private/records/modify?" + query
        // Writes through the balancer (round robin over both servers), then one server killed
        // part-way: every write the service acknowledged must be there afterwards.
        var acknowledged: [String] = []
        var failed = 0
        for index in 0..<120 {
            if index == 40 { kill(firstPID, SIGKILL) }
            let name = "r\(index)"
            let body = #"{"operations":[{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Note","fields":{"n":{"value":\#(index)}}}}]}"#
            if let (status, json) = await Self.tryPost(modify, body), status == 200,
               json["records"]?.arrayValue?.first?["serverErrorCode"] == nil {
                acknowledged.append(name)
            } else {
                failed += 1
            }
        }
        // HAProxy takes the killed server out after two failed health checks (1 s apart): only
        // requests in that window may fail.
        #expect(acknowledged.count >= 100, "only \(acknowledged.count) of 120 writes acknowledged")
        let afterKill = acknowledged.count

        // Then PostgreSQL restarts under load (four writers and a reader for 10 s, the restart at
        // 2 s): requests in the outage fail with TRY_AGAIN_LATER and a retry hint, none with a
        // 500, and the service recovers by itself.
        let pgBin = try #require(try FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql").sorted().last.map { "/usr/lib/postgresql/\($0)/bin" })
        let primary = folder + "/c/postgres/primary"
        let tally = Tally()
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var index = 0
                    while ContinuousClock.now - started < .seconds(10) {
                        let name = "w\(writer)-\(index)"
                        index += 1
                        let body = #"{"operations":[{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Note","fields":{"n":{"value":1}}}}]}"#
                        let answer = await Self.tryPost(modify, body)
                        await tally.note(name, answer, at: ContinuousClock.now - started)
                        if answer?.0 != 200 { try await Task.sleep(for: .milliseconds(100)) }
                    }
                }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(2))
                let psqlUser = geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
                let restart = try await Subprocess.runDetached(psqlUser + [pgBin + "/pg_ctl", "-D", primary, "-m", "fast", "-w", "restart"])
                #expect(restart.status == 0, "pg_ctl restart: \(restart.text)")
                await tally.restarted(at: ContinuousClock.now - started)
            }
            try await group.waitForAll()
        }
        let outcome = await tally.snapshot()
        #expect(outcome.errors.isEmpty, "answers other than success or TRY_AGAIN_LATER with a retry hint: \(outcome.errors.prefix(5))")
        #expect(outcome.recoveredAfterRestart, "no write succeeded after PostgreSQL came back (restart at \(outcome.restartedAt.map { "\($0)" } ?? "?"))")
        acknowledged += outcome.acknowledged
        // Every acknowledged record, read back from the surviving server.
        let lookup = servers[1] + "/database/1/iCloud.com.example.Cluster/development/private/records/lookup?" + query
        var missing: [String] = []
        var checked = 0
        for start in stride(from: 0, to: acknowledged.count, by: 200) {
            let chunk = acknowledged[start..<min(start + 200, acknowledged.count)]
            let names = chunk.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ",")
            let found = try await EndToEndTests.post(lookup, #"{"records":[\#(names)]}"#)
            #expect(found.0 == 200, "\(found.1)")
            for record in found.1["records"]?.arrayValue ?? [] {
                checked += 1
                if record["serverErrorCode"] != nil { missing.append(record["recordName"]?.stringValue ?? "?") }
            }
        }
        #expect(checked == acknowledged.count && missing.isEmpty, "acknowledged writes missing: \(missing.prefix(10)) (\(checked) of \(acknowledged.count) read back)")
        // The replica streams what the primary committed.
        let replica = try #require(settings["STRATUS_CLUSTER_REPLICA_URL"])
        var replicated = -1
        for _ in 0..<200 {
            let psql = ["psql", replica, "-Atc", "SELECT count(*) FROM records WHERE NOT deleted AND record_type = 'Note'"]
            let counted = try await Subprocess.runDetached(geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + psql : ["/usr/bin/env"] + psql)
            replicated = Int(counted.text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            if replicated == acknowledged.count { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(replicated == acknowledged.count, "the replica holds \(replicated) of \(acknowledged.count) records")
        print("cluster: 120 writes through the balancer, server 1 killed (SIGKILL) after 40: \(afterKill) acknowledged, \(failed) failed; "
              + "then PostgreSQL restarted under 4 writers: \(outcome.acknowledged.count) acknowledged, \(outcome.retryLater) TRY_AGAIN_LATER, \(outcome.unreachable) connection failures; "
              + "0 of \(acknowledged.count) acknowledged writes lost; replica caught up (\(replicated))")
    }
}
