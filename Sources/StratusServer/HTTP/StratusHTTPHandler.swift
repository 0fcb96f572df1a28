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
