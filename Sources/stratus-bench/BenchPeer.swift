import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// Which server `stratus-bench` talks to.
enum Peer: String, ExpressibleByArgument, CaseIterable {
    case stratus, pocketbase
}

/// The PocketBase side of the peer comparison: one `items` collection (public rules, an index on
/// (zone, title)) holding the same ~1 KB records as a Stratus seed, addressed by deterministic ids
/// so a run can pick random existing records without a lookup table. `Deploy/bench/bench.sh` creates the
/// collection; `stratus-bench seed --peer pocketbase` fills it.
enum PocketBase {
    static let collectionPath = "/api/collections/items/records"

    /// The 15-character id PocketBase requires, from (container, zone, record).
    static func id(container: Int, zone: Int, record: Int) -> String {
        "r" + pad(container, 4) + pad(zone, 2) + pad(record, 8)
    }

    static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }

    /// The record body (the fields of `BenchRecord.fields`, flat, as PocketBase stores them).
    static func body(id: String?, zone: String, index: Int, rank: Int, titles: Int = 25, titlePrefix: String = BenchRecord.seededTitlePrefix) -> [UInt8] {
        let idPart = id.map { #""id":"\#($0)","# } ?? ""
        return Array(#"{\#(idPart)"zone":"\#(zone)","title":"\#(titlePrefix)\#(index % titles)","rank":\#(rank),"createdBy":"user-\#(index % 37)","done":\#(index % 2),"tags":["a\#(index % 7)","b\#(index % 11)","c\#(index % 13)"],"notes":"\#(BenchRecord.notes)"}"#.utf8)
    }

    /// The PocketBase request closest to a Stratus workload.
    static func request(_ workload: Bench.Run.Workload, state: BenchState, worker: Int, sequence: Int, random: inout BenchRandom) -> BenchLoop.Outgoing {
        let container = Int.random(in: 0..<max(1, state.tenants.count), using: &random)
        let zone = Int.random(in: 0..<max(1, state.tenants.first?.zones.count ?? 1), using: &random)
        let record = Int.random(in: 0..<max(1, state.recordsPerZone), using: &random)
        let zoneName = "c\(container)z\(zone)"
        switch workload {
        case .create:
            return .init(method: "POST", path: collectionPath,
                         body: body(id: nil, zone: zoneName, index: record, rank: Int.random(in: 0..<1_048_576, using: &random), titlePrefix: BenchRecord.writtenTitlePrefix),
                         records: 1, contentType: "application/json")
        case .modify:
            return .init(method: "PATCH", path: collectionPath + "/" + id(container: container, zone: zone, record: record),
                         body: body(id: nil, zone: zoneName, index: record, rank: Int.random(in: 0..<1_048_576, using: &random)), records: 1, contentType: "application/json")
        case .queryEq:
            // filter=(zone='cNzM' && title='title-K'), ~10 results, no total count (PocketBase's fast path).
            let filter = "zone%3D%27\(zoneName)%27%20%26%26%20title%3D%27\(BenchRecord.seededTitlePrefix)\(Int.random(in: 0..<BenchRecord.titles(perZone: state.recordsPerZone), using: &random))%27"
            return .init(method: "GET", path: collectionPath + "?filter=\(filter)&perPage=200&skipTotal=1", body: [], records: 10)
        default:
            return .init(method: "GET", path: collectionPath + "/" + id(container: container, zone: zone, record: record), body: [], records: 1)
        }
    }

    /// Creates `containers × zones × perZone` records through PocketBase's API and returns the
    /// state `bench` reads back (tenants stand for the containers; no tokens are needed).
    static func seed(host: String, port: Int, containers: Int, zones: Int, perZone: Int, concurrency: Int) throws -> BenchState {
        let started = Date()
        let counter = Counter()
        let tenants = try parallelMap(Array(0..<containers), concurrency: concurrency) { container -> BenchState.Tenant in
            let connection = BenchConnection(host: host, port: port)
            for zone in 0..<zones {
                for record in 0..<perZone {
                    let (status, body) = try connection.request("POST", collectionPath,
                                                                body: body(id: id(container: container, zone: zone, record: record), zone: "c\(container)z\(zone)",
                                                                           index: record, rank: Int.random(in: 0..<1_048_576), titles: BenchRecord.titles(perZone: perZone)),
                                                                contentType: "application/json")
                    // 400 on a second seed: the id exists already, which is what we want.
                    guard status == 200 || (status == 400 && String(decoding: body, as: UTF8.self).contains("unique")) else {
                        throw CLIError("PocketBase refused a record (HTTP \(status)): \(String(decoding: body.prefix(300), as: UTF8.self))")
                    }
                    counter.add(1)
                }
            }
            if container % max(1, containers / 20) == 0 {
                FileHandle.standardError.write(Data("seeded \(counter.value) PocketBase records in \(Int(Date().timeIntervalSince(started)))s\n".utf8))
            }
            return BenchState.Tenant(container: "c\(container)", query: "", zones: (0..<zones).map { "z\($0)" })
        }
        return BenchState(tenants: tenants, recordsPerZone: perZone)
    }
}
