import ArgumentParser
import Foundation
import StratusCommandLine
import StratusCore

/// The records of the `query-near` and `query-text` workloads: `Place` records in the zone
/// `places` of the first bench container's private database (`bench seed --places N`).
///
/// - Each place lies at a point spread uniformly (by latitude and longitude) over a 10° × 10° box,
///   40–50° N, 0–10° E. `query-near` asks for the places within the radius that holds ~20 of them
///   on average (it shrinks as the zone grows, so the answer stays ~20 records at any size),
///   around a centre inside the box's inner 8° × 8°, nearest first.
/// - Each place's text is `Café aX bY Notes`, where place i is in group g = i / 10 and
///   X = g mod V, Y = g mod (V + 1), with V = max(1, N / 100) (so each word is in ~100 places).
///   `query-text` asks CONTAINS_ALL_TOKENS for the two words of a random group: ~10 places
///   hold both, whatever the zone's size.
enum BenchPlaces {
    static let zone = "places"
    static let south = 40.0, west = 0.0, span = 10.0
    /// How many places the radius of `query-near` holds on average.
    static let wanted = 20.0

    /// The point of place `index`: a fixed pseudo-random spread, the same in every run.
    static func point(_ index: Int) -> GeoPoint {
        var hash = UInt64(truncatingIfNeeded: index) &* 0x9E37_79B9_7F4A_7C15
        func unit() -> Double {
            hash = (hash ^ (hash >> 31)) &* 0xBF58_476D_1CE4_E5B9
            hash = (hash ^ (hash >> 29)) &* 0x94D0_49BB_1331_11EB
            hash ^= hash >> 32
            return Double(hash >> 11) / Double(1 << 53)
        }
        return GeoPoint(latitude: south + span * unit(), longitude: west + span * unit())
    }

    /// Distinct first words: each word is in ~100 places.
    static func vocabulary(_ places: Int) -> Int { max(1, places / 100) }
    static func groups(_ places: Int) -> Int { max(1, places / 10) }

    /// The two words of group `group`.
    static func words(group: Int, places: Int) -> (String, String) {
        let size = vocabulary(places)
        return ("a\(group % size)", "b\(group % (size + 1))")
    }

    static func text(_ index: Int, places: Int) -> String {
        let (first, second) = words(group: index / 10, places: places)
        return "Café \(first) \(second.uppercased()) Notes"
    }

    /// The radius holding `wanted` places on average when `places` are spread over the box.
    static func radius(places: Int) -> Double {
        let φ1 = south * .pi / 180, φ2 = (south + span) * .pi / 180
        let area = Geo.earthRadius * Geo.earthRadius * (span * .pi / 180) * (sin(φ2) - sin(φ1))
        return (wanted * area / Double(max(1, places)) / .pi).squareRoot()
    }

    /// A random centre for `query-near`, inside the box by a margin (the circle stays in the box).
    static func center(using random: inout BenchRandom) -> GeoPoint {
        GeoPoint(latitude: south + 1 + Double.random(in: 0..<(span - 2), using: &random),
                 longitude: west + 1 + Double.random(in: 0..<(span - 2), using: &random))
    }

    static let schema = """
            RECORD TYPE Place (
                place LOCATION QUERYABLE SORTABLE,
                note STRING SEARCHABLE,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ TO "_world"
            );
        """

    static func create(_ index: Int, places: Int) -> String {
        let point = point(index)
        return #"{"operationType":"forceReplace","record":{"recordType":"Place","recordName":"place-\#(index)","fields":{"place":{"value":{"latitude":\#(point.latitude),"longitude":\#(point.longitude)}},"note":{"value":"\#(text(index, places: places))"}}}}"#
    }

    static func nearQuery(_ center: GeoPoint, radius: Double) -> String {
        let location = #"{"value":{"latitude":\#(center.latitude),"longitude":\#(center.longitude)},"type":"LOCATION"}"#
        return #"{"zoneID":{"zoneName":"\#(zone)"},"query":{"recordType":"Place","filterBy":[{"fieldName":"place","comparator":"NEAR","fieldValue":\#(location),"distance":\#(radius)}],"sortBy":[{"fieldName":"place","relativeLocation":\#(location)}]}}"#
    }

    static func textQuery(group: Int, places: Int) -> String {
        let (first, second) = words(group: group, places: places)
        return #"{"zoneID":{"zoneName":"\#(zone)"},"query":{"recordType":"Place","filterBy":[{"fieldName":"note","comparator":"CONTAINS_ALL_TOKENS","fieldValue":{"value":"\#(first) \#(second)"}}]}}"#
    }

    /// Seeds `places` places into the first tenant's `places` zone, `concurrency` requests at a time.
    static func seed(_ tenant: BenchState.Tenant, places: Int, host: String, port: Int, concurrency: Int) throws {
        let connection = BenchConnection(host: host, port: port)
        let base = "/database/1/\(tenant.container)/development/private/"
        let (status, body) = try connection.request("POST", base + "zones/modify?" + tenant.query,
                                                    body: Array(#"{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"\#(zone)"}}}]}"#.utf8))
        guard status == 200 else { throw CLIError("zone \(zone) in \(tenant.container): \(String(decoding: body, as: UTF8.self))") }
        let started = Date()
        let counter = Counter()
        let batches = Array(stride(from: 0, to: places, by: 200))
        _ = try parallelMap(batches, concurrency: concurrency) { start in
            let connection = BenchConnection(host: host, port: port)
            let end = min(places, start + 200)
            let operations = (start..<end).map { create($0, places: places) }.joined(separator: ",")
            let (status, body) = try connection.request("POST", base + "records/modify?" + tenant.query,
                                                        body: Array(#"{"zoneID":{"zoneName":"\#(zone)"},"atomic":false,"operations":[\#(operations)]}"#.utf8))
            guard status == 200 else { throw CLIError("places in \(tenant.container): \(String(decoding: body.prefix(300), as: UTF8.self))") }
            counter.add(end - start)
            if (start / 200) % 250 == 0 {
                FileHandle.standardError.write(Data("seeded \(counter.value) of \(places) places in \(Int(Date().timeIntervalSince(started)))s\n".utf8))
            }
        }
    }
}

extension Bench {
    /// `stratus-bench near-sample`: the circles `query-near` asks for, with the cell ranges the
    /// service covers each with, for the pgbench baseline of Deploy/bench/bench.sh (which cannot compute them).
    struct NearSample: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "near-sample",
            abstract: "Print random query-near circles and their index cell ranges, tab-separated (for Deploy/bench/bench.sh's pgbench baseline).")

        @OptionGroup var options: Bench.Options
        @Option(help: "How many circles.") var count = 2000

        func run() throws {
            guard let text = try? String(contentsOfFile: options.stateFile, encoding: .utf8) else {
                throw ValidationError("no seeded data at \(options.stateFile): run 'stratus-bench seed --places N' first")
            }
            let state = try BenchState(json: try JSONParser.parse(text))
            guard state.places > 0 else { throw ValidationError("the seeded data has no places: run 'stratus-bench seed --places N' first") }
            let radius = BenchPlaces.radius(places: state.places)
            var random = BenchRandom()
            for index in 1...max(1, count) {
                let center = BenchPlaces.center(using: &random)
                let cells = Geo.slots(center, distance: radius).map { "\($0.low)\t\($0.high)" }.joined(separator: "\t")
                print("\(index)\t\(center.latitude)\t\(center.longitude)\t\(Geo.comparedRadius(radius))\t\(cells)")
            }
        }
    }
}
