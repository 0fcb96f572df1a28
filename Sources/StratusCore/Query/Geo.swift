import Foundation

/// A point on the Earth, in degrees.
public struct GeoPoint: Sendable, Equatable, Hashable {
    public var latitude: Double
    public var longitude: Double

    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// Location indexing for LOCATION fields: `NEAR` filters and sorting by distance (`relativeLocation`).
///
/// Distances are great-circle distances on a sphere of the Earth's mean radius (haversine), in
/// metres. Each indexed location is stored as one index entry under the field's geo key, with its
/// exact latitude and longitude and a cell: the Z-order (Morton) interleaving of the latitude and
/// longitude quantized to 31 bits each. A cell of level L (its top L bits of each coordinate) is
/// one contiguous range of codes, so the cells covering a circle's bounding box are a few index
/// ranges; the entries in them are candidates, and the exact distance decides.
public enum Geo {
    /// The Earth's mean radius (IUGG), in metres.
    public static let earthRadius = 6_371_008.8
    /// The largest meaningful `distance`: half the Earth's circumference (every point is nearer).
    public static let maximumDistance = Double.pi * earthRadius
    /// Bits of each quantized coordinate.
    static let bits = 31
    /// Most cells (index ranges) one `NEAR` is covered by; SQL has this many range slots.
    public static let maximumCells = 16

    /// The key under which a LOCATION field's entries are stored in the index entries. A field name
    /// starts with a letter, so no field can have this name.
    public static func key(of field: String) -> String { "~geo:" + field }

    static func quantizedLatitude(_ latitude: Double) -> Int64 {
        let scaled = ((latitude + 90) / 180 * Double(1 << bits)).rounded(.down)
        return Int64(max(0, min(Double((1 << bits) - 1), scaled)))
    }

    static func quantizedLongitude(_ longitude: Double) -> Int64 {
        let scaled = ((longitude + 180) / 360 * Double(1 << bits)).rounded(.down)
        return Int64(max(0, min(Double((1 << bits) - 1), scaled)))
    }

    /// Spreads the low 31 bits of `value` to the even bit positions.
    static func spread(_ value: Int64) -> Int64 {
        var x = UInt64(value) & 0x7FFF_FFFF
        x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF
        x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF
        x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F
        x = (x | (x << 2)) & 0x3333_3333_3333_3333
        x = (x | (x << 1)) & 0x5555_5555_5555_5555
        return Int64(x)
    }

    /// The cell code of a point: longitude bits at even positions, latitude bits at odd ones (62 bits, never negative).
    public static func cell(_ point: GeoPoint) -> Int64 {
        spread(quantizedLongitude(point.longitude)) | (spread(quantizedLatitude(point.latitude)) << 1)
    }

    /// Ranges of cell codes (both ends included) that together hold every point within `distance`
    /// metres of `center` (and others near it), at most `maximumCells` of them, ascending and disjoint.
    public static func cover(_ center: GeoPoint, distance: Double) -> [ClosedRange<Int64>] {
        // Angular radius, with a margin for rounding: the exact distance test decides anyway.
        let δ = (distance / earthRadius) * (1 + 1e-9) + 1e-12
        let δDegrees = δ * 180 / .pi + 1e-7
        let south = center.latitude - δDegrees, north = center.latitude + δDegrees
        var longitudes: [(Double, Double)]
        let φ = center.latitude * .pi / 180
        if south <= -90 || north >= 90 || sin(δ) >= cos(φ) {
            longitudes = [(-180, 180)]  // the circle holds a pole, or reaches every meridian
        } else {
            // The meridians tangent to the circle are asin(sin δ / cos φ) from its centre's.
            let half = asin(sin(δ) / cos(φ)) * 180 / .pi + 1e-7
            let west = center.longitude - half, east = center.longitude + half
            if half >= 180 { longitudes = [(-180, 180)] }
            else if west < -180 { longitudes = [(west + 360, 180), (-180, east)] }
            else if east > 180 { longitudes = [(west, 180), (-180, east - 360)] }
            else { longitudes = [(west, east)] }
        }
        let rows = (quantizedLatitude(max(-90, south)), quantizedLatitude(min(90, north)))
        let columns = longitudes.map { (quantizedLongitude($0.0), quantizedLongitude($0.1)) }
        // The finest level whose cells over the box are few enough.
        var level = bits
        while level > 0 {
            let shift = Int64(bits - level)
            let rowCount = (rows.1 >> shift) - (rows.0 >> shift) + 1
            let columnCount = columns.reduce(Int64(0)) { $0 + ($1.1 >> shift) - ($1.0 >> shift) + 1 }
            if rowCount * columnCount <= Int64(maximumCells) { break }
            level -= 1
        }
        let shift = Int64(bits - level)
        var starts: Set<Int64> = []
        for row in (rows.0 >> shift)...(rows.1 >> shift) {
            for range in columns {
                for column in (range.0 >> shift)...(range.1 >> shift) {
                    starts.insert(spread(column << shift) | (spread(row << shift) << 1))
                }
            }
        }
        // A cell of this level spans 4^shift codes from its first; adjacent ranges are merged.
        let width = Int64(1) << (2 * shift)
        var ranges: [ClosedRange<Int64>] = []
        for start in starts.sorted() {
            if let last = ranges.last, last.upperBound + 1 == start {
                ranges[ranges.count - 1] = last.lowerBound...(start + width - 1)
            } else {
                ranges.append(start...(start + width - 1))
            }
        }
        return ranges
    }

    /// `cover` as exactly `maximumCells` (low, high) slots, the unused ones (-1, -1): the query's
    /// text, and so its prepared statement, is the same for every circle.
    public static func slots(_ center: GeoPoint, distance: Double) -> [(low: Int64, high: Int64)] {
        let ranges = cover(center, distance: distance).map { (low: $0.lowerBound, high: $0.upperBound) }
        return ranges + Array(repeating: (low: -1, high: -1), count: maximumCells - ranges.count)
    }

    /// The radius a `NEAR` compares haversine distances with: a hair wider than asked, for the last
    /// bits of rounding (a point the formula puts exactly on the circle is never missed).
    public static func comparedRadius(_ distance: Double) -> Double {
        distance * (1 + 1e-12) + 1e-9
    }

    /// The haversine distance in metres between two points, by the formula the store's SQL uses.
    public static func haversine(_ a: GeoPoint, _ b: GeoPoint) -> Double {
        func radians(_ degrees: Double) -> Double { degrees * .pi / 180 }
        let h = pow(sin(radians(a.latitude - b.latitude) / 2), 2)
            + cos(radians(a.latitude)) * cos(radians(b.latitude)) * pow(sin(radians(a.longitude - b.longitude) / 2), 2)
        return 2 * earthRadius * asin(min(1, sqrt(h)))
    }
}
