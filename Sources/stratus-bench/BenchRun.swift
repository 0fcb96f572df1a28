import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

extension Bench {
    struct Run: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "run", abstract: "Run a workload against seeded data (the default verb).")

        enum Workload: String, ExpressibleByArgument, CaseIterable {
            case lookup, create, modify, batch, queryEq = "query-eq", queryRange = "query-range", changes, mixed
            /// A public-database record looked up by its creator (signed in) or by anyone (`_world`: the API token alone).
            case lookupPublic = "lookup-public", lookupWorld = "lookup-world"
            /// Places near a point, nearest first, and places whose text has two words (`BenchPlaces`).
            case queryNear = "query-near", queryText = "query-text"
            /// A record of a zone another user shared, looked up through the shared database (`bench seed --shared`).
            case sharedLookup = "shared-lookup"
        }

        @OptionGroup var options: Bench.Options
        @Option(help: "lookup, create, modify, batch, query-eq, query-range, changes, mixed, lookup-public (a public-database record, signed in) lookup-world (the same with the API token alone; both need 'bench seed --public-records'), query-near or query-text (both need 'bench seed --places'), shared-lookup (a record of a zone shared with the reader; needs 'bench seed --shared').") var workload: Workload = .lookup
        @Option(help: "What --server is: stratus, or pocketbase for the peer comparison (lookup, create, modify and query-eq only; seed it with 'bench seed --peer pocketbase').") var peer: Peer = .stratus
        @Option(help: "Concurrent connections.") var concurrency = 16
        @Option(help: "Load-generator threads the connections are spread over (like pgbench -j).") var threads = 2
        @Option(help: "Seconds to run (after the warm-up).") var duration: Double = 10
        @Option(help: "Seconds of unmeasured warm-up first (0: measure from the first request, as a cold start would be).") var warmup: Double = 1
        @Option(help: "Use only the first N seeded containers (default all).") var containers: Int?
        @Option(help: ArgumentHelp("Pick containers with Zipf popularity of this exponent (e.g. 1.1: a few busy tenants, a long tail) instead of uniformly.",
                                   discussion: "The i-th seeded container is picked with probability proportional to 1/i^s, like pgbench's random_zipfian.",
                                   valueName: "s")) var zipf: Double?
        @Option(help: "Web courier polls to hold open during the run, one per container's user (first N containers): the create workload then reports how long its query notifications took to arrive (seed them with 'stratus-bench subscribe').") var pollers = 0
        @Flag(name: .customLong("websockets"), help: "With --pollers: the clients open the web courier URL as a WebSocket (one frame per notification) instead of long-polling it.") var webSockets = false
        @Flag(help: "Print one JSON document instead of text.") var json = false

        func validate() throws {
            if peer == .pocketbase, ![.lookup, .create, .modify, .queryEq].contains(workload) {
                throw ValidationError("PocketBase has no equivalent of the \(workload.rawValue) workload; use lookup, create, modify or query-eq")
            }
            guard concurrency >= 1, concurrency <= 1024 else { throw ValidationError("--concurrency must be 1–1024") }
            guard duration > 0, duration <= 3600 else { throw ValidationError("--duration must be 0–3600 seconds") }
            guard warmup >= 0, warmup <= 600 else { throw ValidationError("--warmup must be 0–600 seconds") }
            if let zipf, !(zipf > 0 && zipf <= 10) { throw ValidationError("--zipf must be an exponent above 0 and at most 10, e.g. 1.1") }
            guard pollers >= 0, pollers <= 1000 else { throw ValidationError("--pollers must be 0–1000") }
        }

        typealias Request = BenchLoop.Outgoing

        func makeRequest(_ workload: Workload, tenant: BenchState.Tenant, state: BenchState, worker: Int, sequence: Int,
                         random: inout BenchRandom) -> Request {
            let zone = tenant.zones.randomElement(using: &random) ?? "z0"
            let base = "/database/1/\(tenant.container)/development/private/"
            let query = "?" + tenant.query
            let record = Int.random(in: 0..<max(1, state.recordsPerZone), using: &random)
            switch workload {
            case .lookup:
                return Request(path: base + DataOperation.recordsLookup.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"records":[{"recordName":"rec-\#(record)"}]}"#.utf8), records: 1)
            case .create:
                // The name ends with when it was sent: a poll times its notification by it (--pollers).
                let op = BenchRecord.create("n-\(worker)-\(sequence)-\(UInt32.random(in: 0...UInt32.max, using: &random))-t\(BenchPollers.now())", index: record, rank: Int.random(in: 0..<1_048_576, using: &random),
                                            titlePrefix: BenchRecord.writtenTitlePrefix)
                return Request(path: base + DataOperation.recordsModify.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"operations":[\#(op)]}"#.utf8), records: 1)
            case .modify:
                let op = BenchRecord.create("rec-\(record)", index: record, rank: Int.random(in: 0..<1_048_576, using: &random), operation: "forceUpdate")
                return Request(path: base + DataOperation.recordsModify.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"operations":[\#(op)]}"#.utf8), records: 1)
            case .batch:
                let ops = (0..<100).map { BenchRecord.create("b-\(worker)-\(sequence)-\($0)-\(UInt32.random(in: 0...UInt32.max, using: &random))", index: $0, rank: Int.random(in: 0..<1_048_576, using: &random),
                                                        titlePrefix: BenchRecord.writtenTitlePrefix) }.joined(separator: ",")
                return Request(path: base + DataOperation.recordsModify.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"atomic":false,"operations":[\#(ops)]}"#.utf8), records: 100)
            case .queryEq:
                return Request(path: base + DataOperation.recordsQuery.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"query":{"recordType":"Item","filterBy":[{"fieldName":"title","comparator":"EQUALS","fieldValue":{"value":"\#(BenchRecord.seededTitlePrefix)\#(Int.random(in: 0..<BenchRecord.titles(perZone: state.recordsPerZone), using: &random))"}}]}}"#.utf8), records: 10)
            case .queryRange:
                return Request(path: base + DataOperation.recordsQuery.rawValue + query, body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"resultsLimit":100,"query":{"recordType":"Item","filterBy":[{"fieldName":"rank","comparator":"GREATER_THAN_OR_EQUALS","fieldValue":{"value":\#(Int.random(in: 0..<524_288, using: &random))}}],"sortBy":[{"fieldName":"rank"}]}}"#.utf8), records: 100)
            case .changes:
                return Request(path: base + DataOperation.changesZone.rawValue + query, body: Array(#"{"zones":[{"zoneID":{"zoneName":"\#(zone)"},"resultsLimit":100}]}"#.utf8), records: 100)
            case .sharedLookup:
                let path = "/database/1/\(tenant.container)/development/shared/records/lookup?" + (tenant.sharedQuery ?? "")
                return Request(path: path, body: Array(#"{"zoneID":{"zoneName":"\#(zone)","ownerRecordName":"\#(tenant.owner ?? "")"},"records":[{"recordName":"rec-\#(record)"}]}"#.utf8), records: 1)
            case .lookupPublic, .lookupWorld:
                let publicRecord = Int.random(in: 0..<max(1, state.publicRecords), using: &random)
                let path = "/database/1/\(tenant.container)/development/public/records/lookup?" + (workload == .lookupWorld ? tenant.worldQuery : tenant.query)
                return Request(path: path, body: Array(#"{"records":[{"recordName":"pub-\#(publicRecord)"}]}"#.utf8), records: 1)
            case .queryNear:
                let places = state.tenants[0]
                let center = BenchPlaces.center(using: &random)
                return Request(path: "/database/1/\(places.container)/development/private/records/query?" + places.query,
                               body: Array(BenchPlaces.nearQuery(center, radius: BenchPlaces.radius(places: state.places)).utf8), records: Int(BenchPlaces.wanted))
            case .queryText:
                let places = state.tenants[0]
                let group = Int.random(in: 0..<BenchPlaces.groups(state.places), using: &random)
                return Request(path: "/database/1/\(places.container)/development/private/records/query?" + places.query,
                               body: Array(BenchPlaces.textQuery(group: group, places: state.places).utf8), records: 10)
            case .mixed:
                let roll = Int.random(in: 0..<100, using: &random)
                let pick: Workload = roll < 50 ? .lookup : roll < 65 ? .queryEq : roll < 85 ? .changes : .modify
                return makeRequest(pick, tenant: tenant, state: state, worker: worker, sequence: sequence, random: &random)
            }
        }

        func run() async throws {
            let (host, port) = try options.hostAndPort()
            guard let text = try? String(contentsOfFile: options.stateFile, encoding: .utf8) else {
                throw ValidationError("no seeded data at \(options.stateFile): run 'stratus-bench seed' first")
            }
            var state = try BenchState(json: try JSONParser.parse(text))
            if let containers { state.tenants = Array(state.tenants.prefix(containers)) }
            guard !state.tenants.isEmpty else { throw ValidationError("the bench state has no containers") }
            let workload = self.workload
            if [.lookupPublic, .lookupWorld].contains(workload), state.publicRecords == 0 {
                throw ValidationError("the seeded data has no public records: run 'stratus-bench seed --public-records N' first")
            }
            if workload == .sharedLookup, state.tenants.contains(where: { $0.sharedQuery == nil }) {
                throw ValidationError("the seeded data has no shares: run 'stratus-bench seed --shared' first")
            }
            if [.queryNear, .queryText].contains(workload), state.places == 0 {
                throw ValidationError("the seeded data has no places: run 'stratus-bench seed --places N' first")
            }
            let warmup = self.warmup
            let deadline = Date().addingTimeInterval(warmup + duration)
            let measureFrom = Date().addingTimeInterval(warmup)
            let lock = NSLock()
            var latencies: [[UInt32]] = Array(repeating: [], count: concurrency)
            var errors = 0
            var records = 0
            var firstError: String?
            let progress = Counter()
            // Requests answered in each second, from the start (the warm-up's seconds included).
            let perSecond = Locked<[Int]>([])
            let reporter = Thread {
                var last = 0
                while Date() < deadline {
                    Thread.sleep(forTimeInterval: 1)
                    let now = progress.value
                    FileHandle.standardError.write(Data("  \(workload.rawValue): \(now - last) req/s\n".utf8))
                    perSecond.withLock { $0.append(now - last) }
                    last = now
                }
            }
            reporter.start()
            // The server's CPU time and context switches, read again at the end (same machine or not).
            let usageBefore = serverStats(host: host, port: port)
            let state_ = state
            let polls = BenchPollers()
            if pollers > 0 {
                let paths = try BenchPollers.open(Array(state.tenants.prefix(pollers)), host: host, port: port)
                if webSockets {
                    polls.startWebSockets(paths, host: host, port: port, deadline: deadline, measureFrom: measureFrom)
                } else {
                    polls.start(paths, host: host, port: port, deadline: deadline, measureFrom: measureFrom)
                }
            }
            let pick = TenantPicker(count: state.tenants.count, zipf: zipf)
            let threads = max(1, min(self.threads, concurrency))
            latencies = Array(repeating: [], count: threads)
            runThreads(threads) { thread in
                // This thread's connections are the global indexes thread, thread + threads, …
                let mine = stride(from: thread, to: concurrency, by: threads).map { $0 }
                var sequences = [Int](repeating: 0, count: mine.count)
                var local: [UInt32] = []
                local.reserveCapacity(100_000)
                var localErrors = 0
                var localRecords = 0
                var localFirstError: String?
                var random = BenchRandom()
                let loop = BenchLoop(host: host, port: port)
                do {
                    try loop.run(connections: mine.count, next: { index in
                        guard Date() < deadline else { return nil }
                        let tenant = state_.tenants[pick.next(using: &random)]
                        defer { sequences[index] += 1 }
                        if peer == .pocketbase {
                            return PocketBase.request(workload, state: state_, worker: mine[index], sequence: sequences[index], random: &random)
                        }
                        return makeRequest(workload, tenant: tenant, state: state_, worker: mine[index], sequence: sequences[index], random: &random)
                    }, done: { status, body, elapsed, records in
                        progress.add(1)
                        let ok = status == 200 && !body.isEmpty && BenchLoop.find(Self.errorNeedle, in: body, from: 0) == nil
                        if !ok, localFirstError == nil {
                            localFirstError = status == 0 ? "connection closed" : "HTTP \(status): \(String(decoding: body.prefix(300), as: UTF8.self))"
                        }
                        guard Date() >= measureFrom else { return }
                        if ok {
                            local.append(UInt32(min(elapsed / 1000, UInt64(UInt32.max))))
                            localRecords += records
                        } else {
                            localErrors += 1
                        }
                    })
                } catch {
                    if localFirstError == nil { localFirstError = "\(error)" }
                    localErrors += 1
                }
                lock.lock()
                latencies[thread] = local
                errors += localErrors
                records += localRecords
                if firstError == nil { firstError = localFirstError }
                lock.unlock()
            }
            var all = latencies.flatMap { $0 }
            all.sort()
            func percentile(_ p: Double) -> Double {
                guard !all.isEmpty else { return 0 }
                return Double(all[min(all.count - 1, Int(Double(all.count) * p))]) / 1000
            }
            let usageAfter = serverStats(host: host, port: port)
            let rss = usageAfter?.rss
            // Per request answered over the whole run (the warm-up's too: the server worked for them).
            // Only when one server process answered both reads (not several behind a balancer).
            let answered = Double(max(1, progress.value))
            let same = usageBefore.flatMap { before in usageAfter.flatMap { before.pid != nil && before.pid == $0.pid ? (before, $0) : nil } }
            let cpuPerRequest = same.map { ($0.1.cpuSeconds - $0.0.cpuSeconds) * 1e6 / answered }
            let switchesPerRequest = same.map { Double($0.1.switches - $0.0.switches) / answered }
            let notified = pollers > 0 ? polls.finish() : nil
            var result: JSON = [
                "workload": .string(workload.rawValue), "concurrency": .int(Int64(concurrency)), "durationSeconds": .double(duration),
                "containers": .int(Int64(state.tenants.count)), "zipf": zipf.map { .double($0) } ?? .null,
                "requests": .int(Int64(all.count)), "requestsPerSecond": .double((Double(all.count) / duration).rounded()),
                "recordsPerSecond": .double((Double(records) / duration).rounded()), "errors": .int(Int64(errors)),
                "latencyMs": ["p50": .double(percentile(0.5)), "p90": .double(percentile(0.9)), "p99": .double(percentile(0.99)),
                              "max": .double(Double(all.last ?? 0) / 1000)],
                "serverRSSBytes": rss.map { .int($0) } ?? .null,
                "serverCPUMicrosecondsPerRequest": cpuPerRequest.map { .double(($0 * 10).rounded() / 10) } ?? .null,
                "serverContextSwitchesPerRequest": switchesPerRequest.map { .double(($0 * 100).rounded() / 100) } ?? .null,
                "warmupSeconds": .double(warmup),
                "perSecond": .array(perSecond.withLock { $0 }.map { .int(Int64($0)) }),
                "firstError": firstError.map { .string($0) } ?? .null,
            ]
            if let notified, case .object(var members) = result {
                members["pollers"] = .int(Int64(pollers))
                members["notificationsReceived"] = .int(Int64(notified.received))
                members["notificationsTimed"] = .int(Int64(notified.timed))
                members["notificationLatencyP50Ms"] = .double(notified.p50)
                members["notificationLatencyP99Ms"] = .double(notified.p99)
                members["notificationLatencyMaxMs"] = .double(notified.max)
                members["failedPolls"] = .int(Int64(notified.failures))
                result = .object(members)
            }
            if json {
                print(JSONWriter.string(result))
            } else {
                print("""
                    workload \(workload.rawValue), \(concurrency) connections, \(duration) s, \(state.tenants.count) containers picked \(zipf.map { "with Zipf(\($0)) popularity" } ?? "uniformly")
                      requests/s  \(Int(Double(all.count) / duration))   records/s \(Int(Double(records) / duration))   errors \(errors)
                      latency ms  p50 \(String(format: "%.3f", percentile(0.5)))  p90 \(String(format: "%.3f", percentile(0.9)))  p99 \(String(format: "%.3f", percentile(0.99)))  max \(String(format: "%.3f", Double(all.last ?? 0) / 1000))
                      server RSS  \(rss.map { "\($0 / 1_048_576) MB" } ?? "unknown (needs the admin token)")
                      server CPU  \(cpuPerRequest.map { String(format: "%.1f µs", $0) } ?? "unknown") per request, \(switchesPerRequest.map { String(format: "%.2f", $0) } ?? "unknown") context switches per request
                    """)
                if let notified {
                    print("  notifications  \(notified.received) received by \(pollers) polls, query notification latency ms (\(notified.timed) timed) p50 \(String(format: "%.3f", notified.p50))  p99 \(String(format: "%.3f", notified.p99))  max \(String(format: "%.3f", notified.max))\(notified.failures > 0 ? ", \(notified.failures) polls failed" : "")")
                }
                if let firstError { print("  first error: \(firstError)") }
            }
        }

        static let errorNeedle = Array("\"serverErrorCode\"".utf8)

        /// The server's resident memory, CPU seconds and context switches so far (`GET /management/1/stats`, admin token).
        func serverStats(host: String, port: Int) -> (rss: Int64?, cpuSeconds: Double, switches: Int64, pid: Int64?)? {
            guard let admin = try? options.admin() else { return nil }
            let connection = BenchConnection(host: host, port: port)
            guard let (status, body) = try? connection.request("GET", "/management/1/stats", headers: "Authorization: Bearer \(admin)\r\n"), status == 200,
                  let stats = try? JSONParser.parse(body) else { return nil }
            let cpu: Double
            switch stats["cpuSeconds"] {
            case .double(let value)?: cpu = value
            case .int(let value)?: cpu = Double(value)
            default: return nil
            }
            return (stats["rssBytes"]?.intValue, cpu, stats["contextSwitches"]?.intValue ?? 0, stats["pid"]?.intValue)
        }
    }
}

/// The load generator's random numbers: SplitMix64, seeded once per thread from the system's
/// generator. `Int.random(in:)` asks the kernel (`getrandom(2)`) on every call: three system calls
/// per request, CPU taken from the server on the same cores (pgbench's generator is in-process too).
struct BenchRandom: RandomNumberGenerator {
    private var generator: SplitMix64

    init() {
        var system = SystemRandomNumberGenerator()
        generator = SplitMix64(seed: system.next())
    }

    mutating func next() -> UInt64 { generator.next() }
}

/// Picks a tenant index: uniformly, or with Zipf popularity (index i with probability ∝ 1/(i+1)^s),
/// by binary search over the cumulative distribution.
struct TenantPicker: Sendable {
    private let cumulative: [Double]
    private let count: Int

    init(count: Int, zipf exponent: Double?) {
        self.count = count
        guard let exponent else {
            cumulative = []
            return
        }
        var sums: [Double] = []
        sums.reserveCapacity(count)
        var total = 0.0
        for rank in 1...max(1, count) {
            total += 1 / pow(Double(rank), exponent)
            sums.append(total)
        }
        cumulative = sums.map { $0 / total }
    }

    func next(using random: inout BenchRandom) -> Int {
        guard !cumulative.isEmpty else { return Int.random(in: 0..<count, using: &random) }
        let target = Double.random(in: 0..<1, using: &random)
        var low = 0
        var high = cumulative.count - 1
        while low < high {
            let middle = (low + high) / 2
            if cumulative[middle] <= target { low = middle + 1 } else { high = middle }
        }
        return low
    }
}
