import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// One request on an APNs connection: POST `path` with `headers` and `body`.
struct APNsRequest: Sendable {
    var path: String
    var headers: [(String, String)]
    var body: ByteBuffer
}

/// APNs' answer to one request.
struct APNsResponse: Sendable {
    var status: Int
    var headers: HPACKHeaders
    var body: ByteBuffer
}

/// One HTTP/2 connection over TLS to an APNs host, pushes going out as streams on it.
///
/// Frames are read and written by one handler on the connection (no channel per stream): a batch
/// of pushes is written as HEADERS and DATA frames and flushed once, and each stream's answer
/// completes its promise. The connection is replaced when it closes, when APNs sends GOAWAY, or
/// when an answer takes longer than the timeout (it is closed, failing what it still carried).
final class APNsConnection: Sendable {
    let channel: any Channel
    private let streams: APNsStreams
    let authority: String

    private init(channel: any Channel, streams: APNsStreams, authority: String) {
        self.channel = channel
        self.streams = streams
        self.authority = authority
    }

    /// Whether new pushes may go out on it (open, and no GOAWAY received).
    var isUsable: Bool { channel.isActive && !streams.draining.load(ordering: .relaxed) }

    static func connect(host: String, port: Int, tls: NIOSSLContext, timeout: Duration) async throws -> APNsConnection {
        let streams = APNsStreams(timeout: timeout)
        // SNI only for names, as TLS allows.
        let serverName = host.first?.isLetter == true ? host : nil
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let http2 = NIOHTTP2Handler(mode: .client, initialSettings: [
                        HTTP2Setting(parameter: .enablePush, value: 0),
                        HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
                        HTTP2Setting(parameter: .initialWindowSize, value: APNsStreams.window),
                    ])
                    try channel.pipeline.syncOperations.addHandlers([try NIOSSLClientHandler(context: tls, serverHostname: serverName), http2, streams])
                }
            }
            .connect(host: host, port: port).get()
        return APNsConnection(channel: channel, streams: streams, authority: port == 443 ? host : "\(host):\(port)")
    }

    /// Sends `requests` as streams written together, and waits for each answer (or its failure;
    /// the connection is closed when an answer is later than its timeout).
    func send(_ requests: [APNsRequest]) async -> [Result<APNsResponse, any Error>] {
        let channel = self.channel
        let promises = requests.map { _ in channel.eventLoop.makePromise(of: APNsResponse.self) }
        let batch = APNsStreams.Batch(requests: requests, promises: promises, authority: authority)
        channel.writeAndFlush(batch).whenFailure { error in
            for promise in promises { promise.fail(error) }
        }
        var results: [Result<APNsResponse, any Error>] = []
        results.reserveCapacity(promises.count)
        for promise in promises {
            do { results.append(.success(try await promise.futureResult.get())) } catch { results.append(.failure(error)) }
        }
        return results
    }

    func close() async {
        try? await channel.close()
    }
}

/// The connection's one handler above HTTP/2: numbers the streams it opens, writes each request's
/// HEADERS and DATA, gathers each answer, and gives back flow-control credit for the answers' bodies
/// (nothing else on the connection does, with no stream channels).
final class APNsStreams: ChannelDuplexHandler, Sendable {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = Batch
    typealias OutboundOut = HTTP2Frame

    /// The window offered to APNs, per stream and (as credit given back) per connection.
    static let window = 65_535

    struct Batch: Sendable {
        var requests: [APNsRequest]
        var promises: [EventLoopPromise<APNsResponse>]
        var authority: String
    }

    /// Past this without an answer, the connection is closed (failing every stream still open).
    let timeout: TimeAmount

    init(timeout: Duration) {
        self.timeout = .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
    }

    private struct Open {
        var promise: EventLoopPromise<APNsResponse>
        var sent: NIODeadline
        var status: Int?
        var headers = HPACKHeaders()
        var body: ByteBuffer?
    }

    /// Set when APNs sent GOAWAY or the connection failed or closed: no new streams.
    let draining = Atomic<Bool>(false)
    // Touched only on the connection's event loop.
    private nonisolated(unsafe) var nextStreamID = HTTP2StreamID(1)
    private nonisolated(unsafe) var open: [HTTP2StreamID: Open] = [:]
    private nonisolated(unsafe) var unacknowledged = 0
    private nonisolated(unsafe) var closed = false

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let batch = unwrapOutboundIn(data)
        for (request, answer) in zip(batch.requests, batch.promises) {
            // Stream ids are odd and rising; past 2^30 the connection is retired.
            guard !draining.load(ordering: .relaxed), nextStreamID < HTTP2StreamID(1 << 30) else {
                draining.store(true, ordering: .relaxed)
                answer.fail(Failure(description: "the connection takes no new streams"))
                continue
            }
            let id = nextStreamID
            nextStreamID = nextStreamID.advanced(by: 2)
            var headers = HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":path", request.path), (":authority", batch.authority)])
            headers.add(contentsOf: request.headers)
            headers.add(name: "content-length", value: String(request.body.readableBytes))
            open[id] = Open(promise: answer, sent: .now())
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.whenFailure { [weak self] error in self?.fail(id, error) }
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers)))), promise: nil)
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(request.body), endStream: true)))),
                          promise: written)
        }
        promise?.succeed()
    }

    /// Once a second: a stream unanswered past the timeout closes the connection (one check per
    /// connection, not a timer per push).
    func handlerAdded(context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        let contextBound = NIOLoopBound(context, eventLoop: loop)
        loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { task in
            let context = contextBound.value
            guard !handler.value.closed else {
                task.cancel()
                return
            }
            if let oldest = handler.value.open.values.map(\.sent).min(), oldest + handler.value.timeout < .now() {
                handler.value.failAll(Failure(description: "APNs did not answer within \(handler.value.timeout.nanoseconds / 1_000_000_000) s"))
                context.close(promise: nil)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            guard open[frame.streamID] != nil else { return }
            if let status = headers.headers.first(name: ":status").flatMap(Int.init) {
                open[frame.streamID]!.status = status
            }
            open[frame.streamID]!.headers.add(contentsOf: headers.headers.filter { !$0.name.hasPrefix(":") }.map { ($0.name, $0.value) })
            if headers.endStream { finish(frame.streamID) }
        case .data(let data):
            let length = data.data.readableBytes + (data.paddingBytes ?? 0)
            unacknowledged += length
            if unacknowledged >= Self.window / 2 {
                context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledged))),
                                      promise: nil)
                unacknowledged = 0
            }
            if case .byteBuffer(var bytes) = data.data, open[frame.streamID] != nil {
                if open[frame.streamID]!.body == nil {
                    open[frame.streamID]!.body = bytes
                } else {
                    open[frame.streamID]!.body!.writeBuffer(&bytes)
                }
            }
            if data.endStream { finish(frame.streamID) }
        case .rstStream(let code):
            fail(frame.streamID, Failure(description: "APNs reset the stream (\(code))"))
        case .goAway(let last, let code, _):
            draining.store(true, ordering: .relaxed)
            // Streams above the last one APNs took were never processed: failed, to be sent again.
            for id in open.keys where id > last {
                fail(id, Failure(description: "APNs is closing the connection (GOAWAY \(code))"))
            }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        draining.store(true, ordering: .relaxed)
        failAll(Failure(description: "the connection to APNs closed"))
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTP2Errors.StreamClosed || error is NIOHTTP2Errors.NoSuchStream { return }
        draining.store(true, ordering: .relaxed)
        failAll(error)
        context.close(promise: nil)
    }

    private func finish(_ id: HTTP2StreamID) {
        guard let stream = open.removeValue(forKey: id) else { return }
        stream.promise.succeed(APNsResponse(status: stream.status ?? 0, headers: stream.headers, body: stream.body ?? ByteBuffer()))
    }

    private func fail(_ id: HTTP2StreamID, _ error: any Error) {
        open.removeValue(forKey: id)?.promise.fail(error)
    }

    private func failAll(_ error: any Error) {
        let streams = open
        open.removeAll()
        for stream in streams.values { stream.promise.fail(error) }
    }
}
