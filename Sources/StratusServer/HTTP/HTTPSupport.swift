import Foundation
import HTTPTypes
import NIOCore
import Synchronization

// Small parts of the HTTP service: connection counts per address, the Date header, the
// executor that runs a connection's task on its event loop.

/// Open connections per client address (one count for the whole server).
final class ConnectionCounts: Sendable {
    let limit: Int
    private let open = Mutex<[String: Int]>([:])

    init(limit: Int) {
        self.limit = limit
    }

    /// Counts a new connection from `address`, or `false` when it already has `limit` open.
    func open(_ address: String) -> Bool {
        open.withLock { counts in
            let count = counts[address, default: 0]
            guard count < limit else { return false }
            counts[address] = count + 1
            return true
        }
    }

    func close(_ address: String) {
        open.withLock { counts in
            let count = counts[address, default: 1] - 1
            counts[address] = count > 0 ? count : nil
        }
    }
}

/// The `Date` header's text, made once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static var now: String {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        let second = Int(spec.tv_sec)
        return cache.withLock { cache in
            if cache.second != second { cache = (second, format(second)) }
            return cache.text
        }
    }

    /// IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func format(_ seconds: Int) -> String {
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}

/// Runs a task's jobs on a NIO event loop: a connection's task on its channel's loop, so the
/// request arrives, is answered and is written without waking another thread.
final class EventLoopTaskExecutor: TaskExecutor {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// The query string of a request target, read for a few named parameters.
///
/// Hummingbird's `URI.queryParameters` splits and percent-decodes every parameter into a new
/// dictionary on each use, a visible cost for `records/lookup`, which reads two or three
/// parameters once. This finds a parameter by scanning the query's bytes, and decodes only
/// the value asked for, as Hummingbird does (percent-escapes; a value that does not decode is
/// taken as it is).
struct QueryItems {
    private let query: Substring

    /// The query of `target` (a request's path, `?` and query): everything after the first `?`.
    init(target: String?) {
        guard let target, let mark = target.utf8.firstIndex(of: UInt8(ascii: "?")) else {
            query = ""
            return
        }
        query = target[target.utf8.index(after: mark)...]
    }

    /// The first value given for `name`; empty for a parameter without `=`.
    func get(_ name: String) -> String? {
        guard !name.isEmpty else { return nil }
        var query = query
        var escaped = false
        let found: Range<Int>?? = query.withUTF8 { bytes in
            var name = name
            let found = name.withUTF8 { name in Self.value(of: name, in: bytes) }
            if let found, let range = found {
                escaped = memchr(bytes.baseAddress! + range.lowerBound, Int32(UInt8(ascii: "%")), range.count) != nil
            }
            return found
        }
        guard let found, let range = found else { return found == nil ? nil : "" }
        let value = String(query.utf8.dropFirst(range.lowerBound).prefix(range.count))!
        return escaped ? value.removingPercentEncoding ?? value : value
    }

    /// The session's web auth token: `ckWebAuthToken`, or `ckSession` as CloudKit JS 1.x names
    /// it. `null`, `undefined` and an empty value mean signed out: CloudKit JS 1.2.0 sends
    /// `ckSession=null` when nobody is signed in, and expects AUTHENTICATION_REQUIRED (421) with
    /// the sign-in URL, not a refused token.
    var webAuthToken: String? {
        for name in ["ckWebAuthToken", "ckSession"] {
            if let value = get(name), !Self.meansSignedOut(value) { return value }
        }
        return nil
    }

    /// Whether a session parameter's value says "nobody is signed in".
    static func meansSignedOut(_ value: String) -> Bool {
        value.isEmpty || value == "null" || value == "undefined"
    }

    /// Where the value of the first `name` parameter lies in `query`: `nil` when there is none,
    /// `.some(nil)` when it has no `=`.
    private static func value(of name: UnsafeBufferPointer<UInt8>, in query: UnsafeBufferPointer<UInt8>) -> Range<Int>?? {
        var start = 0
        while start < query.count {
            var end = start
            while end < query.count, query[end] != UInt8(ascii: "&") { end += 1 }
            var equals = start
            while equals < end, query[equals] != UInt8(ascii: "=") { equals += 1 }
            if equals - start == name.count, memcmp(query.baseAddress! + start, name.baseAddress!, name.count) == 0 {
                return equals < end ? .some(equals + 1..<end) : .some(nil)
            }
            start = end + 1
        }
        return nil
    }
}

extension HTTPFields {
    /// The first value of `name`. The subscript joins every value of a name into a new string
    /// (through generic code that looks its types up at run time), which a read of one
    /// `Content-Length` on every request does not need.
    func first(_ name: HTTPField.Name) -> String? {
        for field in self where field.name == name { return field.value }
        return nil
    }
}
