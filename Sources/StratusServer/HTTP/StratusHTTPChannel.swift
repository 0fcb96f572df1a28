import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket
import StratusCore
import StratusStore
import Synchronization

/// The service's HTTP/1.1 connections: NIO's request parser and one Swift task per connection,
/// with nothing between them but a stream of whole requests.
///
/// Hummingbird's own HTTP/1 channel converts every request and response between NIO's HTTP/1
/// types and swift-http-types in the pipeline, and passes each part through a back-pressured
/// `NIOAsyncChannel` in both directions: nearly twice the CPU per request of NIO's codec with one
/// hop to a task and one back (a hello-world POST under `wrk`). Here:
/// - NIO's `HTTPRequestDecoder` parses requests (with its header limits);
/// - `StratusHTTPHandler` reads each one whole on the event loop (the service's bodies are JSON
///   documents bounded by `maximumBodyBytes`) and hands it to the connection's task through an
///   `AsyncStream`;
/// - the task answers it with the same `StratusResponder` the router tests use, and writes the
///   response as one buffer (status line, headers and body), in one hop to the event loop.
///
/// Requests on a connection are answered one at a time and in order: the task takes the next
/// only after writing the last. The handler goes on reading while one request is being answered
/// and stops once a second is waiting behind it, so a client that pipelines cannot queue more
/// than that second request and one read's worth. (Stopping at the first cost every keep-alive
/// request two `epoll_ctl` calls, read interest off and on again; a client
/// that waits for each answer never has a second request waiting.) Malformed HTTP gets a
/// 400 with a CKWS error body and the connection closes. On graceful shutdown
/// (`ChannelShouldQuiesceEvent`) an idle connection closes at once, a busy one after its response.
///
/// Generic over its responder so the HTTP fuzzer (`Tests/StratusFuzz`) drives this same channel
/// without a database; `stratus serve` uses it with `StratusResponder`.
struct StratusHTTPChannel<Responder: HTTPResponder>: ServerChildChannel where Responder.Context == BasicRequestContext {
    struct Connection: ServerChildChannelValue {
        let channel: any Channel
        let handler: NIOLoopBound<StratusHTTPHandler>
        let requests: AsyncStream<StratusHTTPHandler.Inbound>
        let state: RequestConnection
    }

    let responder: Responder
    let maximumBodyBytes: Int
    let idleTimeout: TimeAmount?
    let serverHeaders: String
    /// Open connections per client address, against `ServerConfiguration.maximumConnectionsPerAddress`.
    let connections: ConnectionCounts
    /// With a certificate, connections speak TLS (`ServerConfiguration.tls`).
    var tls: TLSCertificate? = nil
    /// Proxies whose `X-Forwarded-For` names the client (`ServerConfiguration.trustedProxies`).
    var trustedProxies: TrustedProxies = .none
    /// Where answered requests are counted (`GET /metrics`).
    var metrics: Metrics? = nil
    /// Where answered requests of a container are logged (`stratus logs`).
    var requestLog: RequestLog? = nil

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Connection> {
        channel.eventLoop.makeCompletedFuture {
            let (requests, continuation) = AsyncStream.makeStream(of: StratusHTTPHandler.Inbound.self, bufferingPolicy: .unbounded)
            let operations = channel.pipeline.syncOperations
            if let tls {
                try operations.addHandler(PlainHTTPOnTLSPortHandler(serverHeaders: HTTPWire.serverHeaders(name: "Stratus")))
                try operations.addHandler(NIOSSLServerHandler(context: tls.current))
            }
            try operations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)), name: HTTPWire.decoderName)
            if let idleTimeout {
                try operations.addHandler(IdleStateHandler(readTimeout: idleTimeout))
            }
            let state = RequestConnection(channel: channel)
            let handler = StratusHTTPHandler(continuation: continuation, maximumBodyBytes: maximumBodyBytes, serverHeaders: serverHeaders, state: state)
            try operations.addHandler(handler, name: HTTPWire.handlerName)
            return Connection(channel: channel, handler: NIOLoopBound(handler, eventLoop: channel.eventLoop), requests: requests, state: state)
        }
    }

    func handle(value connection: Connection, logger: Logger) async {
        let address = connection.state.peer ?? ""
        // A trusted proxy carries many clients' connections: it is not held to one client's limit.
        let counted = !trustedProxies.contains(address)
        guard !counted || connections.open(address) else {
            // Answered before the request is read, then closed: the client reads the answer to what it sent.
            let error = StratusError(.throttled, "too many connections from this address (at most \(connections.limit) at once); close idle ones or retry later",
                                     retryAfter: 1)
            let id = RandomUUID.string()
            var response = error.response(uuid: id)
            response.headers[RequestID.header] = id
            let sink = BodySink()
            try? await response.body.write(sink)
            let bytes = HTTPWire.wire(status: response.status.code, headers: response.headers, body: sink.body, length: sink.body.readableBytes,
                                  http10: false, close: true, serverHeaders: serverHeaders)
            let handler = connection.handler
            connection.channel.eventLoop.execute { handler.value.send(bytes, close: true) }
            return
        }
        defer { if counted { connections.close(address) } }
        await withTaskExecutorPreference(EventLoopTaskExecutor(connection.channel.eventLoop)) {
            await serve(connection, logger: logger)
        }
    }

    private func serve(_ connection: Connection, logger: Logger) async {
        await withTaskCancellationHandler {
            for await inbound in connection.requests {
                let response: Response
                let close: Bool
                switch inbound {
                case .request(let head, let body):
                    response = await answer(head, body: RequestBody(buffer: body), on: connection, logger: logger)
                    close = !head.isKeepAlive
                case .streaming(let head, let body):
                    response = await answer(head, body: RequestBody(asyncSequence: body), on: connection, logger: logger)
                    // Answered before the whole body came (refused): the rest is not read as a request.
                    let pending = connection.channel.eventLoop.inEventLoop ? connection.handler.value.bodyPending : true
                    close = !head.isKeepAlive || pending
                case .tooLarge:
                    let id = RandomUUID.string()
                    var refused = StratusError.bodyTooLarge(limit: maximumBodyBytes).response(uuid: id)
                    refused.headers[RequestID.header] = id
                    response = refused
                    close = true
                }
                if connection.state.takeStreamAnswer(), let length = response.body.contentLength {
                    guard await stream(response, length: length, for: inbound.head, close: close, on: connection) else {
                        connection.channel.close(promise: nil)
                        break
                    }
                    if close { break }
                    continue
                }
                guard let bytes = await encode(response, for: inbound.head, close: close) else {
                    connection.channel.close(promise: nil)
                    break
                }
                let handler = connection.handler
                // Told when the answer could not be written (a long poll puts its notification back).
                let state = connection.state
                var written: EventLoopPromise<Void>?
                if state.awaitsDelivery {
                    let promise = connection.channel.eventLoop.makePromise(of: Void.self)
                    promise.futureResult.whenComplete { result in
                        if case .failure = result { state.answerFailed() } else { state.onUndelivered(nil) }
                    }
                    written = promise
                }
                if connection.channel.eventLoop.inEventLoop {
                    handler.value.send(bytes, close: close, written: written)
                } else {
                    connection.channel.eventLoop.execute { handler.value.send(bytes, close: close, written: written) }
                }
                if response.status.code == 101, let stream = state.takeUpgrade() {
                    // The connection now speaks WebSocket: HTTP's handlers leave, the stream runs until it closes.
                    do {
                        try await connection.channel.eventLoop.flatSubmit {
                            let operations = connection.channel.pipeline.syncOperations
                            return operations.removeHandler(name: HTTPWire.handlerName).flatMap {
                                operations.removeHandler(name: HTTPWire.decoderName)
                            }.flatMapThrowing {
                                try operations.addHandlers([WebSocketFrameEncoder(), ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 16)),
                                                            WebSocketControlHandler()])
                            }
                        }.get()
                        await stream(connection.channel)
                    } catch {
                        logger.debug("a WebSocket upgrade failed", metadata: ["stratus.error": "\(String(reflecting: error))"])
                    }
                    connection.channel.close(promise: nil)
                    break
                }
                if close { break }
            }
        } onCancel: {
            connection.channel.close(promise: nil)
        }
    }

    /// Writes a response whose body is produced as it is sent: the head, then each piece once the
    /// last is written (so at most one piece waits in memory), then the request's bookkeeping.
    /// `false` when the body failed part-way: the connection must close.
    private func stream(_ response: Response, length: Int, for head: HTTPRequestHead, close: Bool, on connection: Connection) async -> Bool {
        let handler = connection.handler
        let loop = connection.channel.eventLoop
        let start = HTTPWire.wire(status: response.status.code, headers: response.headers, body: nil, length: length,
                              http10: head.version.major == 1 && head.version.minor == 0, close: close, serverHeaders: serverHeaders)
        let writer = ChannelBodyWriter(handler: handler, loop: loop)
        do {
            try await writer.write(start)
            // HEAD: the head alone, with the length the body would have (the body is never read).
            if head.method != .HEAD { try await response.body.write(writer) }
        } catch {
            return false
        }
        loop.execute { handler.value.send(ByteBuffer(), close: close) }
        return true
    }

    /// Answers one request under its id (`RequestID`): the response carries it in `X-Request-ID`,
    /// an error dictionary's `uuid` is it, and so is every log line's `stratus.request_id`. At
    /// `debug` level each request is logged once answered (method, path, status, milliseconds).
    private func answer(_ head: HTTPRequestHead, body: RequestBody, on connection: Connection, logger: Logger) async -> Response {
        let id = RequestID.accepted(head.headers.first(name: "X-Request-ID")) ?? RandomUUID.sequential()
        let state = RequestID.State(id: id, connection: connection.state)
        return await RequestID.$state.withValue(state) {
            let started = ContinuousClock.now
            let path = head.uri.prefix { $0 != "?" }
            let route = metrics?.begin(path: path)
            var response = await respond(head, body: body, on: connection, logger: logger)
            response.headers[RequestID.header] = id
            let seconds = (ContinuousClock.now - started).inSeconds
            if let route { metrics?.request(route, status: Int(response.status.code), seconds: seconds, errorCode: state.errorCode) }
            if let requestLog, let (containerID, environment) = state.container {
                let operation = Metrics.operation(family: route?.family ?? Metrics.family(of: path).family, path: path)
                requestLog.append(RequestLogEntry(containerID: containerID, environment: environment, at: Date(), database: state.database,
                                                  operation: operation, status: Int(response.status.code),
                                                  errorCode: state.errorCode, durationMicroseconds: Int(seconds * 1_000_000),
                                                  userRecordName: state.user, requestID: id, clientAddress: state.client))
            }
            if logger.logLevel <= .debug {
                logger.debug("answered", metadata: ["stratus.method": "\(head.method.rawValue)", "stratus.path": "\(path.prefix(200))",
                                                    "stratus.status": "\(response.status.code)", "stratus.ms": "\(Int((seconds * 1000).rounded()))"])
            }
            return response
        }
    }

    /// Answers one request through the responder, with the router's error rendering around it.
    private func respond(_ head: HTTPRequestHead, body: RequestBody, on connection: Connection, logger: Logger) async -> Response {
        guard let request = HTTPWire.request(head, body: body) else {
            return StratusError.badRequest("the request method '\(head.method.rawValue.prefix(40))' is not valid HTTP").response(uuid: newUUID())
        }
        let context = BasicRequestContext(source: ApplicationRequestContextSource(channel: connection.channel, logger: logger))
        do {
            let peer = connection.state.peer
            let client = trustedProxies.isEmpty ? peer : trustedProxies.client(peer: peer, forwardedFor: head.headers["X-Forwarded-For"])
            RequestID.state?.client = client
            return try await ErrorMiddleware<BasicRequestContext>().run(request, context: context) { request, context in
                try await responder.respond(to: request, context: context)
            }
        } catch {
            // ErrorMiddleware renders every error; this is only for the compiler.
            return StratusError(.internalError, "the server failed to handle the request").response(uuid: newUUID())
        }
    }

    /// The response's bytes on the wire: status line, headers, body. `nil` when the body failed
    /// part-way, which leaves nothing to answer with but closing the connection.
    private func encode(_ response: Response, for head: HTTPRequestHead, close: Bool) async -> ByteBuffer? {
        let sink = BodySink()
        do {
            try await response.body.write(sink)
        } catch {
            return nil
        }
        return HTTPWire.wire(status: response.status.code, headers: response.headers, body: head.method == .HEAD ? nil : sink.body,
                         length: sink.body.readableBytes, http10: head.version.major == 1 && head.version.minor == 0,
                         close: close, serverHeaders: serverHeaders)
    }
}

/// Collects a response body (the service's are single buffers of JSON).
private final class BodySink: ResponseBodyWriter, @unchecked Sendable {
    var body = ByteBuffer()

    func write(_ buffer: ByteBuffer) async throws {
        if body.readableBytes == 0 {
            body = buffer
        } else {
            var buffer = buffer
            body.writeBuffer(&buffer)
        }
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

/// Reads requests whole on the event loop and hands them to the connection's task; writes the
/// task's answers. The only handler after the parser, so responses go straight to the socket.
final class StratusHTTPHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum Inbound: Sendable {
        /// A whole request.
        case request(HTTPRequestHead, ByteBuffer)
        /// A request whose body passed the limit: answered 413, and the connection closed.
        case tooLarge(HTTPRequestHead)
        /// A request handed over at its head, its body read as it arrives (`streamsBody`).
        case streaming(HTTPRequestHead, StreamedBody)

        var head: HTTPRequestHead {
            switch self {
            case .request(let head, _), .tooLarge(let head), .streaming(let head, _): return head
            }
        }
    }

    private let continuation: AsyncStream<Inbound>.Continuation
    /// What long polls on this connection watch (is the client still there).
    private let state: RequestConnection
    private let maximumBodyBytes: Int
    private let serverHeaders: String
    private var context: ChannelHandlerContext?
    private var loop: (any EventLoop)?
    private var head: HTTPRequestHead?
    private var body = ByteBuffer()
    /// Requests handed to the task and not answered yet.
    private var unanswered = 0
    /// A request's head has arrived and its response is not written yet: graceful shutdown waits for it.
    private var busy = false
    /// After a refused body or malformed HTTP, nothing more is read as a request.
    private var stopped = false
    /// A socket read NIO asked for while `readAhead` requests wait; issued once one is answered.
    private var heldRead = false
    /// How many unanswered requests stop reading from the socket.
    static let readAhead = 2
    /// The body being streamed to its request's task, until its end arrives.
    private var streamed: StreamedBody.Source?
    /// The streamed body's consumer has enough buffered: reads wait for it.
    private var streamPaused = false

    /// Requests whose bodies are streamed rather than read whole: asset uploads (up to the asset
    /// size limit, which the route enforces).
    static func streamsBody(_ head: HTTPRequestHead) -> Bool {
        head.method == .POST && head.uri.hasPrefix(AssetsController.uploadPathPrefix)
    }

    /// Whether a streamed request body has not all arrived yet.
    var bodyPending: Bool { streamed != nil }
    /// Close once the response in flight is written (graceful shutdown, or a parse error behind it).
    private var closeWhenAnswered = false
    /// The answer to a refused request is sent and the output shut: what still arrives is dropped
    /// until the request ends, the client closes, or `lingerTime` passes.
    private var lingering = false
    static let lingerTime: TimeAmount = .seconds(2)

    init(continuation: AsyncStream<Inbound>.Continuation, maximumBodyBytes: Int, serverHeaders: String, state: RequestConnection) {
        self.state = state
        self.continuation = continuation
        self.maximumBodyBytes = maximumBodyBytes
        self.serverHeaders = serverHeaders
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.loop = context.eventLoop
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        continuation.finish()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if lingering {
            if case .end = part { context.close(promise: nil) }
            return
        }
        switch part {
        case .head(let head):
            guard !stopped else { return }
            busy = true
            body.clear()
            let streams = Self.streamsBody(head)
            if !streams, let length = head.headers.first(name: "content-length").flatMap({ Int($0) }), length > maximumBodyBytes {
                refuse(head)
            } else {
                self.head = head
                if unanswered == 0, head.version.major == 1, head.version.minor >= 1,
                   head.headers.first(name: "expect")?.lowercased() == "100-continue" {
                    // curl and others wait for this before sending a body over 1 KB. (Behind a
                    // pipelined request still being answered it would come before that answer:
                    // there the client's own wait, a second for curl, has to do.)
                    context.writeAndFlush(wrapOutboundOut(ByteBuffer(staticString: "HTTP/1.1 100 Continue\r\n\r\n")), promise: nil)
                }
                if streams {
                    let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
                    let made = StreamedBody.makeSequence(elementType: ByteBuffer.self, failureType: (any Error).self,
                                                         backPressureStrategy: .init(lowWatermark: 2, highWatermark: 8), finishOnDeinit: false,
                                                         delegate: BodyDemand(handler: bound, loop: context.eventLoop))
                    streamed = made.source
                    hand(.streaming(head, made.sequence))
                }
            }
        case .body(var chunk):
            guard !stopped, let head else { return }
            if let source = streamed {
                if case .stopProducing = source.yield(chunk) { streamPaused = true }
            } else if chunk.readableBytes > maximumBodyBytes - body.readableBytes {
                refuse(head)
            } else if body.readableBytes == 0 {
                body = chunk
            } else {
                body.writeBuffer(&chunk)
            }
        case .end:
            guard !stopped, let head else { return }
            self.head = nil
            if let source = streamed {
                source.finish()
                streamed = nil
                streamPaused = false
            } else {
                hand(.request(head, body))
            }
            body = ByteBuffer()
        }
    }

    /// The streamed body's consumer wants more (or is gone): reads resume.
    func resumeReading() {
        streamPaused = false
        if heldRead, let context, unanswered < Self.readAhead || streamed != nil {
            heldRead = false
            context.read()
        }
    }

    /// Ends a streamed body that will never complete (the client went away, or its request was
    /// answered first): its consumer gets an error.
    private func abandonStream() {
        guard let source = streamed else { return }
        streamed = nil
        streamPaused = false
        head = nil
        source.finish(ChannelError.eof)
    }

    /// Writes a piece of a streamed answer.
    func write(_ bytes: ByteBuffer) -> EventLoopFuture<Void> {
        guard let context else { return loop!.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        return context.writeAndFlush(wrapOutboundOut(bytes))
    }

    private func refuse(_ head: HTTPRequestHead) {
        stopped = true
        self.head = nil
        body = ByteBuffer()
        hand(.tooLarge(head))
    }

    private func hand(_ inbound: Inbound) {
        unanswered += 1
        continuation.yield(inbound)
    }

    /// Writes one answer (on the event loop).
    func send(_ bytes: ByteBuffer, close: Bool, written: EventLoopPromise<Void>? = nil) {
        guard let context else {
            written?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        unanswered -= 1
        if streamed != nil {
            // Answered before its body all came: the rest is dropped, then the connection closes.
            abandonStream()
            stopped = true
        }
        if unanswered == 0, head == nil { busy = false }
        if close, stopped {
            // A refused body may still be arriving.
            context.writeAndFlush(wrapOutboundOut(bytes), promise: written)
            linger(context)
            return
        }
        if close || (closeWhenAnswered && unanswered == 0) {
            let future = context.writeAndFlush(wrapOutboundOut(bytes))
            future.cascade(to: written)
            future.whenComplete { _ in context.close(promise: nil) }
            return
        }
        context.writeAndFlush(wrapOutboundOut(bytes), promise: written)
        if heldRead, unanswered < Self.readAhead {
            heldRead = false
            context.read()
        }
    }

    /// Shuts the output after the answer (the client reads it, then the end) but goes on reading
    /// for a while: closing at once, with the client still sending, would reset the connection,
    /// and a client that writes its whole request before reading would never see the answer.
    private func linger(_ context: ChannelHandlerContext) {
        lingering = true
        context.close(mode: .output, promise: nil)
        context.eventLoop.assumeIsolated().scheduleTask(in: Self.lingerTime) { context.close(promise: nil) }
        if heldRead {
            heldRead = false
            context.read()
        }
    }

    func read(context: ChannelHandlerContext) {
        if streamPaused, !lingering {
            heldRead = true
        } else if unanswered >= Self.readAhead, !lingering, streamed == nil {
            heldRead = true
        } else {
            context.read()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // After a parse error the parser reports every later read as an error too.
        guard !stopped else { return }
        guard error is HTTPParserError else {
            context.close(promise: nil)
            return
        }
        // Malformed HTTP: nothing more can be read from this connection.
        abandonStream()
        stopped = true
        head = nil
        if busy, unanswered > 0 {
            closeWhenAnswered = true
            return
        }
        let id = RandomUUID.string()
        let json = StratusError.badRequest("the request is not valid HTTP/1.1 (\(error)); the connection is closed").dictionary(uuid: id)
        let body = ByteBuffer(bytes: JSONWriter.bytes(json))
        let out = HTTPWire.wire(status: 400, headers: [.contentType: "application/json; charset=utf-8", RequestID.header: id], body: body,
                                          length: body.readableBytes, http10: false, close: true, serverHeaders: serverHeaders)
        context.writeAndFlush(wrapOutboundOut(out), promise: nil)
        linger(context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case IdleStateHandler.IdleStateEvent.read:
            // Nothing read for the idle time: close, unless a whole request is being answered (a
            // request head or body that stalls part-way is cut off, a streamed body too).
            if unanswered == 0 || streamed != nil {
                abandonStream()
                context.close(promise: nil)
            }
        case is ChannelShouldQuiesceEvent:
            if busy { closeWhenAnswered = true } else { context.close(promise: nil) }
        case ChannelEvent.inputClosed:
            // The client has sent all it will (Hummingbird's server allows half-closed
            // connections): answer what came whole, then close. A long poll ends at once.
            state.inputClosed()
            if unanswered > 0, !lingering { closeWhenAnswered = true } else { context.close(promise: nil) }
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        abandonStream()
        continuation.finish()
        context.fireChannelInactive()
    }
}
