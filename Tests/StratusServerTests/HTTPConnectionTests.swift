import Foundation
import NIOCore
import NIOPosix
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Synchronization
import Testing

/// The HTTP/1.1 layer `stratus serve` runs (`StratusHTTPChannel`), spoken to over a raw socket:
/// what a client sees on the wire, byte for byte, when it pipelines, breaks the protocol, sends
/// too much, waits for `100 Continue` or speaks HTTP/1.0.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct HTTPConnectionTests {
    @Test func pipelinedRequestsAreAnsweredInOrderOnOneConnection() async throws {
        try await Harness.run(live: true) { harness in
            let session = try await harness.container().signedUp()
            _ = try await session.modify("private", [op("create", "a", type: "Note", fields: ["title": ["value": "first"]])])
            let lookup = #"{"records":[{"recordName":"a"}]}"#
            let connection = try await RawConnection(port: harness.client.port ?? 0)
            // Three requests in one write: a lookup that goes to the database, an unknown path,
            // and a health check that asks to close.
            try await connection.send("""
                POST \(session.path("private", "records/lookup")) HTTP/1.1\r\nHost: x\r\nContent-Length: \(lookup.utf8.count)\r\n\r\n\(lookup)\
                GET /no/such/path HTTP/1.1\r\nHost: x\r\n\r\n\
                GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n
                """)
            let (responses, closed) = try await connection.responses(count: 3)
            #expect(closed, "the connection stays open after 'Connection: close': \(connection.timeline)")
            try #require(responses.count == 3, "\(responses); \(connection.timeline)")
            #expect(responses.map(\.status) == [200, 404, 200])
            #expect(responses[0].json.record(0)?["fields"]?["title"]?["value"] == "first", "\(responses[0].json)")
            #expect(responses[1].json.errorCode == "NOT_FOUND", "\(responses[1].json)")
            #expect(responses[2].json["status"] == "ok")
            #expect(responses[2].headers["connection"] == "close")

            // A client that shuts its side after its requests gets its answers, then the end.
            let halfClosed = try await RawConnection(port: harness.client.port ?? 0)
            try await halfClosed.send("""
                POST \(session.path("private", "records/lookup")) HTTP/1.1\r\nHost: x\r\nContent-Length: \(lookup.utf8.count)\r\n\r\n\(lookup)\
                GET /health HTTP/1.1\r\nHost: x\r\n\r\n
                """)
            try await halfClosed.shutdownOutput()
            let (answers, ended) = try await halfClosed.responses(count: 2)
            #expect(answers.map(\.status) == [200, 200], "\(answers); \(halfClosed.timeline)")
            #expect(ended, "the server kept a half-closed connection open: \(halfClosed.timeline)")
            for response in responses {
                #expect(response.headers["date"]?.hasSuffix(" GMT") == true, "\(response.headers)")
                #expect(response.headers["server"] == "Stratus")
            }
        }
    }

    /// The tests' harness: a live server that cannot have its port fails the test at once, with
    /// the bind's error, instead of waiting for a port that never comes.
    @Test func aServerThatCannotBindItsPortFailsInsteadOfWaiting() async throws {
        try await Harness.run(live: true) { harness in
            let taken = try #require(harness.client.port)
            await #expect(throws: (any Error).self) {
                try await Harness.run(live: true, port: taken) { _ in Issue.record("a second server came up on port \(taken)") }
            }
        }
    }

    /// One client address holds at most `maximumConnectionsPerAddress` connections: the next is
    /// answered THROTTLED (with a retry hint) and closed, and a slot frees when one closes.
    @Test func connectionsPerClientAddressAreBounded() async throws {
        try await Harness.run(live: true, server: { $0.maximumConnectionsPerAddress = 3 }) { harness in
            let port = harness.client.port ?? 0
            let health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            var held: [RawConnection] = []
            for _ in 0..<3 {
                let connection = try await RawConnection(port: port)
                try await connection.send(health)
                _ = try await connection.text(until: { RawConnection.parse($0).count == 1 })
                held.append(connection)
            }
            let fourth = try await RawConnection(port: port)
            try await fourth.send(health)
            let (refused, closed) = try await fourth.responses(count: 1)
            #expect(refused.first?.status == 429 && refused.first?.json.errorCode == "THROTTLED" && closed, "\(refused); \(fourth.timeline)")
            #expect(refused.first?.json["retryAfter"] == 1 && refused.first?.headers["retry-after"] == "1", "\(refused)")
            #expect(refused.first?.json["reason"]?.stringValue?.contains("too many connections from this address (at most 3") == true, "\(refused)")
            // The held connections still work; closing one makes room.
            try await held[0].send(health)
            #expect(RawConnection.parse(try await held[0].text(until: { RawConnection.parse($0).count == 2 })).map(\.status) == [200, 200])
            try await held[1].shutdownOutput()
            _ = try await held[1].responses(count: 1)
            var admitted: Int?
            for _ in 0..<50 where admitted != 200 {
                let again = try await RawConnection(port: port)
                try await again.send(health)
                admitted = try await again.responses(count: 1).0.first?.status
                if admitted != 200 { try await Task.sleep(for: .milliseconds(20)) }
            }
            #expect(admitted == 200)
        }
    }

    /// A program the process starts keeps none of its sockets. NIO opens them without
    /// close-on-exec; a child started while a connection was open inherited it, and when the
    /// server closed that connection its client saw no end until the child exited (this failed
    /// the half-close check above when another test started a program at that moment).
    @Test func childProcessesDoNotHoldTheServersConnections() async throws {
        try await Harness.run(live: true) { harness in
            let connection = try await RawConnection(port: harness.client.port ?? 0)
            // One answer first, so the server has accepted the connection before the child starts.
            try await connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            _ = try await connection.text(until: { RawConnection.parse($0).count >= 1 })
            let child = try Subprocess.spawn(["/bin/sleep", "20"], outputPath: "/dev/null")
            defer { Subprocess.killAndReap(child) }
            try await connection.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let (responses, closed) = try await connection.responses(count: 2)
            #expect(responses.map(\.status) == [200, 200], "\(responses)")
            #expect(closed, "the connection stayed open while a child process ran: \(connection.timeline)")
        }
    }

    @Test func malformedHTTPGetsACloudKitErrorAndTheConnectionCloses() async throws {
        try await Harness.run(live: true) { harness in
            for garbage in ["GARBAGE\r\n\r\n", "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
                            "GET /health HTTP/9.9\r\n\r\n", "GET /health HTTP/1.1\r\nBad Header\r\n\r\n"] {
                let connection = try await RawConnection(port: harness.client.port ?? 0)
                try await connection.send(garbage)
                let (responses, closed) = try await connection.responses(count: 1)
                #expect(closed, "\(garbage.debugDescription): the connection stays open")
                #expect(responses.first?.status == 400, "\(garbage.debugDescription): \(responses)")
                #expect(responses.first?.json.errorCode == "BAD_REQUEST", "\(garbage.debugDescription): \(responses)")
                #expect(responses.first?.json["reason"]?.stringValue?.contains("not valid HTTP") == true)
            }
            // A good request, then garbage behind it: the good one is answered, then the connection closes.
            let connection = try await RawConnection(port: harness.client.port ?? 0)
            try await connection.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n")
            let (responses, closed) = try await connection.responses(count: 2)
            #expect(responses.first?.status == 200, "\(responses)")
            #expect(closed)
        }
    }

    @Test func bodiesOverTheLimitAreRefusedWithoutBeingRead() async throws {
        try await Harness.run(live: true) { harness in
            let session = try await harness.container().signedUp()
            let path = session.path("private", "records/modify")
            // By Content-Length alone: answered at once, though the body never comes.
            let declared = try await RawConnection(port: harness.client.port ?? 0)
            try await declared.send("POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n{")
            var (responses, closed) = try await declared.responses(count: 1)
            #expect(responses.first?.status == 413, "\(responses)")
            #expect(responses.first?.json.errorCode == "BAD_REQUEST")
            #expect(responses.first?.json["reason"]?.stringValue?.contains("larger than") == true)
            #expect(closed)
            // Chunked, with no length given: refused once the chunks pass the limit (4 MiB in tests).
            let chunked = try await RawConnection(port: harness.client.port ?? 0)
            try await chunked.send("POST \(path) HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            let chunk = String(repeating: "x", count: 1 << 20)
            for _ in 0..<5 {
                try? await chunked.send(String(chunk.utf8.count, radix: 16) + "\r\n" + chunk + "\r\n")
            }
            (responses, closed) = try await chunked.responses(count: 1)
            #expect(responses.first?.status == 413, "\(responses)")
            #expect(closed)
        }
    }

    @Test func expectContinueAndHTTP10() async throws {
        try await Harness.run(live: true) { harness in
            let port = harness.client.port ?? 0
            // `Expect: 100-continue`: the interim answer comes before the body is sent.
            let body = #"{"name":"iCloud.com.example.Continue"}"#
            let waiting = try await RawConnection(port: port)
            try await waiting.send("POST /management/1/containers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(Harness.adminToken)\r\n"
                + "Content-Length: \(body.utf8.count)\r\nExpect: 100-continue\r\n\r\n")
            let interim = try await waiting.text(until: { $0.contains("\r\n\r\n") })
            #expect(interim.hasPrefix("HTTP/1.1 100 Continue\r\n"), "\(interim.debugDescription)")
            try await waiting.send(body)
            let created = try await waiting.text(until: { $0.contains("201 Created") && $0.hasSuffix("}") })
            #expect(created.contains("iCloud.com.example.Continue"), "\(created)")

            // HTTP/1.0 closes after the answer, unless it asks to keep the connection.
            let once = try await RawConnection(port: port)
            try await once.send("GET /health HTTP/1.0\r\n\r\n")
            var (responses, closed) = try await once.responses(count: 1)
            #expect(responses.first?.status == 200)
            #expect(responses.first?.version == "HTTP/1.0")
            #expect(closed)
            let kept = try await RawConnection(port: port)
            try await kept.send("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /health HTTP/1.0\r\n\r\n")
            (responses, closed) = try await kept.responses(count: 2)
            #expect(responses.map(\.status) == [200, 200])
            #expect(responses.first?.headers["connection"] == "keep-alive")
            #expect(closed)
        }
    }
}

extension HTTPConnectionTests {
    /// The idle timeout cuts off a request that stalls part-way, head or body, but not a
    /// connection that keeps talking.
    @Test func stalledRequestsAreCutOffAfterTheIdleTimeout() async throws {
        // A 4 s timeout, and the talking client sends every 150 ms for 8.5 s: with the whole
        // suite running in parallel on two cores (real server processes, a PostgreSQL cluster and
        // 40 MB transfers among them), the client has been late by over 2 s.
        try await Harness.run(live: true, idleTimeout: .seconds(4)) { harness in
            let port = harness.client.port ?? 0
            let stalledBody = try await RawConnection(port: port)
            try await stalledBody.send("POST /management/1/containers HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"na")
            let stalledHead = try await RawConnection(port: port)
            try await stalledHead.send("GET /health HTTP/1.1\r\nHost: x\r\n")
            // The talking client is given up to three tries: one whose own gap between two
            // requests reached the timeout (the machine stalled it) was rightly cut off, and
            // proves nothing either way; a connection closed with shorter gaps fails the test.
            var attempt = 0
            while true {
                attempt += 1
                let talking = try await RawConnection(port: port)
                let start = ContinuousClock.now
                var answered = 0
                var lastSent = start
                var longestGap = Duration.zero
                do {
                    while ContinuousClock.now - start < .milliseconds(8500) {
                        let now = ContinuousClock.now
                        longestGap = max(longestGap, now - lastSent)
                        lastSent = now
                        try await talking.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                        answered += 1
                        _ = try await talking.text(until: { RawConnection.parse($0).count >= answered })
                        try await Task.sleep(for: .milliseconds(150))
                    }
                } catch where longestGap >= .milliseconds(3500) && attempt < 3 {
                    print("HTTPConnectionTests: the talking client was late by \(longestGap) and was cut off (\(error)); trying again")
                    continue
                }
                #expect(!talking.isClosed, "a connection in use was closed (longest gap between its requests: \(longestGap))")
                let talked = RawConnection.parse(try await talking.text(until: { _ in true }))
                #expect(talked.count == answered && talked.allSatisfy { $0.status == 200 }, "\(talked)")
                break
            }
            let (bodyResponses, bodyClosed) = try await stalledBody.responses(count: 1)
            #expect(bodyClosed && bodyResponses.isEmpty, "stalled body: \(bodyResponses)")
            let (headResponses, headClosed) = try await stalledHead.responses(count: 1)
            #expect(headClosed && headResponses.isEmpty, "stalled head: \(headResponses)")
        }
    }
}

/// One HTTP response as read off the wire.
struct RawResponse: CustomStringConvertible {
    var version: String
    var status: Int
    /// Header names lowercased.
    var headers: [String: String]
    var json: JSON

    var description: String { "\(status) \(headers) \(json)" }
}

/// A TCP connection for speaking HTTP by hand.
final class RawConnection: Sendable {
    private let channel: any Channel
    private let received = Received()

    /// The bytes read so far, whether the server closed the connection, and when each read and
    /// the close came (for failure messages).
    final class Received: Sendable {
        let state = Mutex<(bytes: [UInt8], closed: Bool)>(([], false))
        let events = Mutex<[String]>([])
        let start = ContinuousClock.now

        func note(_ event: String) {
            let elapsed = ContinuousClock.now - start
            events.withLock { $0.append("\(elapsed.formatted(.units(allowed: [.milliseconds]))) \(event)") }
        }
    }

    /// When the connection opened, each write, read and end came: for a failure's message.
    var timeline: String { received.events.withLock { $0.joined(separator: ", ") } }

    /// Connects to the server on this machine's `port`, from `address` when given (any
    /// 127.x.y.z is this machine's loopback: a client address of its own, as the server sees it).
    init(port: Int, from address: String? = nil) async throws {
        let received = self.received
        // The server shuts its side after refusing a request, while the client may still be
        // writing it: like curl, keep writing until the server closes the connection.
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let address { bootstrap = bootstrap.bind(to: try SocketAddress(ipAddress: address, port: 0)) }
        channel = try await bootstrap
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Collector(connection: received)) }
            }
            .connect(host: "127.0.0.1", port: port).get()
    }

    deinit {
        channel.close(promise: nil)
    }

    var isClosed: Bool { received.state.withLock { $0.closed } }

    /// Closes the connection, as a client that gives up does.
    func close() async throws {
        try await channel.close()
    }

    /// Shuts the client's side: the server reads the end of input.
    func shutdownOutput() async throws {
        received.note("client shut its output")
        try await channel.close(mode: .output)
    }

    func send(_ text: String) async throws {
        received.note("client sends \(text.utf8.count) bytes")
        try await channel.writeAndFlush(ByteBuffer(string: text))
    }

    /// Sends raw bytes (WebSocket frames).
    func send(bytes: [UInt8]) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// The bytes that have arrived once `done` holds for them, or the connection closed, or 10 s passed.
    func bytes(within limit: Duration = .seconds(10), until done: ([UInt8]) -> Bool) async throws -> [UInt8] {
        let start = ContinuousClock.now
        while true {
            let (bytes, closed) = received.state.withLock { ($0.bytes, $0.closed) }
            if done(bytes) || closed || ContinuousClock.now - start > limit { return bytes }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Whether the server has closed the connection.
    var closed: Bool { received.state.withLock { $0.closed } }

    /// What has arrived once `done` holds for it, or the connection closed, or 10 s passed.
    func text(until done: (String) -> Bool) async throws -> String {
        let start = ContinuousClock.now
        while true {
            let (bytes, closed) = received.state.withLock { ($0.bytes, $0.closed) }
            let text = String(decoding: bytes, as: UTF8.self)
            if done(text) || closed || ContinuousClock.now - start > .seconds(10) { return text }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    /// Up to `count` whole responses, and whether the server then closed the connection (waited
    /// for up to 5 s after the last response: the whole suite in parallel can be slow).
    func responses(count: Int) async throws -> ([RawResponse], closed: Bool) {
        _ = try await text(until: { Self.parse($0).count >= count })
        received.note("test saw \(Self.parse(String(decoding: received.state.withLock { $0.bytes }, as: UTF8.self)).count) responses")
        let start = ContinuousClock.now
        while ContinuousClock.now - start < .seconds(5), !received.state.withLock({ $0.closed }) {
            try await Task.sleep(for: .milliseconds(10))
        }
        let (bytes, closed) = received.state.withLock { ($0.bytes, $0.closed) }
        if !closed { received.note("test stopped waiting for the end") }
        return (Self.parse(String(decoding: bytes, as: UTF8.self)), closed)
    }

    /// The whole responses in `text` (each needs a Content-Length).
    static func parse(_ text: String) -> [RawResponse] {
        var responses: [RawResponse] = []
        var rest = Substring(text)
        while let end = rest.range(of: "\r\n\r\n") {
            let lines = rest[..<end.lowerBound].components(separatedBy: "\r\n")
            let statusLine = lines[0].split(separator: " ")
            guard statusLine.count >= 2, let status = Int(statusLine[1]) else { break }
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            }
            let length = Int(headers["content-length"] ?? "0") ?? 0
            let body = rest[end.upperBound...].utf8.prefix(length)
            guard body.count == length else { break }
            responses.append(RawResponse(version: String(statusLine[0]), status: status, headers: headers,
                                         json: (try? JSONParser.parse(Array(body))) ?? .null))
            rest = Substring(rest[end.upperBound...].utf8.dropFirst(length))
        }
        return responses
    }

    private final class Collector: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let connection: Received

        init(connection: Received) {
            self.connection = connection
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let buffer = unwrapInboundIn(data)
            connection.note("read \(buffer.readableBytes) bytes")
            connection.state.withLock { $0.bytes.append(contentsOf: buffer.readableBytesView) }
        }

        func channelInactive(context: ChannelHandlerContext) {
            connection.note("closed")
            connection.state.withLock { $0.closed = true }
        }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case ChannelEvent.inputClosed = event {
                connection.note("server ended its output")
                connection.state.withLock { $0.closed = true }
            }
            context.fireUserInboundEventTriggered(event)
        }
    }
}
