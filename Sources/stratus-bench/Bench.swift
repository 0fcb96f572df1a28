import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// `stratus-bench`: a load generator for a running Stratus server, like pgbench for PostgreSQL.
/// A program of its own, so the admin CLI carries none of it.
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stratus-bench",
        abstract: "Load-test a running server through its public API (like pgbench).",
        discussion: """
            First seed data through the API, then run a workload against it:

              stratus-bench seed --containers 100 --records 1000
              stratus-bench --workload lookup --concurrency 16 --duration 20

            Workloads (--workload):
              lookup         records/lookup of one record
              shared-lookup  the same through the shared database of a user the
                             zone is shared with (seed with --shared)
              create         records/modify creating one new ~1 KB record
              modify         records/modify forceUpdate of one ~1 KB record
              batch          100 new records per records/modify
              query-eq       equality filter, ~10 results
              query-range    range filter, sorted, 100 results
              changes        changes/zone page of 100
              mixed          50% lookup, 15% query-eq, 20% changes, 15% modify
              lookup-public  a public-database record, signed in, and
              lookup-world   the same with the API token alone (both need
                             'stratus-bench seed --public-records')
              query-near     places near a point, nearest first, and
              query-text     places whose text has two words (both need
                             'stratus-bench seed --places')
            Reports requests/s, records/s, p50/p90/p99/max latency, errors and the
            server's RSS and CPU per request.

            --peer pocketbase points the same generator at a PocketBase server (getOne,
            create, update, list with filter) for the side-by-side table of
            Deploy/bench/bench.sh.
            """,
        subcommands: [Run.self, Seed.self, Subscribe.self, NearSample.self, APNsStandIn.self],
        defaultSubcommand: Run.self)

    /// Options shared by the bench verbs.
    struct Options: ParsableArguments {
        @Option(help: "Server URL (env STRATUS_SERVER, default http://127.0.0.1:8080).") var server: String?
        @Option(name: .customLong("admin-token"), help: "Admin token (env STRATUS_ADMIN_TOKEN).") var adminToken: String?
        @Option(name: .customLong("state-file"), help: "Where seeding records what it created (default .stratus/bench-state.json).") var stateFile = ".stratus/bench-state.json"

        var serverURL: String { setting(server, "STRATUS_SERVER", default: "http://127.0.0.1:8080")! }

        func hostAndPort() throws -> (String, Int) {
            guard let url = URL(string: serverURL), url.scheme == "http", let host = url.host else {
                throw ValidationError("--server must be an http:// URL (the load generator speaks plain HTTP/1.1)")
            }
            return (host, url.port ?? 80)
        }

        func admin() throws -> String {
            if let token = setting(adminToken, "STRATUS_ADMIN_TOKEN") ?? (try? localAdminToken(dataDir: setting(nil, "STRATUS_DATA_DIR", default: ".stratus")!, create: false)) ?? nil {
                return token
            }
            throw ValidationError("no admin token: set STRATUS_ADMIN_TOKEN or --admin-token")
        }
    }
}

/// What `bench seed` created, read back by `bench`.
struct BenchState {
    struct Tenant {
        var container: String
        /// The query string of a signed-in client: API token and web auth token.
        var query: String
        var zones: [String]
        /// The owner's user record name, and the query string of a second user every zone is
        /// shared with (`bench seed --shared`), for the shared-lookup workload.
        var owner: String? = nil
        var sharedQuery: String? = nil

        /// The query string of an anonymous client (`_world`): the API token alone.
        var worldQuery: String { String(query.prefix { $0 != "&" }) }
    }
    var tenants: [Tenant]
    var recordsPerZone: Int
    /// Records each container has in its public database, `pub-0` …
    var publicRecords: Int
    /// `Place` records in the first container's zone `places` (`BenchPlaces`).
    var places: Int

    func json() -> JSON {
        ["recordsPerZone": .int(Int64(recordsPerZone)), "publicRecords": .int(Int64(publicRecords)), "places": .int(Int64(places)), "tenants": .array(tenants.map {
            var tenant: [String: JSON] = ["container": .string($0.container), "query": .string($0.query), "zones": .array($0.zones.map { .string($0) })]
            if let owner = $0.owner, let shared = $0.sharedQuery {
                tenant["owner"] = .string(owner)
                tenant["sharedQuery"] = .string(shared)
            }
            return .object(tenant)
        })]
    }

    init(tenants: [Tenant], recordsPerZone: Int, publicRecords: Int = 0, places: Int = 0) {
        self.tenants = tenants
        self.recordsPerZone = recordsPerZone
        self.publicRecords = publicRecords
        self.places = places
    }

    init(json: JSON) throws {
        guard case .int(let perZone)? = json["recordsPerZone"], let tenants = json["tenants"]?.arrayValue else {
            throw ValidationError("the bench state file is not valid; run 'stratus-bench seed' again")
        }
        self.recordsPerZone = Int(perZone)
        if case .int(let count)? = json["publicRecords"] { publicRecords = Int(count) } else { publicRecords = 0 }
        if case .int(let count)? = json["places"] { places = Int(count) } else { places = 0 }
        self.tenants = tenants.map {
            Tenant(container: $0["container"]?.stringValue ?? "", query: $0["query"]?.stringValue ?? "",
                   zones: ($0["zones"]?.arrayValue ?? []).compactMap(\.stringValue), owner: $0["owner"]?.stringValue,
                   sharedQuery: $0["sharedQuery"]?.stringValue)
        }
    }
}

/// The ~1 KB record every workload reads and writes (the shape of performance.md's pgbench table).
enum BenchRecord {
    static let notes = String(repeating: "0123456789abcdef", count: 52)

    /// The development schema every bench container gets before its records: title and rank are
    /// indexed (as in performance.md's pgbench table); the other fields, the ~830-byte notes
    /// among them, are not (just-in-time fields would be QUERYABLE and SORTABLE).
    static let schema = """
        DEFINE SCHEMA
            RECORD TYPE Item (
                title STRING QUERYABLE,
                rank INT64 QUERYABLE SORTABLE,
                createdBy STRING,
                done INT64,
                tags LIST<STRING>,
                notes STRING,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ TO "_world"
            );
        """ + "\n" + BenchPlaces.schema

    /// Distinct titles in a zone of `perZone` records: an equality query on title finds ~10.
    static func titles(perZone: Int) -> Int { max(1, perZone / 10) }

    /// Titles of the seeded records: `title-0`, `title-1`, … (the equality query asks for these).
    static let seededTitlePrefix = "title-"

    /// Titles of the records the write workloads add (create, batch). The equality query asks for
    /// seeded titles only, so it keeps finding ~10 records (B3a) however many records the write
    /// workloads (and their pgbench baselines) added before it; with seeded titles it found ~47
    /// records per query by the time it ran.
    static let writtenTitlePrefix = "new-title-"

    static func fields(_ index: Int, rank: Int, titles: Int = 25, titlePrefix: String = seededTitlePrefix) -> String {
        #"{"title":{"value":"\#(titlePrefix)\#(index % titles)"},"rank":{"value":\#(rank)},"createdBy":{"value":"user-\#(index % 37)"},"done":{"value":\#(index % 2)},"tags":{"value":["a\#(index % 7)","b\#(index % 11)","c\#(index % 13)"]},"notes":{"value":"\#(notes)"}}"#
    }

    static func create(_ name: String, index: Int, rank: Int, operation: String = "create", titles: Int = 25,
                       titlePrefix: String = seededTitlePrefix) -> String {
        #"{"operationType":"\#(operation)","record":{"recordType":"Item","recordName":"\#(name)","fields":\#(fields(index, rank: rank, titles: titles, titlePrefix: titlePrefix))}}"#
    }
}

extension Bench {
    struct Seed: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Create containers, users, zones and records through the public API for 'stratus-bench'.",
            discussion: """
                Each container gets a development schema (type Item: title QUERYABLE, rank QUERYABLE SORTABLE,
                createdBy, done, tags, notes), one API token, one signed-up user and --zones custom zones in
                that user's private database, filled with ~1 KB records.
                """)

        @OptionGroup var options: Bench.Options
        @Option(help: "How many containers.") var containers = 10
        @Option(help: "Records per container.") var records = 1000
        @Option(help: "Custom zones per container (records are spread evenly).") var zones = 4
        @Option(name: .customLong("public-records"), help: "Records per container in its public database, for the lookup-public and lookup-world workloads (default 0).") var publicRecords = 0
        @Option(help: "Place records (a LOCATION and a SEARCHABLE text each) in the first container's zone 'places', for the query-near and query-text workloads (default 0).") var places = 0
        @Flag(help: "Share every zone (a zone-wide READ_ONLY share) with a second user of each container, for the shared-lookup workload.") var shared = false
        @Option(help: "Parallel seeding connections.") var concurrency = 8
        @Option(help: "Prefix of the container names.") var prefix = "bench"
        @Option(help: "stratus, or pocketbase to fill a PocketBase 'items' collection with the same records (see Deploy/bench/bench.sh).") var peer: Peer = .stratus

        func run() async throws {
            let (host, port) = try options.hostAndPort()
            let perZone = max(1, records / zones)
            let started = Date()
            if peer == .pocketbase {
                let state = try PocketBase.seed(host: host, port: port, containers: containers, zones: zones, perZone: perZone, concurrency: concurrency)
                try save(state)
                print("seeded PocketBase with \(containers * zones * perZone) records in \(String(format: "%.1f", Date().timeIntervalSince(started))) s; state in \(options.stateFile)")
                return
            }
            let admin = try options.admin()
            let counter = Counter()
            let indexes = Array(0..<containers)
            let tenants = try parallelMap(indexes, concurrency: concurrency) { index -> BenchState.Tenant in
                let connection = BenchConnection(host: host, port: port)
                let name = "\(prefix).c\(index)"
                let auth = "Authorization: Bearer \(admin)\r\n"
                var (status, body) = try connection.request("POST", "/management/1/containers", body: Array(#"{"name":"\#(name)"}"#.utf8), headers: auth)
                guard status == 201 || status == 409 else { throw CLIError("creating \(name): \(String(decoding: body, as: UTF8.self))") }
                (status, body) = try connection.request("POST", "/management/1/containers/\(name)/schema/import",
                                                        body: Array(JSONWriter.string(["schema": .string(BenchRecord.schema)]).utf8), headers: auth)
                guard status == 200 else { throw CLIError("schema of \(name): \(String(decoding: body, as: UTF8.self))") }
                (status, body) = try connection.request("POST", "/management/1/containers/\(name)/tokens", body: Array(#"{"environment":"development","name":"bench"}"#.utf8), headers: auth)
                guard status == 201, let token = (try? JSONParser.parse(body))?["apiToken"]?.stringValue else { throw CLIError("token for \(name): \(String(decoding: body, as: UTF8.self))") }
                (status, body) = try connection.request("POST", "/auth/1/\(name)/development/signup?ckAPIToken=\(token)",
                                                        body: Array(#"{"emailAddress":"bench-\#(UInt32.random(in: 0...UInt32.max))@example.com","password":"bench-password"}"#.utf8))
                guard status == 200, let user = (try? JSONParser.parse(body))?["ckWebAuthToken"]?.stringValue else { throw CLIError("sign-up in \(name): \(String(decoding: body, as: UTF8.self))") }
                let ownerName = (try? JSONParser.parse(body))?["userRecordName"]?.stringValue
                let query = "ckAPIToken=\(token)&ckWebAuthToken=\(user)"
                let zoneNames = (0..<zones).map { "z\($0)" }
                let zoneOps = zoneNames.map { #"{"operationType":"create","zone":{"zoneID":{"zoneName":"\#($0)"}}}"# }.joined(separator: ",")
                (status, body) = try connection.request("POST", "/database/1/\(name)/development/private/zones/modify?\(query)", body: Array(#"{"operations":[\#(zoneOps)]}"#.utf8))
                guard status == 200 else { throw CLIError("zones in \(name): \(String(decoding: body, as: UTF8.self))") }
                for zone in zoneNames {
                    var next = 0
                    while next < perZone {
                        let end = min(perZone, next + 200)
                        let ops = (next..<end).map { BenchRecord.create("rec-\($0)", index: $0, rank: Int.random(in: 0..<1_048_576), operation: "forceReplace", titles: BenchRecord.titles(perZone: perZone)) }.joined(separator: ",")
                        (status, body) = try connection.request("POST", "/database/1/\(name)/development/private/records/modify?\(query)",
                                                                body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"atomic":false,"operations":[\#(ops)]}"#.utf8))
                        guard status == 200 else { throw CLIError("records in \(name)/\(zone): \(String(decoding: body.prefix(300), as: UTF8.self))") }
                        counter.add(end - next)
                        next = end
                    }
                }
                var next = 0
                while next < publicRecords {
                    let end = min(publicRecords, next + 200)
                    let ops = (next..<end).map { BenchRecord.create("pub-\($0)", index: $0, rank: Int.random(in: 0..<1_048_576), operation: "forceReplace") }.joined(separator: ",")
                    (status, body) = try connection.request("POST", "/database/1/\(name)/development/public/records/modify?\(query)",
                                                            body: Array(#"{"atomic":false,"operations":[\#(ops)]}"#.utf8))
                    guard status == 200 else { throw CLIError("public records in \(name): \(String(decoding: body.prefix(300), as: UTF8.self))") }
                    counter.add(end - next)
                    next = end
                }
                var tenant = BenchState.Tenant(container: name, query: query, zones: zoneNames)
                if shared {
                    try Self.share(&tenant, owner: ownerName ?? "", token: token, connection: connection)
                }
                let done = counter.value
                if index % max(1, containers / 20) == 0 {
                    FileHandle.standardError.write(Data("seeded \(done) records in \(Int(Date().timeIntervalSince(started)))s\n".utf8))
                }
                return tenant
            }
            if places > 0, let first = tenants.first {
                try BenchPlaces.seed(first, places: places, host: host, port: port, concurrency: concurrency)
            }
            try save(BenchState(tenants: tenants, recordsPerZone: perZone, publicRecords: publicRecords, places: places))
            let seconds = Date().timeIntervalSince(started)
            print("seeded \(containers) containers × \(zones) zones × \(perZone) records = \(counter.value) records\(places > 0 ? " and \(places) places" : "") in \(String(format: "%.1f", seconds)) s (\(Int(Double(counter.value + places) / max(seconds, 0.001))) records/s); state in \(options.stateFile)")
        }
    }
}

extension Bench.Seed {
    /// Signs up a second user and shares every zone of `tenant` with them (a zone-wide READ_ONLY
    /// share each, accepted), for the shared-lookup workload.
    static func share(_ tenant: inout BenchState.Tenant, owner: String, token: String, connection: BenchConnection) throws {
        let name = tenant.container
        var (status, body) = try connection.request("POST", "/auth/1/\(name)/development/signup?ckAPIToken=\(token)",
                                                    body: Array(#"{"emailAddress":"reader-\#(UInt32.random(in: 0...UInt32.max))@example.com","password":"bench-password"}"#.utf8))
        guard status == 200, let signedUp = try? JSONParser.parse(body), let reader = signedUp["ckWebAuthToken"]?.stringValue,
              let readerName = signedUp["userRecordName"]?.stringValue else {
            throw CLIError("sign-up of the share reader in \(name): \(String(decoding: body, as: UTF8.self))")
        }
        var guids: [String] = []
        for zone in tenant.zones {
            let share = #"{"operationType":"create","record":{"recordName":"cloudkit.zoneshare","recordType":"cloudkit.share","publicPermission":"NONE","participants":[{"permission":"READ_ONLY","userIdentity":{"userRecordName":"\#(readerName)"}}]}}"#
            (status, body) = try connection.request("POST", "/database/1/\(name)/development/private/records/modify?\(tenant.query)",
                                                    body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"operations":[\#(share)]}"#.utf8))
            guard status == 200, let guid = (try? JSONParser.parse(body))?["records"]?.arrayValue?.first?["shortGUID"]?.stringValue else {
                throw CLIError("sharing \(name)/\(zone): \(String(decoding: body.prefix(300), as: UTF8.self))")
            }
            guids.append(guid)
        }
        let readerQuery = "ckAPIToken=\(token)&ckWebAuthToken=\(reader)"
        let values = guids.map { #"{"value":"\#($0)"}"# }.joined(separator: ",")
        (status, body) = try connection.request("POST", "/database/1/\(name)/development/public/records/accept?\(readerQuery)",
                                                body: Array(#"{"shortGUIDs":[\#(values)]}"#.utf8))
        guard status == 200, !String(decoding: body, as: UTF8.self).contains("serverErrorCode") else {
            throw CLIError("accepting the shares of \(name): \(String(decoding: body.prefix(300), as: UTF8.self))")
        }
        tenant.owner = owner
        tenant.sharedQuery = readerQuery
    }

    func save(_ state: BenchState) throws {
        let folder = URL(fileURLWithPath: options.stateFile).deletingLastPathComponent().path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try JSONWriter.string(state.json()).write(toFile: options.stateFile, atomically: true, encoding: .utf8)
    }
}

/// A value shared between threads behind a lock.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<R>(_ body: (inout Value) -> R) -> R { lock.lock(); defer { lock.unlock() }; return body(&value) }
}

/// A thread-safe counter.
final class Counter: @unchecked Sendable {
    private let lock = NSLock()
    private var total = 0
    func add(_ count: Int) { lock.lock(); total += count; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return total }
}

/// Runs `body` over `items` on `concurrency` threads, keeping the order of results.
func parallelMap<T, R>(_ items: [T], concurrency: Int, _ body: @escaping (T) throws -> R) throws -> [R] {
    let lock = NSLock()
    var results = [R?](repeating: nil, count: items.count)
    var failure: (any Error)?
    var next = 0
    runThreads(max(1, min(concurrency, items.count))) { _ in
        while true {
            lock.lock()
            if next >= items.count || failure != nil { lock.unlock(); return }
            let index = next
            next += 1
            lock.unlock()
            do {
                let result = try body(items[index])
                lock.lock(); results[index] = result; lock.unlock()
            } catch {
                lock.lock(); failure = failure ?? error; lock.unlock()
            }
        }
    }
    if let failure { throw failure }
    return results.map { $0! }
}

/// Runs `body(worker)` on `count` dedicated threads and waits for all of them. (Dispatch's
/// concurrentPerform caps parallelism at the core count; load generation needs one blocking
/// thread per connection.)
func runThreads(_ count: Int, _ body: @escaping (Int) -> Void) {
    /// The threads share state through locks the callers hold; the box only carries the closure across.
    final class Box: @unchecked Sendable {
        let body: (Int) -> Void
        init(_ body: @escaping (Int) -> Void) { self.body = body }
    }
    let box = Box(body)
    let group = DispatchGroup()
    for worker in 0..<count {
        group.enter()
        let thread = Thread {
            box.body(worker)
            group.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    group.wait()
}
