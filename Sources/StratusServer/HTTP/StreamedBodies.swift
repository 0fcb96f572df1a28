import Hummingbird
import HummingbirdCore
import HTTPTypes
import NIOCore

// Request and response bodies that are not held whole (asset uploads and downloads), for
// `StratusHTTPChannel`.

/// Writes a streamed response's pieces to the connection, each once the one before is written.
struct ChannelBodyWriter: ResponseBodyWriter {
    let handler: NIOLoopBound<StratusHTTPHandler>
    let loop: any EventLoop

    func write(_ buffer: ByteBuffer) async throws {
        let handler = handler
        try await loop.flatSubmit { handler.value.write(buffer) }.get()
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}

/// A request body read as it arrives (asset uploads), with back-pressure: the socket is read
/// only while the consumer keeps up.
typealias StreamedBody = NIOThrowingAsyncSequenceProducer<ByteBuffer, any Error,
                                                          NIOAsyncSequenceProducerBackPressureStrategies.HighLowWatermark, BodyDemand>

/// Tells the connection's handler (on its event loop) that the consumer of a streamed body wants
/// more, or is gone.
final class BodyDemand: NIOAsyncSequenceProducerDelegate, Sendable {
    let handler: NIOLoopBound<StratusHTTPHandler>
    let loop: any EventLoop

    init(handler: NIOLoopBound<StratusHTTPHandler>, loop: any EventLoop) {
        self.handler = handler
        self.loop = loop
    }

    func produceMore() {
        let handler = handler
        loop.execute { handler.value.resumeReading() }
    }

    func didTerminate() {
        let handler = handler
        loop.execute { handler.value.resumeReading() }
    }
}
