import Foundation
import StratusCommandLine
import StratusCore

/// A minimal blocking HTTP/1.1 keep-alive client for the load generator: one TCP connection per
/// worker thread, no allocation beyond the request and response bytes. (URLSession's overhead
/// would make the generator, not the server, the bottleneck on a 2-core machine.)
final class BenchConnection {
    let host: String
    let port: Int
    private var fd: Int32 = -1
    private var buffer = [UInt8](repeating: 0, count: 1 << 16)
    private var pending: [UInt8] = []

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    deinit { if fd >= 0 { close(fd) } }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    private func connect() throws {
        if fd >= 0 { close(fd) }
        fd = -1
        fd = try BenchConnection.openSocket(host: host, port: port)
        pending.removeAll(keepingCapacity: true)
    }

    /// A connected TCP socket with Nagle off (blocking unless `nonBlocking`).
    static func openSocket(host: String, port: Int, nonBlocking: Bool = false) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket() failed") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr(host == "localhost" ? "127.0.0.1" : host)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw Failure(description: "cannot connect to \(host):\(port)")
        }
        if nonBlocking { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        return fd
    }

    /// Sends one request and returns (status, body). Reconnects once if the connection was closed.
    func request(_ method: String, _ path: String, body: [UInt8] = [], headers: String = "", contentType: String = "text/plain") throws -> (Int, [UInt8]) {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: \(contentType)\r\n\(headers)"
        head += "Content-Length: \(body.count)\r\n\r\n"
        let message = Array(head.utf8) + body
        for attempt in 0..<2 {
            if fd < 0 { try connect() }
            if sendAll(message), let response = try? readResponse() { return response }
            close(fd)
            fd = -1
            if attempt == 1 { break }
        }
        throw Failure(description: "request failed: connection closed")
    }

    private func sendAll(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return false }
            offset += sent
        }
        return true
    }

    private func fill() throws {
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { throw Failure(description: "connection closed") }
        pending.append(contentsOf: buffer[0..<count])
    }

    private func readResponse() throws -> (Int, [UInt8]) {
        while true {
            if let response = BenchLoop.parse(pending) {
                let body = response.chunked ? BenchLoop.dechunk(pending, in: response.body) : Array(pending[response.body])
                pending.removeFirst(response.total)
                return (response.status, body)
            }
            try fill()
        }
    }
}

/// Drives many keep-alive connections from one thread with `poll(2)`, like wrk: each connection
/// sends a request, waits for the whole response, reports it and sends the next. A thread per
/// connection would spend the shared cores on context switches the server then lacks.
final class BenchLoop {
    /// What a connection sends next: request line target, body, and a tag handed back with the response.
    struct Outgoing {
        var method = "POST"
        var path: String
        var body: [UInt8]
        var records: Int
        var contentType = "text/plain"
        /// Extra header lines, each ending in CRLF.
        var headers = ""
    }

    private struct Connection {
        var fd: Int32
        var out: [UInt8] = []
        var sent = 0
        var received: [UInt8] = []
        var started: UInt64 = 0
        var records = 0
    }

    let host: String
    let port: Int
    private var connections: [Connection] = []

    init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    deinit { for connection in connections where connection.fd >= 0 { close(connection.fd) } }

    /// Runs until `next` returns nil for every connection. `next(connectionIndex)` gives the next
    /// request; `done(status, body, nanoseconds, records)` sees every response (status 0: connection failed).
    func run(connections count: Int, next: (Int) -> Outgoing?, done: (Int, ArraySlice<UInt8>, UInt64, Int) -> Void) throws {
        connections = try (0..<count).map { _ in Connection(fd: try openSocket()) }
        var active = count
        for index in 0..<count { if !start(index, next(index)) { active -= 1 } }
        var fds = [pollfd](repeating: pollfd(), count: count)
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while active > 0 {
            for index in 0..<count {
                let connection = connections[index]
                fds[index] = pollfd(fd: connection.fd, events: Int16(connection.sent < connection.out.count ? POLLOUT : POLLIN), revents: 0)
            }
            let ready = poll(&fds, nfds_t(count), 1000)
            if ready < 0 && errno != EINTR { throw BenchConnection.Failure(description: "poll failed: errno \(errno)") }
            guard ready > 0 else { continue }
            for index in 0..<count where fds[index].fd >= 0 && fds[index].revents != 0 {
                var connection = connections[index]
                var failed = false
                if connection.sent < connection.out.count {
                    let sent = connection.out[connection.sent...].withUnsafeBytes { send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if sent > 0 { connection.sent += sent } else if sent < 0 && errno != EAGAIN { failed = true }
                } else {
                    let count = chunk.withUnsafeMutableBytes { recv(connection.fd, $0.baseAddress, $0.count, 0) }
                    if count > 0 {
                        connection.received.append(contentsOf: chunk[0..<count])
                    } else if count == 0 || errno != EAGAIN {
                        failed = true
                    }
                }
                if failed {
                    close(connection.fd)
                    connection.fd = (try? openSocket()) ?? -1
                    connection.received.removeAll(keepingCapacity: true)
                    let elapsed = DispatchTime.now().uptimeNanoseconds - connection.started
                    connections[index] = connection
                    done(0, [], elapsed, connection.records)
                    if connection.fd < 0 || !start(index, next(index)) { active -= 1; fds[index].fd = -1 }
                    continue
                }
                connections[index] = connection
                if let response = Self.parse(connections[index].received) {
                    let elapsed = DispatchTime.now().uptimeNanoseconds - connections[index].started
                    done(response.status, connections[index].received[response.body], elapsed, connections[index].records)
                    connections[index].received.removeFirst(response.total)
                    if !start(index, next(index)) { active -= 1 }
                }
            }
        }
    }

    private func start(_ index: Int, _ request: Outgoing?) -> Bool {
        guard let request else {
            close(connections[index].fd)
            connections[index].fd = -1
            return false
        }
        let type = request.method == "GET" ? "" : "Content-Type: \(request.contentType)\r\nContent-Length: \(request.body.count)\r\n"
        var head = "\(request.method) \(request.path) HTTP/1.1\r\nHost: \(host)\r\n\(type)\(request.headers)\r\n"
        head.withUTF8 { connections[index].out = Array($0) }
        connections[index].out.append(contentsOf: request.body)
        connections[index].sent = 0
        connections[index].records = request.records
        connections[index].started = DispatchTime.now().uptimeNanoseconds
        return true
    }

    private func openSocket() throws -> Int32 {
        try BenchConnection.openSocket(host: host, port: port, nonBlocking: true)
    }

    /// A complete response at the start of `bytes`.
    struct Response {
        var status: Int
        /// Where the body is; for a chunked body, the whole chunked region (see ``dechunk(_:in:)``).
        var body: Range<Int>
        /// The response's length, head included.
        var total: Int
        var chunked: Bool
    }

    /// The complete response at the start of `bytes`, or nil while it is incomplete. Handles
    /// Content-Length and chunked bodies. Both clients read responses with it: the poll loop and
    /// the blocking connection that seeds.
    static func parse(_ bytes: [UInt8]) -> Response? {
        guard let headerEnd = find([13, 10, 13, 10], in: bytes, from: 0) else { return nil }
        // Read on bytes, not Strings: splitting and lowercasing the head as text was most of the
        // generator's CPU per lookup.
        func number(from start: Int, to end: Int, radix: Int = 10) -> Int {
            Self.number(in: bytes, from: start, to: end, radix: radix)
        }
        func hasPrefix(_ name: [UInt8], at start: Int) -> Bool {
            guard start + name.count <= headerEnd else { return false }
            for offset in 0..<name.count where bytes[start + offset] | 0x20 != name[offset] { return false }
            return true
        }
        let statusStart = (find([UInt8(ascii: " ")], in: bytes[0..<headerEnd], from: 0) ?? headerEnd) + 1
        let status = number(from: statusStart, to: headerEnd)
        var length = 0
        var chunked = false
        var line = (find([13, 10], in: bytes, from: 0) ?? headerEnd) + 2
        while line < headerEnd {
            let lineEnd = find([13, 10], in: bytes, from: line) ?? headerEnd
            if hasPrefix(contentLengthName, at: line) { length = number(from: line + contentLengthName.count, to: lineEnd) }
            if hasPrefix(transferEncodingName, at: line), contains(chunkedName, in: bytes, from: line + transferEncodingName.count, to: lineEnd) {
                chunked = true
            }
            line = lineEnd + 2
        }
        let bodyStart = headerEnd + 4
        guard chunked else {
            guard bytes.count >= bodyStart + length else { return nil }
            return Response(status: status, body: bodyStart..<(bodyStart + length), total: bodyStart + length, chunked: false)
        }
        // Chunked: report the raw chunked region as the body (the poll loop only looks for error codes).
        var position = bodyStart
        while true {
            guard let lineEnd = find([13, 10], in: bytes, from: position) else { return nil }
            let size = number(from: position, to: lineEnd, radix: 16)
            position = lineEnd + 2 + size + 2
            guard bytes.count >= position else { return nil }
            if size == 0 { return Response(status: status, body: bodyStart..<position, total: position, chunked: true) }
        }
    }

    /// The content of a complete chunked region of `bytes` (as ``parse(_:)`` found it), without its framing.
    static func dechunk(_ bytes: [UInt8], in region: Range<Int>) -> [UInt8] {
        var content: [UInt8] = []
        var position = region.lowerBound
        while position < region.upperBound, let lineEnd = find([13, 10], in: bytes, from: position) {
            let size = number(in: bytes, from: position, to: lineEnd, radix: 16)
            guard size > 0 else { break }
            content.append(contentsOf: bytes[(lineEnd + 2)..<(lineEnd + 2 + size)])
            position = lineEnd + 2 + size + 2
        }
        return content
    }

    /// The number written at `start` (after spaces) in `radix`, up to the first other byte or `end`.
    private static func number(in bytes: [UInt8], from start: Int, to end: Int, radix: Int) -> Int {
        var value = 0
        var index = start
        while index < end, bytes[index] == UInt8(ascii: " ") { index += 1 }
        while index < end, let digit = hexDigit(bytes[index]), digit < radix {
            value = value * radix + digit
            index += 1
        }
        return value
    }

    /// Whether `bytes[start..<end]` contains `token` (lowercase), in any letter case: header
    /// values are case-insensitive (RFC 9112 §7), `Chunked` is `chunked`.
    private static func contains(_ token: [UInt8], in bytes: [UInt8], from start: Int, to end: Int) -> Bool {
        guard end - start >= token.count else { return false }
        for candidate in start...(end - token.count) {
            var offset = 0
            while offset < token.count, bytes[candidate + offset] | 0x20 == token[offset] { offset += 1 }
            if offset == token.count { return true }
        }
        return false
    }

    private static let chunkedName = Array("chunked".utf8)
    private static let contentLengthName = Array("content-length:".utf8)
    private static let transferEncodingName = Array("transfer-encoding:".utf8)

    private static func hexDigit(_ byte: UInt8) -> Int? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(byte - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return Int(byte - UInt8(ascii: "a")) + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return Int(byte - UInt8(ascii: "A")) + 10
        default: return nil
        }
    }

    /// The first offset of `needle` in `haystack` at or after offset `from` (offsets count from the start, also for slices).
    /// The generator scans every response body for an error code; a byte-by-byte loop took much
    /// of its CPU on 100-record pages, CPU the server on the same machine then lacked. So it jumps
    /// with `memchr` (vectorised) to each occurrence of one byte of the needle, its first capital
    /// letter when it has one (rarer in JSON than quotes and lowercase letters), and compares there.
    static func find(_ needle: [UInt8], in haystack: some RandomAccessCollection<UInt8>, from: Int) -> Int? {
        haystack.withContiguousStorageIfAvailable { buffer -> Int? in
            guard !needle.isEmpty, from >= 0, buffer.count >= needle.count, from <= buffer.count - needle.count,
                  let base = buffer.baseAddress else { return nil }
            let anchor = needle.firstIndex { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") } ?? 0
            var start = from  // candidate match start
            let last = buffer.count - needle.count
            while start <= last {
                guard let hit = memchr(base + start + anchor, Int32(needle[anchor]), last - start + 1) else { return nil }
                let candidate = UnsafeRawPointer(hit) - UnsafeRawPointer(base) - anchor
                let matches = needle.withUnsafeBytes { memcmp(base + candidate, $0.baseAddress!, needle.count) == 0 }
                if matches { return candidate }
                start = candidate + 1
            }
            return nil
        } ?? nil
    }
}
