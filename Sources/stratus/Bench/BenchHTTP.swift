import Foundation
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
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
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
            fd = -1
            throw Failure(description: "cannot connect to \(host):\(port)")
        }
        pending.removeAll(keepingCapacity: true)
    }

    /// Sends one request and returns (status, body). Reconnects once if the connection was closed.
    func request(_ method: String, _ path: String, body: [UInt8] = [], headers: String = "") throws -> (Int, [UInt8]) {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host)\r\nContent-Type: text/plain\r\n\(headers)"
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
        var headerEnd: Int?
        while headerEnd == nil {
            if pending.count >= 4 {
                for index in 0...(pending.count - 4) where pending[index] == 13 && pending[index + 1] == 10 && pending[index + 2] == 13 && pending[index + 3] == 10 {
                    headerEnd = index
                    break
                }
            }
            if headerEnd == nil { try fill() }
        }
        let head = String(decoding: pending[0..<headerEnd!], as: UTF8.self)
        let lines = head.split(separator: "\r\n")
        let status = lines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        var length = 0
        var chunked = false
        for line in lines.dropFirst() {
            let lower = line.lowercased()
            if lower.hasPrefix("content-length:") { length = Int(lower.dropFirst(15).trimmingCharacters(in: .whitespaces)) ?? 0 }
            if lower.hasPrefix("transfer-encoding:") && lower.contains("chunked") { chunked = true }
        }
        pending.removeFirst(headerEnd! + 4)
        if chunked {
            var body: [UInt8] = []
            while true {
                var lineEnd: Int?
                while lineEnd == nil {
                    if pending.count >= 2 { for index in 0..<(pending.count - 1) where pending[index] == 13 && pending[index + 1] == 10 { lineEnd = index; break } }
                    if lineEnd == nil { try fill() }
                }
                let size = Int(String(decoding: pending[0..<lineEnd!], as: UTF8.self).split(separator: ";")[0], radix: 16) ?? 0
                pending.removeFirst(lineEnd! + 2)
                while pending.count < size + 2 { try fill() }
                body.append(contentsOf: pending[0..<size])
                pending.removeFirst(size + 2)
                if size == 0 { return (status, body) }
            }
        }
        while pending.count < length { try fill() }
        let body = Array(pending[0..<length])
        pending.removeFirst(length)
        return (status, body)
    }
}
