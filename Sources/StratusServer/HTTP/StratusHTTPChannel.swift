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
                                                  errorCode: state.errorCode, reason: state.reason, durationMicroseconds: Int(seconds * 1_000_000),
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
