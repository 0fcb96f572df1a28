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
        // Every acknowledged record, read back from the surviving server.
        let lookup = servers[1] + "/database/1/iCloud.com.example.Cluster/development/private/records/lookup?" + query
        let names = acknowledged.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ",")
        let found = try await EndToEndTests.post(lookup, #"{"records":[\#(names)]}"#)
        let records: [JSON] = found.1["records"]?.arrayValue ?? []
        let missing = records.filter { $0["serverErrorCode"] != nil }
        #expect(found.0 == 200 && missing.isEmpty && found.1["records"]?.arrayValue?.count == acknowledged.count,
                "acknowledged writes missing after the kill: \(missing.prefix(5))")
        // The replica streams what the primary committed.
        let replica = try #require(settings["STRATUS_CLUSTER_REPLICA_URL"])
        var replicated = -1
        for _ in 0..<50 {
            let psql = ["psql", replica, "-Atc", "SELECT count(*) FROM records WHERE NOT deleted AND record_type = 'Note'"]
            let counted = try await Subprocess.runDetached(geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + psql : ["/usr/bin/env"] + psql)
            replicated = Int(counted.text.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
            if replicated == acknowledged.count { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(replicated == acknowledged.count, "the replica holds \(replicated) of \(acknowledged.count) records")
        print("cluster: 120 writes through the balancer, server 1 killed (SIGKILL) after 40: \(acknowledged.count) acknowledged, \(failed) failed, 0 acknowledged lost; replica caught up (\(replicated))")
    }
}
