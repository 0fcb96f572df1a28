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
                    }.flatMap {
                        channel.configureHTTP2Pipeline(mode: .server) { stream in
                            stream.eventLoop.makeCompletedFuture { try stream.pipeline.syncOperations.addHandler(PushStream(counter: counter)) }
                        }.map { _ in }
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

/// One HTTP/2 stream: a push, answered 200 with its apns-id once its request has ended.
final class PushStream: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    let counter: PushCounter
    var apnsID = ""

    init(counter: PushCounter) {
        self.counter = counter
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .headers(let headers):
            apnsID = headers.headers.first(name: "apns-id") ?? ""
            if headers.endStream { answer(context) }
        case .data(let data):
            if data.endStream { answer(context) }
        default:
            break
        }
    }

    func answer(_ context: ChannelHandlerContext) {
        counter.add()
        let headers = HPACKHeaders([(":status", "200"), ("apns-id", apnsID)])
        context.writeAndFlush(wrapOutboundOut(.headers(.init(headers: headers, endStream: true))), promise: nil)
    }
}
