import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import Synchronization

/// Whether PostgreSQL committed what a statement outside `BEGIN … COMMIT` wrote: its
/// `ReadyForQuery`, watched on the connection's channel.
///
/// In the extended protocol PostgreSQL sends a statement's rows and `CommandComplete`, and commits
/// the statement's implicit transaction only when it processes the `Sync` that follows; only the
/// `ReadyForQuery` after it says the commit succeeded. PostgresNIO (1.33) ends a query's rows at
/// `CommandComplete` and has no word for what comes after: an `ErrorResponse` there (a deferred
/// constraint, a serialization failure at commit) or a FATAL (a restart, a terminated backend)
/// closes the connection as an "unexpected message", and the statement that had already
/// "succeeded" never hears of it. The service answered such writes 200 and they were gone.
///
/// So each connection's channel gets a small handler between TLS and PostgresNIO's own, which
/// reads the messages' frames (a type byte and a length; only an `ErrorResponse`'s body is kept)
/// and counts the `Sync` and `Query` messages sent and the `ReadyForQuery` messages received:
/// each of the first gets exactly one of the second. When a statement's rows are read, every
/// message sent so far is the statement's or earlier (the connection is leased by one task,
/// which waits), so its commit is confirmed when the counts are equal. That is almost always
/// already so: PostgreSQL writes `CommandComplete` and `ReadyForQuery` in one flush.
///
/// PostgresNIO keeps the channel to itself (`PostgresConnection.channel` is internal); the watch
/// finds it by reflection, once per connection. Where it cannot (a PostgresNIO that renamed the
/// property) or the frames stop making sense, `PostgresConnection.confirmCommitted` falls back to
/// a second round trip on the connection, which PostgresNIO sends only after the statement's
/// `ReadyForQuery`, and logs that it does.
final class CommitWatch: Sendable {
    /// What became of a statement's implicit transaction.
    enum Outcome: Sendable {
        /// Its `ReadyForQuery` arrived (or it runs inside `BEGIN … COMMIT`, where `COMMIT` decides).
        case confirmed
        /// PostgreSQL refused to commit it (an `ErrorResponse` of severity ERROR after its rows):
        /// rolled back.
        case refused(ServerFailure)
        /// The connection closed before its `ReadyForQuery`, after a FATAL or with no word at all:
        /// it may have committed or not.
        case unknown(ServerFailure?)
        /// The watch cannot tell (see the type's note): confirm another way.
        case unwatched
    }

    /// An `ErrorResponse`'s fields that say what happened.
    struct ServerFailure: Sendable, CustomStringConvertible {
        var severity = ""
        var sqlState = ""
        var message = ""

        /// FATAL or PANIC: the session ends with it, whatever the transaction's fate.
        var endsSession: Bool { severity == "FATAL" || severity == "PANIC" }

        var description: String { "\(severity) \(sqlState): \(message)" }

        init() {}

        init(_ error: PSQLError) {
            severity = error.serverInfo?[.severity] ?? error.serverInfo?[.localizedSeverity] ?? ""
            sqlState = error.serverInfo?[.sqlState] ?? ""
            message = error.serverInfo?[.message] ?? ""
        }
    }

    private struct State {
        /// `Sync` and `Query` messages written since the watch was added.
        var sent = 0
        /// `ReadyForQuery` messages received for them.
        var ready = 0
        /// The transaction status of the last `ReadyForQuery`: `I` idle, `T` in a transaction
        /// block, `E` in a failed one.
        var status = UInt8(ascii: "I")
        /// Whether a `CommandComplete` arrived since the last `ReadyForQuery`.
        var completed = false
        /// An `ErrorResponse` that arrived after a `CommandComplete`, before the `ReadyForQuery`.
        var failure: ServerFailure?
        /// The failure at commit that the last `ReadyForQuery` ended (PostgreSQL answers the `Sync`
        /// whose commit failed with the error, then `ReadyForQuery`), and which `Sync` that was.
        var refused: (sync: Int, failure: ServerFailure)?
        var closed = false
        /// The frames stopped making sense: the counts mean nothing any more.
        var lost = false
        var waiters: [CheckedContinuation<Outcome, Never>] = []

        /// The outcome if it is known now.
        func outcome() -> Outcome? {
            if lost { return .unwatched }
            if ready >= sent {
                if let refused, refused.sync == sent { return .refused(refused.failure) }
                return .confirmed
            }
            // Inside BEGIN … COMMIT nothing commits before COMMIT, which answers for itself.
            if status != UInt8(ascii: "I") { return .confirmed }
            guard closed else { return nil }
            if let failure, !failure.endsSession { return .refused(failure) }
            return .unknown(failure)
        }
    }

    private let state = Mutex(State())

    /// The outcome of the statement whose rows were just read on the watched connection.
    func outcome() async -> Outcome {
        if let known = state.withLock({ $0.outcome() }) { return known }
        return await withCheckedContinuation { continuation in
            let known: Outcome? = state.withLock { state in
                if let known = state.outcome() { return known }
                state.waiters.append(continuation)
                return nil
            }
            if let known { continuation.resume(returning: known) }
        }
    }

    /// Wakes the waiters if their outcome is known (called with the state changed).
    private func update(_ change: (inout State) -> Void) {
        let (waiters, outcome): ([CheckedContinuation<Outcome, Never>], Outcome?) = state.withLock { state in
            change(&state)
            guard !state.waiters.isEmpty, let outcome = state.outcome() else { return ([], nil) }
            defer { state.waiters = [] }
            return (state.waiters, outcome)
        }
        if let outcome { for waiter in waiters { waiter.resume(returning: outcome) } }
    }

    // MARK: What the handler sees

    fileprivate func sentSync() { update { $0.sent += 1 } }

    fileprivate func received(type: UInt8, body: ByteBuffer) {
        switch type {
        case UInt8(ascii: "Z"):
            update { state in
                // One that answers a message sent before the watch was added: not ours to count.
                guard state.ready < state.sent else { return }
                state.ready += 1
                state.status = body.getInteger(at: body.readerIndex, as: UInt8.self) ?? UInt8(ascii: "I")
                if let failure = state.failure { state.refused = (state.ready, failure) }
                state.completed = false
                state.failure = nil
            }
        case UInt8(ascii: "C"):
            update { $0.completed = true }
        case UInt8(ascii: "E"):
            let failure = Self.failure(body)
            update { state in
                if state.completed { state.failure = failure }
            }
        default:
            break
        }
    }

    fileprivate func closed() { update { $0.closed = true } }

    fileprivate func lostTrack() { update { $0.lost = true } }

    /// An `ErrorResponse`'s fields: a code byte and a NUL-terminated text each, then a NUL.
    static func failure(_ body: ByteBuffer) -> ServerFailure {
        var body = body
        var failure = ServerFailure()
        while let code = body.readInteger(as: UInt8.self), code != 0 {
            guard let text = body.readNullTerminatedString() else { break }
            switch code {
            case UInt8(ascii: "V"): failure.severity = text
            case UInt8(ascii: "S") where failure.severity.isEmpty: failure.severity = text
            case UInt8(ascii: "C"): failure.sqlState = text
            case UInt8(ascii: "M"): failure.message = text
            default: break
            }
        }
        return failure
    }

    // MARK: Finding a connection's watch

    private struct Entry {
        weak var connection: PostgresConnection?
        /// nil: the connection could not be watched.
        var watch: CommitWatch?
    }

    private static let watches = Mutex<[ObjectIdentifier: Entry]>([:])

    /// The watch of `connection`, added to its channel the first time it is asked for (before the
    /// connection's first statement goes out: ask before sending); nil when the channel cannot be
    /// reached (the caller confirms another way).
    static func of(_ connection: PostgresConnection, logger: Logger) async -> CommitWatch? {
        let key = ObjectIdentifier(connection)
        let known: Entry? = watches.withLock { entries in
            guard let entry = entries[key] else { return nil }
            // The address of a connection since freed, taken by a new one.
            guard entry.connection === connection else {
                entries[key] = nil
                return nil
            }
            return entry
        }
        if let known { return known.watch }
        let watch = await add(to: connection, logger: logger)
        watches.withLock { entries in
            // Entries stay while their connection lives (a statement on a closed connection must
            // still find its watch), and go once it is freed.
            if entries.count >= 64, entries.count.nonzeroBitCount == 1 {
                entries = entries.filter { $0.value.connection != nil }
            }
            entries[key] = Entry(connection: connection, watch: watch)
        }
        return watch
    }

    /// Whether the watch of every connection is found and added, or the service falls back to a
    /// second round trip for each write (`of(_:logger:)` logs that once).
    private static let warned = Atomic<Bool>(false)

    private static func add(to connection: PostgresConnection, logger: Logger) async -> CommitWatch? {
        guard let channel = Mirror(reflecting: connection).descendant("channel") as? any Channel else {
            if !warned.exchange(true, ordering: .relaxed) {
                logger.warning("this PostgresNIO's connections cannot be watched for ReadyForQuery: each write outside a transaction is confirmed with a second round trip")
            }
            return nil
        }
        let watch = CommitWatch()
        do {
            try await channel.eventLoop.submit {
                let pipeline = channel.pipeline.syncOperations
                let handler = Handler(watch: watch, logger: logger)
                // Between TLS, when there is TLS, and PostgresNIO's handler, which is first otherwise.
                if let tls = try? pipeline.handler(type: NIOSSLClientHandler.self) {
                    try pipeline.addHandler(handler, position: .after(tls))
                } else {
                    try pipeline.addHandler(handler, position: .first)
                }
                if !channel.isActive { watch.closed() }
            }.get()
        } catch {
            // The channel closed meanwhile: its statements fail on their own.
            watch.closed()
        }
        return watch
    }

    /// Reads the frames going both ways (see the type's note). Runs on the channel's event loop.
    private final class Handler: ChannelDuplexHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        typealias OutboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let watch: CommitWatch
        let logger: Logger
        private var inbound = Frames(keeping: [UInt8(ascii: "E"), UInt8(ascii: "Z")])
        private var outbound = Frames(keeping: [])

        init(watch: CommitWatch, logger: Logger) {
            self.watch = watch
            self.logger = logger
        }

        private func lostTrack(_ direction: String) {
            logger.warning("CommitWatch lost track of a PostgreSQL connection's \(direction) messages: its writes are confirmed with a second round trip from now on")
            watch.lostTrack()
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let watch = watch
            if !inbound.broken, !inbound.read(unwrapInboundIn(data), each: { type, body in watch.received(type: type, body: body) }) {
                lostTrack("incoming")
            }
            context.fireChannelRead(data)
        }

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            let watch = watch
            if !outbound.broken, !outbound.read(unwrapOutboundIn(data), each: { type, _ in
                if type == UInt8(ascii: "S") || type == UInt8(ascii: "Q") { watch.sentSync() }
            }) {
                lostTrack("outgoing")
            }
            context.write(data, promise: promise)
        }

        func channelInactive(context: ChannelHandlerContext) {
            watch.closed()
            context.fireChannelInactive()
        }

        func handlerRemoved(context: ChannelHandlerContext) {
            watch.closed()
        }
    }

    /// A stream of protocol messages cut into frames: a type byte, a 4-byte length that counts
    /// itself, the body. Bodies of the kept types are gathered (up to 16 KiB; the rest is
    /// skipped); others are skipped without copying.
    struct Frames {
        let keeping: Set<UInt8>
        private var header: [UInt8] = []
        private var type: UInt8 = 0
        private var remaining = 0
        private var body: ByteBuffer?
        private(set) var broken = false

        init(keeping: Set<UInt8>) {
            self.keeping = keeping
            header.reserveCapacity(5)
        }

        /// Reads `bytes`, calling `each` for every message completed. False once the frames make
        /// no sense (a length below 4 or above 1 GiB, a type that is no letter or digit).
        mutating func read(_ bytes: ByteBuffer, each: (UInt8, ByteBuffer) -> Void) -> Bool {
            guard !broken else { return false }
            var bytes = bytes
            while bytes.readableBytes > 0 {
                if remaining == 0, body == nil {
                    // A header, perhaps split across reads.
                    while header.count < 5, let byte = bytes.readInteger(as: UInt8.self) { header.append(byte) }
                    guard header.count == 5 else { return true }
                    type = header[0]
                    let length = Int(header[1]) << 24 | Int(header[2]) << 16 | Int(header[3]) << 8 | Int(header[4])
                    header.removeAll(keepingCapacity: true)
                    let printable = (type >= 0x30 && type <= 0x39) || (type >= 0x41 && type <= 0x5A) || (type >= 0x61 && type <= 0x7A)
                    guard printable, length >= 4, length <= 1 << 30 else {
                        broken = true
                        return false
                    }
                    remaining = length - 4
                    if keeping.contains(type) { body = ByteBuffer() }
                    if remaining == 0 {
                        each(type, body ?? ByteBuffer())
                        body = nil
                        continue
                    }
                }
                let take = min(remaining, bytes.readableBytes)
                if body != nil, var slice = bytes.readSlice(length: take) {
                    if body!.readableBytes < 16 * 1024 { body!.writeBuffer(&slice) }
                } else {
                    bytes.moveReaderIndex(forwardBy: take)
                }
                remaining -= take
                if remaining == 0 {
                    each(type, body ?? ByteBuffer())
                    body = nil
                }
            }
            return true
        }
    }
}
