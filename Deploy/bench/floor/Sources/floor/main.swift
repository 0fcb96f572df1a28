// The lookup floor: a server that answers `stratus-bench --workload lookup` with the least work a
// server on SwiftNIO and PostgresNIO can do for it, to measure what that least work costs.
//
//   floor MODE HTTP_PORT POSTGRES_PORT
//
// Per request it parses HTTP/1.1 (NIO's decoder), takes the container from the path and the zone
// and record names from the body by byte search, runs the service's own lookup statement on the
// request's event loop, and writes the row's raw cells as the body. There is no authentication,
// routing, JSON, logging, metrics or error handling: everything the service does on top is
// missing, so whatever this costs, the service cannot cost less.
//
// MODE:
//   hello   a fixed answer, no database;
//   single  one statement per request (the service's `Prepared.Lookup`);
//   shared  requests that arrive while their event loop's statement runs wait, and the next
//           statement serves them all (the service's `Prepared.LookupMany`, one statement at a
//           time per event loop, up to 256 keys: what `StatementSharing` does on two cores).
//
// Statements run through PostgresNIO's callback API (rows handed to a closure on the
// connection's event loop), the cheaper of its two paths; eight connections per event loop, each
// HTTP connection keeps one. Sessions plan as the service's do (`plan_cache_mode =
// force_generic_plan`). The SQL must stay the same as `Prepared.Lookup` and `Prepared.LookupMany`
// in Sources/StratusStore/Connections/PreparedStatements.swift.
#if canImport(Glibc)
import Glibc
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import PostgresNIO

let arguments = CommandLine.arguments
guard arguments.count == 4, ["hello", "single", "shared"].contains(arguments[1]), let httpPort = Int(arguments[2]), let postgresPort = Int(arguments[3]) else {
    print("usage: floor hello|single|shared HTTP_PORT POSTGRES_PORT")
    exit(64)
}
let mode = arguments[1]
var logger = Logger(label: "floor")
logger.logLevel = .error

let columns = "record_name, record_type, change_seq, fields, created_at, created_by, modified_at, modified_by, deleted, parent, share_name, short_guid"
let lookupSQL = """
    SELECT r.*
    FROM zones z
    LEFT JOIN LATERAL (
        SELECT \(columns) FROM records
        WHERE container_id = $1 AND zone_id = z.zone_id AND record_name = ANY((SELECT $6::text[])::text[])
        OFFSET 0
    ) r ON true
    WHERE z.container_id = $1 AND z.environment = $2 AND z.database_scope = $3
      AND z.owner = $4 AND z.zone_name = $5 AND NOT z.deleted
    """
let lookupManySQL = """
    SELECT k.i, r.*
    FROM unnest($1::int4[], $2::int8[], $3::int2[], $4::int2[], $5::text[], $6::text[], $7::text[]) AS k(i, c, e, d, o, zn, n)
    CROSS JOIN LATERAL (
        SELECT zone_id FROM zones
        WHERE container_id = k.c AND environment = k.e AND database_scope = k.d AND owner = k.o AND zone_name = k.zn AND NOT deleted
        OFFSET 0
    ) z
    LEFT JOIN LATERAL (
        SELECT \(columns) FROM records
        WHERE container_id = k.c AND zone_id = z.zone_id AND record_name = k.n
        OFFSET 0
    ) r ON true
    """
/// The development environment's and the private database's codes in the store.
let development: Int16 = 1
let privateScope: Int16 = 2

struct Backend: @unchecked Sendable {
    var connection: PostgresConnection
    var prepared: PreparedQuery
}

/// One lookup's keys.
struct Key {
    var container: Int64
    var owner: String
    var zone: String
    var name: String
}

func data<Value: PostgresNonThrowingEncodable>(_ value: Value) -> PostgresData {
    var buffer = ByteBuffer()
    value.encode(into: &buffer, context: .default)
    return PostgresData(type: Value.psqlType, formatCode: .binary, value: buffer)
}

/// Per event loop, used on it only: the lookups waiting for its statement (`shared`).
final class Sharing: @unchecked Sendable {
    var queue: [(key: Key, done: (ByteBuffer) -> Void)] = []
    var running = false
    var turn = 0
    let backends: [Backend]

    init(backends: [Backend]) {
        self.backends = backends
    }

    func add(_ key: Key, done: @escaping (ByteBuffer) -> Void) {
        queue.append((key, done))
        if !running { run() }
    }

    private func run() {
        let batch = Array(queue.prefix(256))
        queue.removeFirst(batch.count)
        running = true
        turn += 1
        let backend = backends[turn % backends.count]
        let keys = batch.map(\.key)
        let binds = [data(keys.indices.map { Int32($0) }), data(keys.map(\.container)), data(keys.map { _ in development }),
                     data(keys.map { _ in privateScope }), data(keys.map(\.owner)), data(keys.map(\.zone)), data(keys.map(\.name))]
        let bodies = NIOLoopBoundBox(keys.map { _ in ByteBuffer() }, eventLoop: backend.connection.eventLoop)
        backend.prepared.execute(binds) { row in
            var cells = row.makeIterator()
            guard let first = cells.next()?.bytes, let index = first.getInteger(at: first.readerIndex, as: Int32.self) else { return }
            while let cell = cells.next() {
                if var bytes = cell.bytes { bodies.value[Int(index)].writeBuffer(&bytes) }
            }
        }.whenComplete { _ in
            for (index, waiting) in batch.enumerated() { waiting.done(bodies.value[index]) }
            self.running = false
            if !self.queue.isEmpty { self.run() }
        }
    }
}

let group = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)
var configuration = PostgresConnection.Configuration(host: "127.0.0.1", port: postgresPort, username: "postgres", password: nil, database: "postgres", tls: .disable)
configuration.options.additionalStartupParameters = [("plan_cache_mode", "force_generic_plan")]

// Per event loop its connections (and, `shared`, its queue); per container name its id and the
// owner of its private zones (`stratus-bench seed` makes one user per container).
var connectionsByLoop: [ObjectIdentifier: [Backend]] = [:]
var sharingByLoop: [ObjectIdentifier: Sharing] = [:]
var tenants: [String: (container: Int64, owner: String)] = [:]
if mode != "hello" {
    var id = 0
    for loop in group.makeIterator() {
        var backends: [Backend] = []
        for _ in 0..<8 {
            id += 1
            let connection = try await PostgresConnection.connect(on: loop, configuration: configuration, id: id, logger: logger).get()
            backends.append(Backend(connection: connection, prepared: try await connection.prepare(query: mode == "single" ? lookupSQL : lookupManySQL).get()))
        }
        connectionsByLoop[ObjectIdentifier(loop)] = backends
        sharingByLoop[ObjectIdentifier(loop)] = Sharing(backends: backends)
    }
    let rows = try await connectionsByLoop.values.first![0].connection.query(
        "SELECT c.name, z.container_id, z.owner FROM containers c JOIN zones z USING (container_id) WHERE z.environment = 1 AND z.database_scope = 2 AND z.zone_name = 'z0'",
        logger: logger).get()
    for row in rows {
        let (name, container, owner) = try row.decode((String, Int64, String).self)
        tenants[name] = (container, owner)
    }
}
let connections = connectionsByLoop
let sharings = sharingByLoop
let tenantsByName = tenants
let connectionTurns = NIOLockedValueBox([ObjectIdentifier: Int]())

let helloBody = ByteBuffer(string: #"{"records":[{"recordName":"rec-1","recordType":"Note","fields":{"title":{"value":""# + String(repeating: "x", count: 900) + #""}}}]}"#)

func response(_ body: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer {
    var out = allocator.buffer(capacity: body.readableBytes + 96)
    out.writeString("HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: \(body.readableBytes)\r\n\r\n")
    out.writeImmutableBuffer(body)
    return out
}

/// The container in `/database/1/<container>/development/private/records/lookup?...`.
func container(in uri: String) -> String {
    let parts = uri.split(separator: "/", maxSplits: 4)
    return parts.count > 2 ? String(parts[2]) : ""
}

/// The string after `key` in `body` (up to the next quote).
func string(after key: String, in body: ByteBuffer) -> String {
    let bytes = body.readableBytesView
    let needle = Array(key.utf8)
    var index = bytes.startIndex
    while index + needle.count <= bytes.endIndex {
        if bytes[index..<(index + needle.count)].elementsEqual(needle) {
            let start = index + needle.count
            var end = start
            while end < bytes.endIndex, bytes[end] != UInt8(ascii: "\"") { end += 1 }
            return String(decoding: bytes[start..<end], as: UTF8.self)
        }
        index += 1
    }
    return ""
}

final class FloorHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = ByteBuffer
    let backend: Backend?
    var uri = ""
    var body = ByteBuffer()

    init(backend: Backend?) {
        self.backend = backend
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            uri = head.uri
            body.clear()
        case .body(var part):
            body.writeBuffer(&part)
        case .end:
            answer(context: context)
        }
    }

    private func answer(context: ChannelHandlerContext) {
        let allocator = context.channel.allocator
        guard let backend else {
            context.writeAndFlush(wrapOutboundOut(response(helloBody, allocator: allocator)), promise: nil)
            return
        }
        let tenant = tenantsByName[container(in: uri)] ?? (0, "")
        let key = Key(container: tenant.container, owner: tenant.owner, zone: string(after: #"zoneName":""#, in: body),
                      name: string(after: #"recordName":""#, in: body))
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let reply: (ByteBuffer) -> Void = { answer in
            let (handler, context) = bound.value
            context.writeAndFlush(handler.wrapOutboundOut(response(answer, allocator: allocator)), promise: nil)
        }
        if mode == "shared" {
            sharings[ObjectIdentifier(context.eventLoop)]!.add(key, done: reply)
            return
        }
        let binds = [data(key.container), data(development), data(privateScope), data(key.owner), data(key.zone), data([key.name])]
        let answer = NIOLoopBoundBox(allocator.buffer(capacity: 1024), eventLoop: context.eventLoop)
        backend.prepared.execute(binds) { row in
            for cell in row {
                if var bytes = cell.bytes { answer.value.writeBuffer(&bytes) }
            }
        }.whenComplete { _ in reply(answer.value) }
    }
}

let server = try await ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 256)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
    .childChannelInitializer { channel in
        let loop = ObjectIdentifier(channel.eventLoop)
        let backends = connections[loop] ?? []
        let turn = connectionTurns.withLockedValue { turns in
            turns[loop, default: 0] += 1
            return turns[loop]!
        }
        let backend = backends.isEmpty ? nil : backends[turn % backends.count]
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .dropBytes)))
            try channel.pipeline.syncOperations.addHandler(FloorHandler(backend: backend))
        }
    }
    .bind(host: "127.0.0.1", port: httpPort).get()
print("floor: \(mode) on 127.0.0.1:\(httpPort), \(tenantsByName.count) containers")
fflush(stdout)
try await server.closeFuture.get()
