import Foundation
@testable import StratusTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@testable import StratusCore
import StratusStore
import Testing

/// `Deploy/cluster.sh` (issue 28): the compose topology on loopback — PostgreSQL primary and
/// streaming replica, two `stratus serve`, HAProxy in front — comes up, serves through the load
/// balancer, loses no acknowledged write when one server is killed, and goes down cleanly.
@Suite(.serialized, .timeLimit(.minutes(TestTime.minutes(10)))) struct ClusterTests {
    /// A base port with the eleven after it free (the script takes P…P+2 and P+10, P+11). The
    /// suite runs its tests one at a time: two clusters coming up at once could pick overlapping ports.
    static func freeBase() -> Int {
        while true {
            // Below Linux's ephemeral ports (32768 and up), which the other tests' servers take.
            let base = Int.random(in: 2_000...3_190) * 10
            if [0, 1, 2, 10, 11, 20].allSatisfy({ portIsFree(base + $0) }) { return base }
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
        try? await Programs.post(url, body, headers: headers)
    }

    /// What the writers saw while PostgreSQL restarted.
    actor Tally {
        var acknowledged: [String] = []
        var errors: [String] = []
        var retryLater = 0
        var unreachable = 0
        var restartedAt: Duration?
        var lastSuccess: Duration?

        func note(_ name: String, _ answer: (Int, JSON)?, at time: Duration) {
            guard let (status, json) = answer else { unreachable += 1; return }
            let item = json["records"]?.arrayValue?.first
            if status == 200, item?["serverErrorCode"] == nil {
                acknowledged.append(name)
                lastSuccess = max(lastSuccess ?? time, time)
            } else if (json["serverErrorCode"] ?? item?["serverErrorCode"]) == "TRY_AGAIN_LATER", status == 503 || status == 200,
                      (json["retryAfter"] ?? item?["retryAfter"]) != nil {
                retryLater += 1
            } else {
                errors.append("\(status) \(json)")
            }
        }

        func restarted(at time: Duration) { restartedAt = time }

        func snapshot() -> (acknowledged: [String], errors: [String], retryLater: Int, unreachable: Int, restartedAt: Duration?, recoveredAfterRestart: Bool) {
            // Recovered: a write succeeded after the last restart had finished.
            (acknowledged, errors, retryLater, unreachable, restartedAt, lastSuccess.map { last in restartedAt.map { last > $0 } ?? false } ?? false)
        }
    }

    /// Brings a cluster up in a scratch folder, runs `body` with what `up` printed, and takes it down.
    static func withCluster(tls: Bool = false, prometheus: Bool = false, _ body: (_ settings: [String: String], _ folder: String) async throws -> Void) async throws {
        let folder = try Programs.scratchFolder("cluster")
        let base = Self.freeBase()
        let up = try await Self.script(["up", "--dir", folder + "/c", "--port", String(base), "--bin", Programs.binary] + (tls ? ["--tls"] : [])
                                    + (prometheus ? ["--with-prometheus"] : []))
        // Taken down after the body, awaited on a thread of its own: `cluster.sh down` waits for
        // servers to stop, and a blocking wait in a `defer` held one of the test process's two
        // cooperative threads for as long (`SourceChecks` refuses blocking calls in tests).
        let outcome: Result<Void, any Error>
        do {
            try #require(up.status == 0, "cluster.sh up failed: \(up.text.suffix(3000))")
            var settings: [String: String] = [:]
            for line in up.text.split(separator: "\n") where line.hasPrefix("STRATUS_") {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2 { settings[String(parts[0])] = String(parts[1]) }
            }
            if let admin = settings["STRATUS_ADMIN_TOKEN"] { TestSecrets.record(admin) }
            try await body(settings, folder)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        let down = try? await Subprocess.runDetached([TestCluster.repositoryRoot.appendingPathComponent("Deploy/cluster.sh").path, "down", "--dir", folder + "/c"])
        if down?.status != 0 { print("cluster.sh down: \(down?.text ?? "")") }
        try? FileManager.default.removeItem(atPath: folder)
        try outcome.get()
    }

    /// Runs SQL on a cluster's PostgreSQL server (as the `postgres` account when root).
    static func psql(_ url: String, _ sql: String) async throws -> String {
        let psql = ["psql", url, "-Atc", sql]
        let command = geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] + psql : ["/usr/bin/env"] + psql
        var output = try await Subprocess.runDetached(command)
        // A query on the replica can still be cancelled by replay ("conflict with recovery"): ask again.
        for _ in 0..<3 where output.status != 0 && output.text.contains("conflict with recovery") {
            output = try await Subprocess.runDetached(command)
        }
        #expect(output.status == 0, "psql: \(output.text)")
        return output.text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// `cluster.sh up --tls`: HAProxy terminates TLS with a certificate from the cluster's
    /// throwaway authority, and the servers behind it, trusting it (`--trusted-proxies`), see the
    /// client's own address: a management call made from 127.0.0.5 is audited as from 127.0.0.5,
    /// not from the balancer. A client that does not trust the authority is refused. The primary
    /// and the replica speak TLS as well, and the servers verify them (`sslmode=verify-full`).
    @Test func theBalancerServesHTTPSAndPassesOnTheClientsAddress() async throws {
        try await Self.withCluster(tls: true, prometheus: true) { settings, _ in
            let lb = try #require(settings["STRATUS_CLUSTER_URL"])
            let ca = try #require(settings["STRATUS_CLUSTER_CA"])
            let admin = try #require(settings["STRATUS_ADMIN_TOKEN"])
            #expect(lb.hasPrefix("https://localhost:"), "\(lb)")
            func curl(_ arguments: [String]) async throws -> Subprocess.Output {
                try await Subprocess.runDetached(["/usr/bin/env", "curl", "-sS", "--max-time", "20"] + arguments)
            }
            let health = try await curl(["-i", "--cacert", ca, lb + "/health"])
            #expect(health.status == 0 && health.text.contains(" 200 ") && health.text.lowercased().contains("strict-transport-security: max-age="), "\(health.text)")
            let untrusted = try await curl([lb + "/health"])
            #expect(untrusted.status == 60, "a client without the authority: \(untrusted.text)")
            let created = try await curl(["--interface", "127.0.0.5", "--cacert", ca, "-H", "Authorization: Bearer \(admin)", "-H", "Content-Type: application/json",
                                          "--data", #"{"name":"iCloud.com.example.Forwarded"}"#, lb + "/management/1/containers"])
            #expect(created.status == 0 && created.text.contains("iCloud.com.example.Forwarded"), "\(created.text)")
            let audit = try await curl(["--cacert", ca, "-H", "Authorization: Bearer \(admin)", lb + "/management/1/containers/iCloud.com.example.Forwarded/audit"])
            let entries = try JSONParser.parse(Array(audit.text.utf8))["entries"]?.arrayValue ?? []
            let addresses = Set(entries.compactMap { $0["address"]?.stringValue })
            #expect(addresses == ["127.0.0.5"], "audited from \(addresses): \(audit.text.prefix(600))")
            // The servers reach the primary and the replica over TLS, verifying their certificate
            // (sslmode=verify-full against the cluster's authority): every client connection on
            // each is encrypted, the servers' pools among them.
            for key in ["STRATUS_CLUSTER_PRIMARY_URL", "STRATUS_CLUSTER_REPLICA_URL"] {
                let url = try #require(settings[key])
                #expect(url.contains("sslmode=verify-full&sslrootcert="), "\(key)=\(url)")
                let counts = try await Self.psql(url, """
                    SELECT count(*) FILTER (WHERE s.ssl) || ' ' || count(*) FILTER (WHERE NOT s.ssl)
                    FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                    WHERE a.backend_type = 'client backend' AND a.datname = 'stratus' AND a.pid <> pg_backend_pid()
                    """)
                let parts = counts.split(separator: " ").compactMap { Int($0) }
                #expect(parts.count == 2 && parts[0] >= 2 && parts[1] == 0, "\(key): encrypted, plain connections: \(counts)")
            }
            // `--with-prometheus`: Debian's prometheus scrapes both servers' /metrics with their
            // metrics token, and the requests above are in it.
            let prometheus = try #require(settings["STRATUS_CLUSTER_PROMETHEUS_URL"])
            var up: [JSON] = []
            var requests = 0.0
            for _ in 0..<40 {
                let answer = try await curl(["-G", prometheus + "/api/v1/query", "--data-urlencode", #"query=up{job="stratus"}"#])
                up = (try? JSONParser.parse(Array(answer.text.utf8)))?["data"]?["result"]?.arrayValue ?? []
                let total = try await curl(["-G", prometheus + "/api/v1/query", "--data-urlencode", #"query=sum(stratus_requests_total{family="management"})"#])
                requests = (try? JSONParser.parse(Array(total.text.utf8)))?["data"]?["result"]?.arrayValue?.first?["value"]?.arrayValue?.last?.stringValue
                    .flatMap(Double.init) ?? 0
                if up.count == 2, up.allSatisfy({ $0["value"]?.arrayValue?.last == "1" }), requests >= 2 { break }
                try await Task.sleep(for: .milliseconds(500))
            }
            #expect(up.count == 2 && up.allSatisfy { $0["value"]?.arrayValue?.last == "1" }, "prometheus's targets: \(up)")
            #expect(requests >= 2, "the management requests made through the balancer, as prometheus counted them: \(requests)")
        }
    }

    @Test func twoServersBehindTheBalancerLoseNoAcknowledgedWriteWhenOneIsKilled() async throws {
      try await Self.withCluster { settings, folder in
        let up = (text: settings.map { "\($0.key)=\($0.value)" }.joined(separator: "\n"), status: 0)
        let lb = try #require(settings["STRATUS_CLUSTER_URL"], "\(up.text)")
        let admin = try #require(settings["STRATUS_ADMIN_TOKEN"])
        let servers = [settings["STRATUS_CLUSTER_SERVER_1"] ?? "", settings["STRATUS_CLUSTER_SERVER_2"] ?? ""]
        let firstPID = try #require(settings["STRATUS_CLUSTER_PID_1"].flatMap { pid_t($0) })

        let tenant = try await serveTenant(lb, adminToken: admin, container: "iCloud.com.example.Cluster")
        let query = "ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)"
        let modify = lb + "/database/1/iCloud.com.example.Cluster/development/private/records/modify?" + query
        // Writes through the balancer (round robin over both servers), then one server killed
        // part-way: every write the service acknowledged must be there afterwards.
        // Beside the test's own writers, `stratus-bench`'s mixed load (lookups, queries, change
        // feeds, modifies) through the balancer for the whole kill-and-restart, on seeded data.
        let state = folder + "/bench-state.json"
        let seeded = try await Subprocess.runDetached([Programs.benchBinary, "seed", "--server", lb, "--admin-token", admin,
                                                       "--state-file", state, "--containers", "2", "--records", "200", "--prefix", "cl"])
        #expect(seeded.status == 0, "bench seed: \(seeded.text.suffix(1000))")
        let benchLog = folder + "/bench.log"
        let bench = try Subprocess.spawn([Programs.benchBinary, "run", "--server", lb, "--admin-token", admin, "--state-file", state,
                                          "--workload", "mixed", "--concurrency", "8", "--duration", "25", "--warmup", "0"], outputPath: benchLog)
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

        // Then PostgreSQL restarts under load (four writers for 14 s beside the bench's mixed load,
        // three restarts from 2 s on): requests in the outage fail with TRY_AGAIN_LATER and a retry hint,
        // none with a 500, the surviving server stays up (PostgresNIO's pool used to trip a
        // precondition here: `RecoveringPool`), and the service recovers by itself.
        let pgBin = try #require(try FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql").sorted().last.map { "/usr/lib/postgresql/\($0)/bin" })
        let primary = folder + "/c/postgres/primary"
        let tally = Tally()
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var index = 0
                    while ContinuousClock.now - started < .seconds(14) {
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
                // Three restarts, 3 s apart: one was not always enough to catch the pool's crash.
                for _ in 0..<3 {
                    try await Task.sleep(for: .seconds(2))
                    let psqlUser = geteuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--"] : []
                    let restart = try await Subprocess.runDetached(psqlUser + [pgBin + "/pg_ctl", "-D", primary, "-m", "fast", "-w", "restart"])
                    #expect(restart.status == 0, "pg_ctl restart: \(restart.text)")
                    await tally.restarted(at: ContinuousClock.now - started)
                }
            }
            try await group.waitForAll()
        }
        let outcome = await tally.snapshot()
        let benchExit = try await Subprocess.waitForExit(bench, within: .seconds(60))
        let benchSummary = ((try? String(contentsOfFile: benchLog, encoding: .utf8)) ?? "").split(separator: "\n")
            .filter { $0.contains("req/s") || $0.contains("errors") }.suffix(2).joined(separator: " | ")
        print("cluster: stratus-bench mixed load beside the kill and the restart (exit \(benchExit.map(String.init) ?? "still running")): \(benchSummary)")
        #expect(outcome.errors.isEmpty, "answers other than success or TRY_AGAIN_LATER with a retry hint: \(outcome.errors.prefix(5))")
        let recovered = outcome.recoveredAfterRestart
        #expect(recovered, "no write succeeded after PostgreSQL came back (restart at \(outcome.restartedAt.map { "\($0)" } ?? "?"))")
        let secondPID = try #require(settings["STRATUS_CLUSTER_PID_2"].flatMap { pid_t($0) })
        #expect(kill(secondPID, 0) == 0, "the surviving stratus serve died during the PostgreSQL restart")
        acknowledged += outcome.acknowledged
        // Every acknowledged record, read back from the surviving server.
        let lookup = servers[1] + "/database/1/iCloud.com.example.Cluster/development/private/records/lookup?" + query
        var missing: [String] = []
        var checked = 0
        for start in stride(from: 0, to: acknowledged.count, by: 200) {
            let chunk = acknowledged[start..<min(start + 200, acknowledged.count)]
            let names = chunk.map { #"{"recordName":"\#($0)"}"# }.joined(separator: ",")
            let found = try await Programs.post(lookup, #"{"records":[\#(names)]}"#)
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
              + "then PostgreSQL restarted 3 times under 4 writers: \(outcome.acknowledged.count) acknowledged, \(outcome.retryLater) TRY_AGAIN_LATER, \(outcome.unreachable) connection failures; "
              + "0 of \(acknowledged.count) acknowledged writes lost; replica caught up (\(replicated))")
      }
    }

    /// The CPU time the client backends of the PostgreSQL server in `dataFolder` have used, in microseconds.
    static func backendCPU(_ dataFolder: String) -> Int64 {
        guard let text = try? String(contentsOfFile: dataFolder + "/postmaster.pid", encoding: .utf8),
              let postmaster = text.split(separator: "\n").first.flatMap({ Int($0) }) else { return 0 }
        var ticks: Int64 = 0
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(entry) != nil {
            guard let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            // After the name: state, ppid, …; utime and stime are fields 14 and 15 of the line (11 and 12 here).
            guard fields.count > 12, Int(fields[1]) == postmaster else { continue }
            // Client backends only ("postgres: <user> <database> <address> …"): the checkpointer,
            // WAL writer and autovacuum work on their own schedule and would blur the figure.
            let title = (try? String(contentsOfFile: "/proc/\(entry)/cmdline", encoding: .utf8)) ?? ""
            guard title.contains(" stratus ") else { continue }
            ticks += (Int64(fields[11]) ?? 0) + (Int64(fields[12]) ?? 0)
        }
        return ticks * 1_000_000 / Int64(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Read replicas (issue 28): with the replica's replay paused, every query and change feed
    /// right after a write still shows that write (the primary answers); caught up, the replica
    /// answers, and the primary's CPU per query drops (measured and printed, not asserted).
    @Test func aLaggingReplicaNeverServesAStateOlderThanTheClientsOwnWrite() async throws {
        try await Self.withCluster { settings, folder in
            let lb = try #require(settings["STRATUS_CLUSTER_URL"])
            let admin = try #require(settings["STRATUS_ADMIN_TOKEN"])
            let replica = try #require(settings["STRATUS_CLUSTER_REPLICA_URL"])
            let servers = [settings["STRATUS_CLUSTER_SERVER_1"] ?? "", settings["STRATUS_CLUSTER_SERVER_2"] ?? ""]
            let tenant = try await serveTenant(lb, adminToken: admin, container: "iCloud.com.example.Replica")
            let base = lb + "/database/1/iCloud.com.example.Replica/development/private/"
            let query = "?ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)"
            #expect(try await Programs.post(base + "zones/modify" + query, #"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"z"}}}]}"#).0 == 200)
            func create(_ name: String) async throws -> Bool {
                let body = #"{"zoneID":{"zoneName":"z"},"operations":[{"operationType":"create","record":{"recordName":"\#(name)","recordType":"Note","fields":{"n":{"value":1}}}}]}"#
                let answer = try await Programs.post(base + "records/modify" + query, body)
                return answer.0 == 200 && answer.1["records"]?.arrayValue?.first?["serverErrorCode"] == nil
            }
            func names() async throws -> Set<String> {
                let answer = try await Programs.post(base + "records/query" + query, #"{"zoneID":{"zoneName":"z"},"query":{"recordType":"Note"},"resultsLimit":200}"#)
                #expect(answer.0 == 200, "\(answer.1)")
                return Set(answer.1["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? [])
            }
            func feed() async throws -> Set<String> {
                let answer = try await Programs.post(base + "changes/zone" + query, #"{"zones":[{"zoneID":{"zoneName":"z"}}]}"#)
                return Set(answer.1["zones"]?.arrayValue?.first?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? [])
            }
            func served() async throws -> (replica: Int64, primary: Int64) {
                var total: (Int64, Int64) = (0, 0)
                for server in servers {
                    let stats = try await Programs.getJSON(server + "/management/1/stats", headers: ["Authorization": "Bearer \(admin)"])
                    if case .int(let replica)? = stats["replicaReads"]?["servedByReplica"], case .int(let primary)? = stats["replicaReads"]?["servedByPrimary"] {
                        total = (total.0 + replica, total.1 + primary)
                    }
                }
                return total
            }
            for index in 0..<20 { #expect(try await create("seed-\(index)")) }

            // The replica stops replaying: each write is seen at once by the query and the feed after it.
            _ = try await Self.psql(replica, "SELECT pg_wal_replay_pause()")
            let beforePause = try await served()
            var written: Set<String> = (0..<20).reduce(into: []) { $0.insert("seed-\($1)") }
            var stale = 0
            for index in 0..<20 {
                let name = "lagged-\(index)"
                #expect(try await create(name))
                written.insert(name)
                if try await names() != written { stale += 1 }
                if try await feed() != written { stale += 1 }
            }
            #expect(stale == 0, "\(stale) reads older than the client's own write while the replica lagged")
            let paused = try await served()
            #expect(paused.primary - beforePause.primary >= 40, "the primary did not take the reads the lagging replica could not: \(beforePause) → \(paused)")

            // Replaying again, the replica takes the reads; the primary's CPU per query, either way.
            _ = try await Self.psql(replica, "SELECT pg_wal_replay_resume()")
            try await Task.sleep(for: .milliseconds(300))
            let primaryData = folder + "/c/postgres/primary"
            func measure(_ count: Int) async throws -> (cpuPerQuery: Double, replica: Int64) {
                let (cpu, stats) = (Self.backendCPU(primaryData), try await served())
                for _ in 0..<count { #expect(try await names() == written) }
                let (cpuAfter, statsAfter) = (Self.backendCPU(primaryData), try await served())
                return (Double(cpuAfter - cpu) / Double(count), statsAfter.replica - stats.replica)
            }
            let onReplica = try await measure(400)
            // Not every one: the primary's WAL moves on its own (other writers, background work) and
            // the replica's position is polled, so on a loaded machine a read may find it a step
            // behind and go to the primary. 357 of 400 has been seen with the whole suite running.
            #expect(onReplica.replica > 200, "a caught-up replica took only \(onReplica.replica) of 400 queries")
            _ = try await Self.psql(replica, "SELECT pg_wal_replay_pause()")
            #expect(try await create("last"))
            written.insert("last")
            let onPrimary = try await measure(400)
            _ = try await Self.psql(replica, "SELECT pg_wal_replay_resume()")
            print(String(format: "replica reads: 0 stale reads in 40 with replay paused; primary CPU per query %.0f µs with the replica answering (%d of 400), %.0f µs with it paused (the primary answering)",
                         onReplica.cpuPerQuery, onReplica.replica, onPrimary.cpuPerQuery))
        }
    }
}
