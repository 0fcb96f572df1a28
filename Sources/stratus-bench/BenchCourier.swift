import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// Subscriptions and long-polling clients for measuring writes under notifications:
/// `stratus-bench subscribe` gives every container users with subscriptions, and
/// `stratus-bench --workload create --pollers N` keeps N web courier polls waiting while it saves,
/// reporting how long each query notification took from its save being sent (its record name
/// carries the time) to a poll receiving it.
extension Bench {
    struct Subscribe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Give every seeded container users with subscriptions, for 'stratus-bench --workload create --pollers N'.",
            discussion: """
                The container's seeded user (the one the workloads write as) gets a database subscription,
                a zone subscription per zone and query subscriptions on Item (rank below 10,000, 50,000,
                100,000, 200,000, 500,000, …), --per-user in all; --users - 1 more users sign up, each with
                --per-user query subscriptions on Item in the public database. 100 containers with the
                defaults: 10,000 subscriptions across 1,000 users.
                """)

        @OptionGroup var options: Bench.Options
        @Option(help: "Users with subscriptions per container, the seeded one included.") var users = 10
        @Option(name: .customLong("per-user"), help: "Subscriptions per user.") var perUser = 10
        @Option(name: .customLong("writer-subscriptions"), help: "Subscriptions of the user the workloads write as (default --per-user; 1: a database subscription alone, CloudKit's sync pattern).") var writerSubscriptions: Int?
        @Flag(name: .customLong("writer-query"), help: "The writer's first subscription is a query subscription every create matches (its notifications name the record, so the pollers time them), not the database subscription.") var writerQuery = false
        @Option(help: "Parallel seeding connections.") var concurrency = 8
        @Option(name: .customLong("apns-key-file"),
                help: "Also set each container's development APNs credential from this .p8 file (key id BENCHKEY01, team BENCHTEAM1, topic com.example.bench) and register an APNs device for every subscriber: each notification is then pushed too.")
        var apnsKeyFile: String?

        static let ranks = [10_000, 50_000, 100_000, 200_000, 500_000, 750_000, 900_000, 1_000_000]

        static func query(_ id: String, below rank: Int) -> String {
            #"{"operationType":"create","subscription":{"subscriptionID":"\#(id)","subscriptionType":"query","query":{"recordType":"Item","filterBy":[{"fieldName":"rank","comparator":"LESS_THAN","fieldValue":{"value":\#(rank)}}]},"firesOn":["create","update"],"notificationInfo":{"shouldSendContentAvailable":true}}}"#
        }

        func run() async throws {
            guard users >= 1, perUser >= 1, perUser <= 200, (writerSubscriptions ?? 1) >= 1, (writerSubscriptions ?? 1) <= 200 else {
                throw ValidationError("--users must be at least 1, and --per-user and --writer-subscriptions 1-200")
            }
            let (host, port) = try options.hostAndPort()
            let state = try BenchState(json: try JSONParser.parse(try String(contentsOfFile: options.stateFile, encoding: .utf8)))
            let admin = try options.admin()
            var apnsBody: String?
            if let apnsKeyFile {
                guard let pem = try? String(contentsOfFile: apnsKeyFile, encoding: .utf8) else { throw ValidationError("cannot read \(apnsKeyFile)") }
                apnsBody = JSONWriter.string(["environment": "development", "key": .string(pem), "keyID": "BENCHKEY01", "teamID": "BENCHTEAM1",
                                              "topic": "com.example.bench"])
            }
            let started = Date()
            let counts = try parallelMap(state.tenants, concurrency: concurrency) { tenant -> Int in
                let connection = BenchConnection(host: host, port: port)
                func subscribe(_ database: String, _ query: String, _ operations: [String]) throws {
                    let (status, body) = try connection.request("POST", "/database/1/\(tenant.container)/development/\(database)/subscriptions/modify?\(query)",
                                                                body: Array(#"{"operations":[\#(operations.joined(separator: ","))]}"#.utf8))
                    guard status == 200, BenchLoop.find(Bench.Run.errorNeedle, in: body, from: 0) == nil else {
                        throw CLIError("subscribing in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))")
                    }
                }
                var own = [#"{"operationType":"create","subscription":{"subscriptionID":"all","subscriptionType":"database"}}"#]
                own += tenant.zones.map { #"{"operationType":"create","subscription":{"subscriptionID":"zone-\#($0)","subscriptionType":"zone","zoneID":{"zoneName":"\#($0)"}}}"# }
                var index = 0
                while own.count < perUser {
                    own.append(Self.query("rank-\(index)", below: Self.ranks[index % Self.ranks.count]))
                    index += 1
                }
                if writerQuery { own[0] = Self.query("every", below: 1_048_576) }
                let writers = writerSubscriptions ?? perUser
                try subscribe("private", tenant.query, Array(own.prefix(writers)))
                /// Registers an APNs device (a random token) for the user of `query`, when pushing.
                func register(_ query: String) throws {
                    guard apnsBody != nil else { return }
                    let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
                    let (status, body) = try connection.request("POST", "/device/1/\(tenant.container)/development/tokens/register?\(query)",
                                                                body: Array(#"{"apnsEnvironment":"development","apnsToken":"\#(token)"}"#.utf8))
                    guard status == 200 else { throw CLIError("registering a device in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))") }
                }
                if let apnsBody {
                    let (status, body) = try connection.request("POST", "/management/1/containers/\(tenant.container)/push/apns", body: Array(apnsBody.utf8),
                                                                headers: "Authorization: Bearer \(admin)\r\n")
                    guard status == 200 else { throw CLIError("setting APNs in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))") }
                    try register(tenant.query)
                }
                let token = tenant.query.split(separator: "&").first { $0.hasPrefix("ckAPIToken=") }.map { String($0.dropFirst("ckAPIToken=".count)) } ?? ""
                if users > QuotaLimits.defaults.signupsPerAddressPerHour {
                    // Every subscriber signs up from this one address: past the default sign-up limit.
                    let (status, body) = try connection.request("PATCH", "/management/1/containers/\(tenant.container)/quota",
                                                                body: Array(#"{"environment":"development","signupsPerAddressPerHour":\#(users)}"#.utf8),
                                                                headers: "Authorization: Bearer \(admin)\r\n")
                    guard status == 200 else { throw CLIError("raising the sign-up limit of \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))") }
                }
                for user in 1..<users {
                    let (status, body) = try connection.request("POST", "/auth/1/\(tenant.container)/development/signup?ckAPIToken=\(token)",
                                                                body: Array(#"{"emailAddress":"subscriber-\#(user)-\#(UInt32.random(in: 0...UInt32.max))@example.com","password":"bench-password"}"#.utf8))
                    guard status == 200, let webAuth = (try? JSONParser.parse(body))?["ckWebAuthToken"]?.stringValue else {
                        throw CLIError("sign-up in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))")
                    }
                    let ops = (0..<perUser).map { Self.query("public-\($0)", below: Self.ranks[$0 % Self.ranks.count]) }
                    try subscribe("public", "ckAPIToken=\(token)&ckWebAuthToken=\(webAuth)", ops)
                    try register("ckAPIToken=\(token)&ckWebAuthToken=\(webAuth)")
                }
                return writers + perUser * (users - 1)
            }
            let total = counts.reduce(0, +)
            print("made \(total) subscriptions across \(state.tenants.count * users) users in \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        }
    }
}

/// Web courier polls held open while a workload runs.
final class BenchPollers: @unchecked Sendable {
    private let group = DispatchGroup()
    private let lock = NSLock()
    private var latencies: [UInt64] = []
    private var received = 0
    private var failures = 0

    /// The microseconds since the epoch, as a create's record name carries them.
    static func now() -> UInt64 { UInt64(Date().timeIntervalSince1970 * 1_000_000) }

    /// Opens a web courier (tokens/create) for the user of each tenant; returns their paths.
    static func open(_ tenants: [BenchState.Tenant], host: String, port: Int) throws -> [String] {
        let connection = BenchConnection(host: host, port: port)
        return try tenants.map { tenant in
            let (status, body) = try connection.request("POST", "/device/1/\(tenant.container)/development/tokens/create?\(tenant.query)",
                                                        body: Array(#"{"apnsEnvironment":"development"}"#.utf8))
            guard status == 200, let url = (try? JSONParser.parse(body))?["webcourierURL"]?.stringValue, let path = URL(string: url)?.path else {
                throw CLIError("tokens/create in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))")
            }
            return path
        }
    }

    /// Counts one notification (after `measureFrom`) and times it if it is a query notification
    /// of a record whose name ends with when its create was sent.
    private func note(_ body: some RandomAccessCollection<UInt8>, measureFrom: Date) {
        let arrived = Self.now()
        var latency: UInt64?
        if let sent = Self.sentMark(body), arrived >= sent { latency = arrived - sent }
        lock.lock()
        if Date() >= measureFrom {
            received += 1
            if let latency { latencies.append(latency) }
        }
        lock.unlock()
    }

    /// When the create of a query notification's record was sent: its name (`"rid"`) ends with
    /// `-t<microseconds>`. Found by looking for the key, not by parsing the whole payload.
    static func sentMark(_ body: some RandomAccessCollection<UInt8>) -> UInt64? {
        let bytes = Array(body)
        guard let key = BenchLoop.find(ridKey, in: bytes, from: 0) else { return nil }
        let start = key + ridKey.count
        guard let end = bytes[start...].firstIndex(of: UInt8(ascii: "\"")) else { return nil }
        let name = String(decoding: bytes[start..<end], as: UTF8.self)
        guard let mark = name.range(of: "-t", options: .backwards) else { return nil }
        return UInt64(name[mark.upperBound...])
    }

    private static let ridKey = Array(#""rid":""#.utf8)

    /// Opens each path as a WebSocket on a thread of its own and reads its frames until
    /// `deadline`, timing the query notifications that arrive after `measureFrom`.
    func startWebSockets(_ paths: [String], host: String, port: Int, deadline: Date, measureFrom: Date) {
        for path in paths {
            group.enter()
            Thread {
                defer { self.group.leave() }
                guard let fd = try? BenchConnection.openSocket(host: host, port: port) else {
                    self.lock.lock(); self.failures += 1; self.lock.unlock()
                    return
                }
                defer { close(fd) }
                var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                let upgrade = Array("GET \(path) HTTP/1.1\r\nHost: \(host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".utf8)
                guard upgrade.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, 0) }) == upgrade.count else { return }
                var data: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 1 << 16)
                var handshaken = false
                while Date() < deadline {
                    let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if count == 0 { break }
                    if count < 0 { continue }  // the receive timeout: look at the deadline
                    data += chunk[0..<count]
                    if !handshaken {
                        guard let end = BenchLoop.find(Array("\r\n\r\n".utf8), in: data, from: 0) else { continue }
                        guard String(decoding: data.prefix(12), as: UTF8.self).hasSuffix("101") else {
                            self.lock.lock(); self.failures += 1; self.lock.unlock()
                            return
                        }
                        data.removeFirst(end + 4)
                        handshaken = true
                    }
                    // Server frames are unmasked: opcode, a 7-, 16- or 64-bit length, the payload.
                    while data.count >= 2 {
                        let opcode = data[0] & 0x0f
                        var length = Int(data[1] & 0x7f)
                        var start = 2
                        if length == 126 {
                            guard data.count >= 4 else { break }
                            length = Int(data[2]) << 8 | Int(data[3])
                            start = 4
                        } else if length == 127 {
                            guard data.count >= 10 else { break }
                            length = data[2..<10].reduce(0) { $0 << 8 | Int($1) }
                            start = 10
                        }
                        guard data.count >= start + length else { break }
                        let payload = Array(data[start..<(start + length)])
                        data.removeFirst(start + length)
                        switch opcode {
                        case 1: self.note(payload, measureFrom: measureFrom)
                        case 9:  // ping: a masked pong with the same payload (mask 0: the payload as is)
                            let pong: [UInt8] = [0x8a, 0x80 | UInt8(payload.count), 0, 0, 0, 0] + payload
                            _ = pong.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
                        default: break
                        }
                    }
                }
            }.start()
        }
    }

    /// Polls every path until `deadline` from one thread (`BenchLoop`: `poll(2)` over keep-alive
    /// connections, as the workers run), timing the query notifications that arrive after
    /// `measureFrom`. (A thread per poll cost the generator CPU per notification that the server
    /// on the same cores then lacked.)
    func start(_ paths: [String], host: String, port: Int, deadline: Date, measureFrom: Date) {
        group.enter()
        Thread {
            defer { self.group.leave() }
            let loop = BenchLoop(host: host, port: port)
            do {
                try loop.run(connections: paths.count, next: { index in
                    Date() < deadline ? BenchLoop.Outgoing(method: "GET", path: paths[index] + "?timeout=2", body: [], records: 0) : nil
                }, done: { status, body, _, _ in
                    if status == 200 {
                        self.note(body, measureFrom: measureFrom)
                    } else if status == 0 {
                        self.lock.lock(); self.failures += 1; self.lock.unlock()
                    }
                })
            } catch {
                self.lock.lock(); self.failures += paths.count; self.lock.unlock()
            }
        }.start()
    }

    /// Waits for the polls to end; the notifications received and the query notifications'
    /// latency in milliseconds (p50, p99, max) and how many were timed, and the polls that failed.
    func finish() -> (received: Int, timed: Int, p50: Double, p99: Double, max: Double, failures: Int) {
        group.wait()
        lock.lock()
        defer { lock.unlock() }
        let sorted = latencies.sorted()
        func percentile(_ p: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1000
        }
        return (received, sorted.count, percentile(0.5), percentile(0.99), Double(sorted.last ?? 0) / 1000, failures)
    }
}
