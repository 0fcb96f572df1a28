import Foundation
#if canImport(Glibc)
import Glibc
#endif
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import StratusCore
@testable import StratusServer

/// The HTTP channel `stratus serve` runs (`StratusHTTPChannel`, NIO's parser then the service's
/// own handler), listening on loopback in this process, with a responder that does what the
/// service does with a request before it needs a database: match the data-API and courier paths,
/// read the signature, asset and CORS headers, and read the body up to its limit. Each input is
/// sent as the bytes of one connection, then the write side is shut; whatever comes back must be
/// HTTP (or nothing), within the idle timeout, and the server must keep serving.
enum HTTPTarget {
    /// The port the in-process server listens on (started on first use).
    static let port: Int = {
        let ready = DispatchSemaphore(value: 0)
        let box = PortBox()
        Thread.detachNewThread {
            let channel = StratusHTTPChannel(responder: FuzzResponder(), maximumBodyBytes: 64 * 1024, idleTimeout: .seconds(2),
                                             serverHeaders: HTTPWire.serverHeaders(name: "Stratus"), connections: ConnectionCounts(limit: 1024))
            var logger = Logger(label: "stratus-fuzz")
            logger.logLevel = .critical
            let application = Application(responder: FuzzResponder(), server: HTTPServerBuilder { _ in channel },
                                          configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                                          onServerRunning: { channel in
                                              box.port = channel.localAddress?.port ?? 0
                                              ready.signal()
                                          }, logger: logger)
            let done = DispatchSemaphore(value: 0)
            Task {
                do { try await application.runService() } catch { FuzzFailure.fail("the HTTP server stopped: \(error)") }
                done.signal()
            }
            done.wait()
        }
        ready.wait()
        return box.port
    }()

    final class PortBox: @unchecked Sendable { var port = 0 }

    static func run(_ bytes: [UInt8]) {
        let answer = exchange(bytes)
        if !answer.isEmpty, !answer.starts(with: Array("HTTP/1.".utf8)) {
            FuzzFailure.fail("the server answered something that is not HTTP: \(String(decoding: answer.prefix(200), as: UTF8.self))")
        }
        // Still serving: a well-formed request is answered.
        if bytes.count % 64 == 0 {
            let health = exchange(Array("GET /fuzz/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
            guard health.starts(with: Array("HTTP/1.1 200".utf8)) else {
                usleep(200_000)
                let again = exchange(Array("GET /fuzz/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8))
                FuzzFailure.fail("the server stopped answering after an input: \(String(decoding: health.prefix(200), as: UTF8.self)); 0.2 s later: \(String(decoding: again.prefix(300), as: UTF8.self))")
            }
        }
    }

    /// Sends `bytes` on a new connection, shuts the write side, and reads until the server closes
    /// (at most 5 seconds: the idle timeout is 2).
    static func exchange(_ bytes: [UInt8]) -> [UInt8] {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { FuzzFailure.fail("no socket: \(errno)") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        // libFuzzer's timer (SIGALRM, for -timeout) interrupts system calls: each is retried.
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected != 0 {
            guard errno == EINTR else { FuzzFailure.fail("cannot connect to the fuzzed server: \(errno)") }
            var ready = pollfd(fd: socket, events: Int16(POLLOUT), revents: 0)
            while poll(&ready, 1, 5000) < 0, errno == EINTR {}
            var failure: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(socket, SOL_SOCKET, SO_ERROR, &failure, &length)
            guard failure == 0 else { FuzzFailure.fail("cannot connect to the fuzzed server: \(failure)") }
        }
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var sent = 0
        while sent < bytes.count {
            let wrote = bytes[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if wrote < 0, errno == EINTR { continue }
            if wrote <= 0 { break }  // the server closed on an early refusal
            sent += wrote
        }
        shutdown(socket, Int32(SHUT_WR))
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let started = Date()
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                answer += buffer[0..<count]
                continue
            }
            if count < 0, errno == EINTR, Date().timeIntervalSince(started) < 5 { continue }
            if count < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                FuzzFailure.fail("the server neither answered nor closed within \(Int(Date().timeIntervalSince(started))) s")
            }
            break
        }
        return answer
    }
}

/// What the service does with a request before the database: the data-API and courier path
/// matches, the server-to-server signature headers, an asset upload's digest and a download's
/// range, the CORS origin, and the body read up to its limit.
struct FuzzResponder: HTTPResponder {
    typealias Context = BasicRequestContext

    func respond(to request: Request, context: Context) async throws -> Response {
        let path = request.uri.path
        if path == "/fuzz/health" { return Response(status: .ok) }
        var facts: [String] = []
        if let (route, container, environment, database) = DataRoute.match(method: request.method, path: path) {
            facts.append("data \(route.path) \(container) \(environment) \(database)")
            _ = try? DatabaseScope(segment: database)
            _ = try? ContainerEnvironment(segment: environment)
        }
        if let (container, environment, token) = CourierController.courierPollPath(path) { facts.append("courier \(container) \(environment) \(token.count)") }
        if RequestSignature.isPresent(in: request.headers) { _ = try? RequestSignature(headers: request.headers) }
        if AssetsController.isAssetPath(path) {
            _ = try? AssetsController.contentDigest(request.headers)
            if let range = request.headers[.range] { _ = try? AssetsController.byteRange(range, size: 1000) }
            _ = AssetsController.storedContentType(request.headers[.contentType])
        }
        if let origin = request.headers[.origin] { _ = WebOrigin.normalize(origin) }
        _ = request.uri.queryParameters.get("ckAPIToken")
        let body = try await request.body.collect(upTo: 64 * 1024)
        facts.append("\(body.readableBytes) bytes")
        if path.hasPrefix("/assets/1/download/") {
            // A streamed answer, as a download is.
            RequestConnection.current?.streamAnswer()
            return Response(status: .ok, headers: [.contentType: "application/octet-stream"],
                            body: ResponseBody(contentLength: 3000) { writer in
                                for _ in 0..<3 { try await writer.write(ByteBuffer(repeating: 65, count: 1000)) }
                                try await writer.finish(nil)
                            })
        }
        return .json(["facts": .array(facts.map { .string($0) })])
    }
}
