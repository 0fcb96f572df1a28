import ArgumentParser
import Dispatch
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

extension Bench {
    /// `stratus-bench apns-standin`: an APNs stand-in cheap enough not to be the benchmark's
    /// bottleneck (Deploy/bench/bench.sh with STRATUS_BENCH_PUSH=1). HTTP/2 over TLS on loopback,
    /// answering 200 with the request's `apns-id` to every POST, counting them per second. It
    /// checks nothing else: the checking stand-in, which verifies each provider token and header,
    /// is Deploy/push/standins.py (the end-to-end checks).
    struct APNsStandIn: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "apns-standin",
            abstract: "Answer APNs pushes with 200 (HTTP/2 over TLS, loopback), for the push benchmark; on SIGTERM write what came.")

        @Option(help: "PEM certificate the stand-in presents (Deploy/tls/make-certs.sh's server.pem).") var cert: String
        @Option(help: "Its private key (PEM).") var key: String
        @Option(name: .customLong("port-file"), help: "Where to write the port it listens on.") var portFile: String
        @Option(name: .customLong("stats-file"), help: "Where to write, on SIGTERM, the pushes received (JSON).") var statsFile: String

        func run() throws {
            var tls = TLSConfiguration.makeServerConfiguration(certificateChain: try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) },
                                                               privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
            tls.applicationProtocols = ["h2"]
            let context = try NIOSSLContext(configuration: tls)
            let counter = PushCounter()
            let connections = Atomic<Int>(0)
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            let server = try ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    connections.add(1, ordering: .relaxed)
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                        try channel.pipeline.syncOperations.addHandlers([
                            NIOHTTP2Handler(mode: .server, initialSettings: [HTTP2Setting(parameter: .maxConcurrentStreams, value: 1000),
                                                                             HTTP2Setting(parameter: .initialWindowSize, value: 65_535)]),
                            PushStreams(counter: counter),
                        ])
                    }
                }
                .bind(host: "127.0.0.1", port: 0).wait()
            try String(server.localAddress?.port ?? 0).write(toFile: portFile, atomically: true, encoding: .utf8)
            signal(SIGTERM, SIG_IGN)
            let stop = DispatchSource.makeSignalSource(signal: SIGTERM)
            let stats = statsFile
            stop.setEventHandler {
                let (received, busiest, mean) = counter.summary()
                let text = #"{"received": \#(received), "busiestSecond": \#(busiest), "meanPerSecond": \#(Int(mean)), "connections": \#(connections.load(ordering: .relaxed)), "problems": []}"#
                try? text.write(toFile: stats, atomically: true, encoding: .utf8)
                Foundation.exit(0)
            }
            stop.resume()
            // Blocks this thread until SIGTERM ends the process (the handler above exits).
            DispatchSemaphore(value: 0).wait()
        }
    }
}

/// Pushes received, per second.
final class PushCounter: Sendable {
    private let counts = Mutex<(perSecond: [Int: Int], first: Double, last: Double)>(([:], 0, 0))

    func add() {
        let now = Date().timeIntervalSince1970
        counts.withLock { state in
            state.perSecond[Int(now), default: 0] += 1
            if state.first == 0 { state.first = now }
            state.last = now
        }
    }

    /// All received, the busiest second's count, and the mean rate from the first to the last.
    func summary() -> (Int, Int, Double) {
        counts.withLock { state in
            let total = state.perSecond.values.reduce(0, +)
            let span = state.last - state.first
            return (total, state.perSecond.values.max() ?? 0, span > 0 ? Double(total) / span : 0)
        }
    }
}

/// Every stream of one connection, read as frames (no channel per stream, as the server's own
/// APNs connections): a push is answered 200 with its apns-id once its request has ended, the
/// answers of one read flushed together, and the connection's flow-control credit given back.
final class PushStreams: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    let counter: PushCounter
    var apnsIDs: [HTTP2StreamID: String] = [:]
    var unacknowledged = 0
    var answered = false

    init(counter: PushCounter) {
        self.counter = counter
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            apnsIDs[frame.streamID] = headers.headers.first(name: "apns-id") ?? ""
            if headers.endStream { answer(frame.streamID, context) }
        case .data(let data):
            unacknowledged += data.data.readableBytes + (data.paddingBytes ?? 0)
            if unacknowledged >= 32_768 {
                context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledged))), promise: nil)
                unacknowledged = 0
                answered = true
            }
            if data.endStream { answer(frame.streamID, context) }
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if answered { context.flush() }
        answered = false
        context.fireChannelReadComplete()
    }

    func answer(_ stream: HTTP2StreamID, _ context: ChannelHandlerContext) {
        counter.add()
        let headers = HPACKHeaders([(":status", "200"), ("apns-id", apnsIDs.removeValue(forKey: stream) ?? "")])
        context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .headers(.init(headers: headers, endStream: true)))), promise: nil)
        answered = true
    }
}
