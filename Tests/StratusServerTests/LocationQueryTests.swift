import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Location queries (issue 22 §1): `NEAR` with a `distance` in metres, and sorting by distance
/// from a point (`relativeLocation`), checked against a haversine oracle written here (it does
/// not call the server's `Geo`) on 10,000 generated points, clustered at both poles and across
/// the antimeridian as well as spread over the globe.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct LocationQueryTests {
    static let earthRadius = 6_371_008.8

    /// The oracle: great-circle distance by the haversine formula, in metres.
    static func haversine(_ a: (Double, Double), _ b: (Double, Double)) -> Double {
        let rad = Double.pi / 180
        let dLat = (b.0 - a.0) * rad, dLon = (b.1 - a.1) * rad
        let h = sin(dLat / 2) * sin(dLat / 2) + cos(a.0 * rad) * cos(b.0 * rad) * sin(dLon / 2) * sin(dLon / 2)
        return 2 * earthRadius * asin(min(1, sqrt(h)))
    }

    struct Generator {
        var state: UInt64
        mutating func unit() -> Double {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Double(state >> 11) / Double(1 << 53)
        }
        mutating func uniform(_ low: Double, _ high: Double) -> Double { low + (high - low) * unit() }
        /// A point uniform on the sphere.
        mutating func sphere() -> (Double, Double) {
            (asin(uniform(-1, 1)) * 180 / .pi, uniform(-180, 180))
        }
    }

    /// A generated point: uniform, near a pole, astride the antimeridian, or a copy of an earlier one (ties).
    static func points(_ count: Int, random: inout Generator) -> [(Double, Double)] {
        var points: [(Double, Double)] = []
        for index in 0..<count {
            switch index % 10 {
            case 0, 1: points.append((random.uniform(88.5, 90), random.uniform(-180, 180)))       // north pole
            case 2: points.append((random.uniform(-90, -88.5), random.uniform(-180, 180)))        // south pole
            case 3, 4: points.append((random.uniform(-70, 70), random.uniform(179, 180) * (random.unit() < 0.5 ? 1 : -1)))  // antimeridian
            case 5 where index > 100: points.append(points[Int(random.unit() * Double(index - 1))])  // the same place as another
            default: points.append(random.sphere())
            }
        }
        return points
    }

    @Test func nearAndSortByDistanceMatchAHaversineOracle() async throws {
        // With the statistics keeper, as `stratus serve` runs by default: 10,000 records is a table
        // PostgreSQL plans differently once analyzed.
        try await Harness.run(server: { $0.statisticsInterval = ServerConfiguration.defaultStatisticsInterval }) { harness in
            let session = try await harness.container().signedUp()
            var random = Generator(state: 22)
            let points = Self.points(10_000, random: &random)
            var operations: [JSON] = []
            for (index, point) in points.enumerated() {
                let name = String(format: "p-%05d", index)
                operations.append(op("create", name, type: "Place", fields: [
                    "place": ["value": ["latitude": .double(point.0), "longitude": .double(point.1)], "type": "LOCATION"],
                    "kind": ["value": .string(index % 3 == 0 ? "a" : "b")],
                ]))
            }
            for start in stride(from: 0, to: operations.count, by: 200) {
                let saved = try await session.modify("private", Array(operations[start..<min(start + 200, operations.count)]))
                try #require(saved.status == 200 && saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            }
            try await Task.sleep(for: .seconds(2))  // the keeper's next round analyzes the grown tables
            // A LOCATION made just-in-time can be searched and sorted by distance.
            let schema = try await harness.admin(.get, "containers/\(session.container)/schema?environment=development")
            #expect(schema.json["schema"]?.stringValue?.contains("place LOCATION QUERYABLE SORTABLE") == true, "\(schema.json)")

            /// Every page of a query, in order: names and the oracle's distances.
            func run(_ filters: [JSON], sort: JSON?, limit: Int, pages: Int = .max) async throws -> [String]? {
                var names: [String] = []
                var marker: JSON?
                var page = 0
                repeat {
                    var query: [String: JSON] = ["recordType": "Place", "filterBy": .array(filters)]
                    if let sort { query["sortBy"] = [sort] }
                    var body: [String: JSON] = ["query": .object(query), "resultsLimit": .int(Int64(limit)), "desiredKeys": ["kind"]]
                    if let marker { body["continuationMarker"] = marker }
                    let answer = try await session.post("private", "records/query", .object(body))
                    guard answer.status == 200 else { Issue.record("\(filters) \(String(describing: sort)): \(answer.json)"); return nil }
                    names += (answer.json["records"]?.arrayValue ?? []).compactMap { $0["recordName"]?.stringValue }
                    marker = answer.json["continuationMarker"]
                    page += 1
                } while marker != nil && page < pages
                return names
            }
            func location(_ point: (Double, Double)) -> JSON {
                ["value": ["latitude": .double(point.0), "longitude": .double(point.1)], "type": "LOCATION"]
            }
            func index(_ name: String) -> Int { Int(name.dropFirst(2))! }

            var centers: [(Double, Double)] = [(90, 0), (-90, 17), (89.95, 135), (-89.9, -45), (0, 180), (0, -180), (45, 179.99), (-30, -179.97),
                                               (60, 180), (89.5, 179.9), (-89.99, -179.99)]
            for _ in 0..<29 { centers.append(random.unit() < 0.5 ? points[Int(random.unit() * Double(points.count))] : random.sphere()) }
            let radii: [Double] = [50, 1_000, 25_000, 150_000, 400_000, 1_200_000, 3_000_000]
            var cases = 0, misses = 0, beyond = 0, disorder = 0, repeats = 0, checkedRecords = 0
            var failures: [String] = []
            for (number, center) in centers.enumerated() {
                let radius = number == 0 ? 20_015_000 : radii[number % radii.count] * (0.5 + random.unit())
                let ascending = number % 4 != 3
                let narrowed = number % 5 == 4  // an equality filter first: NEAR is tested per record, not driving
                var filters: [JSON] = [["fieldName": "place", "comparator": "NEAR", "fieldValue": location(center), "distance": .double(radius)]]
                if narrowed { filters.insert(["fieldName": "kind", "comparator": "EQUALS", "fieldValue": ["value": "a"]], at: 0) }
                let sort: JSON = ["fieldName": "place", "relativeLocation": location(center), "ascending": .bool(ascending)]
                guard let names = try await run(filters, sort: sort, limit: number == 0 ? 200 : [50, 100, 200][number % 3]) else { continue }
                cases += 1
                checkedRecords += names.count
                let distances = names.map { Self.haversine(center, points[index($0)]) }
                let expected = Set(points.indices.filter { (!narrowed || $0 % 3 == 0) && Self.haversine(center, points[$0]) <= radius })
                let found = names.map(index)
                if Set(found).count != found.count { repeats += 1 }
                let missing = expected.subtracting(found)
                misses += missing.count
                let far = zip(found, distances).filter { $0.1 > radius * 1.005 }
                beyond += far.count
                for i in names.indices.dropFirst() {
                    let (previous, current) = (distances[i - 1], distances[i])
                    let tie = abs(previous - current) <= 1e-6  // the same place (two libms may differ in the last bits)
                    let ordered = tie ? names[i - 1] < names[i] : (ascending ? previous < current : previous > current)
                    if !ordered {
                        disorder += 1
                        if disorder < 6 { failures.append("order \(center) \(Int(radius)) asc \(ascending) narrowed \(narrowed)  at \(i): \(names[i - 1]) \(previous) then \(names[i]) \(current)") }
                    }
                }
                if !missing.isEmpty || !far.isEmpty {
                    failures.append("NEAR \(center) \(Int(radius)) m: \(missing.count) missed (e.g. \(missing.sorted().prefix(3).map { (points[$0], Self.haversine(center, points[$0])) })), \(far.count) beyond")
                }
            }
            print(failures.prefix(8).joined(separator: "\n"))
            print("NEAR against the haversine oracle: 10000 points, \(cases) circles, \(checkedRecords) records returned in pages; \(misses) missed, \(beyond) beyond radius + 0.5 %, \(disorder) out of order, \(repeats) queries repeating a record")
            #expect(cases == centers.count)
            #expect(misses == 0 && beyond == 0 && disorder == 0 && repeats == 0, "\(failures.prefix(5).joined(separator: "\n"))")
            #expect(checkedRecords > 2_000, "the circles should hold a fair share of the points")

            // Sorting by distance without NEAR: the first pages are the nearest records overall.
            for (center, ascending) in [((51.5, -0.12), true), ((-33.9, 151.2), false), ((90.0, 0.0), true)] {
                let sort: JSON = ["fieldName": "place", "relativeLocation": location(center), "ascending": .bool(ascending)]
                guard let names = try await run([], sort: sort, limit: 100, pages: 2) else { continue }
                let distances: [Double] = points.map { Self.haversine(center, $0) }
                let sorted: [Double] = ascending ? distances.sorted(by: <) : distances.sorted(by: >)
                let expected: [Double] = Array(sorted.prefix(200))
                // Names may differ only among equal distances; compare the distances position by position.
                let got = names.map { Self.haversine(center, points[index($0)]) }
                #expect(names.count == 200)
                #expect(zip(got, expected).allSatisfy { abs($0 - $1) <= 1e-6 * max(1, $1) }, "sort from \(center) ascending \(ascending)")
                #expect(Set(names).count == names.count)
            }
        }
    }

    @Test func nearMatchesAnyPointOfALocationList() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            func point(_ latitude: Double, _ longitude: Double) -> JSON { ["latitude": .double(latitude), "longitude": .double(longitude)] }
            let saved = try await session.modify("private", [
                op("create", "route-1", type: "Route", fields: ["stops": ["value": [point(48.8566, 2.3522), point(52.52, 13.405)], "type": "LOCATION_LIST"]]),
                op("create", "route-2", type: "Route", fields: ["stops": ["value": [point(40.4168, -3.7038), point(48.86, 2.35), point(48.85, 2.34)], "type": "LOCATION_LIST"]]),
                op("create", "route-3", type: "Route", fields: ["stops": ["value": [point(35.6762, 139.6503)], "type": "LOCATION_LIST"]]),
            ])
            try #require(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            let paris: JSON = ["value": point(48.8566, 2.3522)]
            let near = try await session.post("private", "records/query", ["query": ["recordType": "Route",
                "filterBy": [["fieldName": "stops", "comparator": "NEAR", "fieldValue": paris, "distance": 5_000]]]])
            // route-2 has two stops in the circle and comes once.
            #expect(near.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["route-1", "route-2"], "\(near.json)")
            let berlin = try await session.post("private", "records/query", ["query": ["recordType": "Route",
                "filterBy": [["fieldName": "stops", "comparator": "NEAR", "fieldValue": ["value": point(52.5, 13.4)], "distance": 10_000]]]])
            #expect(berlin.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["route-1"], "\(berlin.json)")
            // Deleting a record drops its points from the index.
            let deleted = try await session.modify("private", [["operationType": "forceDelete", "record": ["recordName": "route-1"]]])
            #expect(deleted.status == 200 && deleted.json.record(0)?.errorCode == nil, "\(deleted.json)")
            let after = try await session.post("private", "records/query", ["query": ["recordType": "Route",
                "filterBy": [["fieldName": "stops", "comparator": "NEAR", "fieldValue": paris, "distance": 5_000]]]])
            #expect(after.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["route-2"], "\(after.json)")
        }
    }

    /// Records without the LOCATION come after the others nearest first, before them farthest first.
    @Test func sortByDistancePlacesRecordsWithoutTheField() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            func place(_ latitude: Double, _ longitude: Double) -> [String: JSON] {
                ["place": ["value": ["latitude": .double(latitude), "longitude": .double(longitude)], "type": "LOCATION"]]
            }
            let saved = try await session.modify("private", [op("create", "far", type: "Shop", fields: place(0, 1)),
                                                             op("create", "near", type: "Shop", fields: place(0, 0.001)),
                                                             op("create", "nowhere", type: "Shop", fields: ["name": ["value": "x"]])])
            try #require(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            for (ascending, expected) in [(true, ["near", "far", "nowhere"]), (false, ["nowhere", "far", "near"])] {
                let answer = try await session.post("private", "records/query", ["query": ["recordType": "Shop", "sortBy": [[
                    "fieldName": "place", "relativeLocation": ["value": ["latitude": 0, "longitude": 0]], "ascending": .bool(ascending)]]]])
                #expect(answer.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == expected, "ascending \(ascending): \(answer.json)")
            }
        }
    }

    @Test func badLocationQueriesSayWhatToChange() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let schema = """
                DEFINE SCHEMA
                  RECORD TYPE Shop (name STRING QUERYABLE, place LOCATION QUERYABLE, plain LOCATION, stops LIST<LOCATION> QUERYABLE,
                                    GRANT READ, CREATE, WRITE TO "_icloud");
                """
            #expect(try await harness.admin(.post, "containers/\(session.container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let here: JSON = ["value": ["latitude": 10, "longitude": 20]]
            let filters: [(JSON, String)] = [
                (["fieldName": "name", "comparator": "NEAR", "fieldValue": here, "distance": 10], "use a LOCATION field"),
                (["fieldName": "plain", "comparator": "NEAR", "fieldValue": here, "distance": 10], "mark it QUERYABLE"),
                (["fieldName": "place", "comparator": "NEAR", "fieldValue": here, "distance": -1], "between 0 and 20015115 metres"),
                (["fieldName": "place", "comparator": "NEAR", "fieldValue": here, "distance": 1e12], "between 0 and"),
                (["fieldName": "place", "comparator": "NEAR", "fieldValue": here], "needs 'distance'"),
                (["fieldName": "place", "comparator": "NEAR", "fieldValue": here, "distance": "far"], "must be a number of metres"),
                (["fieldName": "place", "comparator": "NEAR", "fieldValue": ["value": ["latitude": 95, "longitude": 0]], "distance": 10], "within ±90"),
                (["fieldName": "place", "comparator": "NEAR", "distance": 10], "needs a 'fieldValue'"),
                (["fieldName": "place", "comparator": "EQUALS", "fieldValue": here], "only be filtered with NEAR"),
            ]
            for (filter, words) in filters {
                let answer = try await session.post("private", "records/query", ["query": ["recordType": "Shop", "filterBy": [filter]]])
                #expect(answer.status == 400 && answer.json["serverErrorCode"] == "BAD_REQUEST" && answer.json["reason"]?.stringValue?.contains(words) == true,
                        "\(filter): \(answer.json)")
            }
            let sorts: [(JSON, String)] = [
                (["fieldName": "name", "relativeLocation": here], "is not a LOCATION field"),
                (["fieldName": "plain", "relativeLocation": here], "needs a SORTABLE (or QUERYABLE) index"),
                (["fieldName": "place"], "add 'relativeLocation'"),
                (["fieldName": "stops", "relativeLocation": here], "is a LIST<LOCATION>"),
                (["fieldName": "place", "relativeLocation": ["value": "here"]], "LOCATION"),
            ]
            for (sort, words) in sorts {
                let answer = try await session.post("private", "records/query", ["query": ["recordType": "Shop", "sortBy": [sort]]])
                #expect(answer.status == 400 && answer.json["reason"]?.stringValue?.contains(words) == true, "\(sort): \(answer.json)")
            }
        }
    }

    /// A deploy that adds QUERYABLE to a LOCATION builds its index over production's existing records.
    @Test func deployBuildsTheLocationIndexForExistingRecords() async throws {
        try await Harness.run { harness in
            let plain = "DEFINE SCHEMA\n  RECORD TYPE Shop (place LOCATION, GRANT READ, CREATE, WRITE TO \"_icloud\");\n"
            let production = try await harness.production(plain, prefix: "Places")
            let name = production.container
            let saved = try await production.modify("public", [op("create", "old", type: "Shop", fields: ["place": ["value": ["latitude": -33.8688, "longitude": 151.2093]]])])
            #expect(saved.json.record(0)?.errorCode == nil, "\(saved.json)")
            let query: JSON = ["query": ["recordType": "Shop", "filterBy": [["fieldName": "place", "comparator": "NEAR",
                "fieldValue": ["value": ["latitude": -33.87, "longitude": 151.21]], "distance": 1_000]]]]
            let before = try await production.post("public", "records/query", query)
            #expect(before.status == 400 && before.json["reason"]?.stringValue?.contains("then deploy the schema") == true, "\(before.json)")
            let queryable = plain.replacingOccurrences(of: "place LOCATION,", with: "place LOCATION QUERYABLE,")
            try await harness.deploy(queryable, to: name)
            try await harness.buildIndexes(name)
            let after = try await production.post("public", "records/query", query)
            #expect(after.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["old"], "\(after.json)")
        }
    }
}
