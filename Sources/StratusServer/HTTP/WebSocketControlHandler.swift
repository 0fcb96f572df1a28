import NIOCore
import NIOHTTP1
import NIOWebSocket

/// Answers a WebSocket client's control frames (ping with pong, close with close) and pings a
/// client that has sent nothing for the idle time; the server only sends on these connections.
final class WebSocketControlHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: context.channel.allocator.buffer(capacity: 0))))
                .whenComplete { _ in context.close(promise: nil) }
        default:
            break
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case IdleStateHandler.IdleStateEvent.read = event {
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .ping, data: context.channel.allocator.buffer(capacity: 0))), promise: nil)
        } else if event is ChannelShouldQuiesceEvent {
            // The server is shutting down: a stream would otherwise hold the shutdown until its
            // deadline. Close with 1001 (going away); the client reconnects to another server,
            // and what was not sent waits in the queue.
            var reason = context.channel.allocator.buffer(capacity: 2)
            reason.write(webSocketErrorCode: .goingAway)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: reason)))
                .whenComplete { _ in context.close(promise: nil) }
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
