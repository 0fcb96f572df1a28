import Hummingbird
import HummingbirdCore
import HTTPTypes
import Logging
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// How a test speaks to an app: straight to its router (no HTTP), or over HTTP/1.1 to the server
/// it runs on a port of its own.
///
/// The tests' own, instead of HummingbirdTesting's: that module brings AsyncHTTPClient, and with
/// it swift-nio-http2, swift-configuration and more, into every build of the tests, for a client
/// mode they never use.
protocol TestClientProtocol: Sendable {
    func executeRequest(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) async throws -> TestResponse
    /// The live server's port; `nil` for a router client.
    var port: Int? { get }
}

extension TestClientProtocol {
    /// Sends a request and hands the whole response to `handle`.
    func execute<Value>(uri: String, method: HTTPRequest.Method, headers: HTTPFields = [:], body: ByteBuffer? = nil,
                        _ handle: (TestResponse) async throws -> Value) async throws -> Value {
        try await handle(executeRequest(uri: uri, method: method, headers: headers, body: body))
    }
}

/// A response, its body read whole.
struct TestResponse: Sendable {
    var head: HTTPResponse
    var body: ByteBuffer
    var status: HTTPResponse.Status { head.status }
    var headers: HTTPFields { head.headerFields }
}

enum TestApp {
    enum Mode { case router, live }

    /// Runs `app` (its services and its HTTP server on 127.0.0.1, the port it was configured
    /// with) while `test` talks to it, then shuts it down gracefully.
    static func run<Builder: HTTPResponderBuilder, Value: Sendable>(
        router: Builder, server: HTTPServerBuilder = .http1(), port: Int = 0, services: [any Service] = [], logger: Logger,
        mode: Mode, _ test: @Sendable (any TestClientProtocol) async throws -> Value
    ) async throws -> Value where Builder.Responder.Context == BasicRequestContext {
        let responder = router.buildResponder()
        let (ports, portContinuation) = AsyncStream.makeStream(of: Int.self)
        let app = Application(responder: responder, server: server, configuration: .init(address: .hostname("127.0.0.1", port: port)),
                               services: services, onServerRunning: { channel in
                                   portContinuation.yield(channel.localAddress?.port ?? 0)
                                   portContinuation.finish()
                               }, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            let serviceGroup = ServiceGroup(configuration: .init(services: [app], gracefulShutdownSignals: [], logger: logger))
            group.addTask {
                // Ended before the server was up (it could not bind, a service failed): the wait
                // for its port below ends too, and the group's error says why.
                defer { portContinuation.finish() }
                try await serviceGroup.run()
            }
            var firstPort = ports.makeAsyncIterator()
            guard let boundPort = await firstPort.next() else {
                try await group.next()
                throw TestClientError.serverDidNotStart
            }
            let client: any TestClientProtocol = switch mode {
            case .router: RouterClient(responder: responder, logger: logger)
            case .live: LiveClient(port: boundPort)
            }
            do {
                let value = try await test(client)
                await serviceGroup.triggerGracefulShutdown()
                return value
            } catch {
                await serviceGroup.triggerGracefulShutdown()
                throw error
            }
        }
    }
}

enum TestClientError: Error {
    case serverDidNotStart
    case noResponse
    case timedOut
}

/// Hands each request to the router's responder, as the server would, without HTTP.
struct RouterClient<Responder: HTTPResponder>: TestClientProtocol where Responder.Context == BasicRequestContext {
    let responder: Responder
    let logger: Logger
    var port: Int? { nil }

    func executeRequest(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) async throws -> TestResponse {
        var headers = headers
        if let body { headers[.contentLength] = String(body.readableBytes) }
        let request = Request(head: HTTPRequest(method: method, scheme: "http", authority: "localhost", path: uri, headerFields: headers),
                              body: RequestBody(buffer: body ?? ByteBuffer()))
        let context = BasicRequestContext(source: ApplicationRequestContextSource(channel: NIOAsyncTestingChannel(), logger: logger))
        let response: Response
        do {
            response = try await responder.respond(to: request, context: context)
        } catch {
            // What the server answers to an error no route turned into a response.
            response = Response(status: .internalServerError)
        }
        let collector = BodyCollector()
        try await response.body.write(collector)
        return TestResponse(head: response.head, body: await collector.body)
    }

    actor BodyCollector: ResponseBodyWriter {
        var body = ByteBuffer()
        func write(_ buffer: ByteBuffer) async throws { body.writeImmutableBuffer(buffer) }
        func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }
}

/// Sends each request over a connection of its own to the live server, and reads the response
/// whole (30 s at most).
struct LiveClient: TestClientProtocol {
    let port: Int?
    static let timeLimit: Duration = .seconds(30)

    func executeRequest(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) async throws -> TestResponse {
        try await withThrowingTaskGroup(of: TestResponse.self) { group in
            group.addTask { try await exchange(uri: uri, method: method, headers: headers, body: body) }
            group.addTask {
                try await Task.sleep(for: Self.timeLimit)
                throw TestClientError.timedOut
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }

    private func exchange(uri: String, method: HTTPRequest.Method, headers: HTTPFields, body: ByteBuffer?) async throws -> TestResponse {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port ?? 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: HTTPMethod(rawValue: method.rawValue), uri: uri)
            head.headers.add(name: "Host", value: "localhost")
            for field in headers { head.headers.add(name: field.name.rawName, value: field.value) }
            if let body, headers[.contentLength] == nil { head.headers.add(name: "Content-Length", value: String(body.readableBytes)) }
            do {
                try await outbound.write(.head(head))
                if let body { try await outbound.write(.body(.byteBuffer(body))) }
                try await outbound.write(.end(nil))
            } catch {
                // The server may answer and close before it has read the whole request (a body
                // too large): its answer is still there to read.
            }
            var response: HTTPResponse?
            var collected = ByteBuffer()
            for try await part in inbound {
                switch part {
                case .head(let received):
                    var fields = HTTPFields()
                    for (name, value) in received.headers {
                        if let name = HTTPField.Name(name) { fields.append(HTTPField(name: name, value: value)) }
                    }
                    response = HTTPResponse(status: .init(code: Int(received.status.code), reasonPhrase: received.status.reasonPhrase),
                                            headerFields: fields)
                case .body(let buffer):
                    collected.writeImmutableBuffer(buffer)
                case .end:
                    guard let response else { throw TestClientError.noResponse }
                    return TestResponse(head: response, body: collected)
                }
            }
            throw TestClientError.noResponse
        }
    }
}
