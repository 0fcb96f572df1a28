import NIOCore
import Synchronization

/// The address of the client whose request the current task serves, as the connection shows it
/// (`StratusHTTPChannel` sets it per request), or, for a connection from a trusted proxy, as the
/// proxy says in `X-Forwarded-For` (`TrustedProxies`). `nil` outside a request, or in the
/// in-process router tests. Used for sign-in and sign-up limits and the audit log; never taken
/// from a header a client could forge.
enum ClientAddress {
    static var current: String? { RequestID.state?.client }
}

/// The connection a request arrived on, for the web courier's long polls: whether the client is
/// still there, and what to do when the answer could not be written to it. One per connection
/// (its requests are answered one at a time). `nil` for requests that did not come through
/// `StratusHTTPChannel` (the tests' in-process router).
final class RequestConnection: Sendable {
    static var current: RequestConnection? { RequestID.state?.connection }

    let channel: any Channel
    /// The client's IP address as the socket has it (NIO formats it anew on each `ipAddress`).
    let peer: String?
    private let inputEnded = Atomic<Bool>(false)
    private let whenGone = Mutex<[Action]>([])
    /// Boxed: a closure stored in a `Mutex` is re-wrapped in reabstraction thunks on every access.
    private final class Action: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
    private let undelivered = Mutex<Action?>(nil)

    init(channel: any Channel) {
        self.channel = channel
        self.peer = channel.remoteAddress?.ipAddress
        channel.closeFuture.whenComplete { _ in self.gone() }
    }

    /// Whether the client is still there: connected, and still sending (a client that closed
    /// its side will not poll again on this connection).
    var isOpen: Bool { channel.isActive && !inputEnded.load(ordering: .relaxed) }

    /// Runs `action` once the client is gone (at once if it is).
    func onGone(_ action: @escaping @Sendable () -> Void) {
        let now = whenGone.withLock { actions -> Bool in
            if !isOpen { return true }
            actions.append(Action(action))
            return false
        }
        if now { action() }
    }

    /// The client closed its side of the connection.
    func inputClosed() {
        inputEnded.store(true, ordering: .relaxed)
        gone()
    }

    private func gone() {
        for action in whenGone.withLock({ actions in defer { actions.removeAll() }; return actions }) { action.run() }
    }

    /// Runs `action` if the answer to the current request cannot be written (the client went away).
    func onUndelivered(_ action: (@Sendable () -> Void)?) {
        let boxed = action.map(Action.init)
        undelivered.withLock { $0 = boxed }
    }

    /// What runs on the connection once a 101 answer switched it to WebSocket.
    typealias Upgrade = @Sendable (any Channel) async -> Void
    private final class UpgradeBox: Sendable {
        let run: Upgrade
        init(_ run: @escaping Upgrade) { self.run = run }
    }
    private let upgrade = Mutex<UpgradeBox?>(nil)

    /// Switches the connection to WebSocket after the current answer (a 101), and runs `stream` on it.
    func upgrade(_ stream: @escaping Upgrade) {
        let box = UpgradeBox(stream)
        upgrade.withLock { $0 = box }
    }

    /// The upgrade the current answer asked for, taken.
    func takeUpgrade() -> Upgrade? {
        upgrade.withLock { box in
            defer { box = nil }
            return box
        }?.run
    }

    private let streamsAnswer = Atomic<Bool>(false)

    /// Writes the current answer's body as it is produced, piece by piece, instead of gathering
    /// it first (asset downloads: the server never holds a whole file).
    func streamAnswer() { streamsAnswer.store(true, ordering: .relaxed) }

    /// Whether the current answer is to be streamed; the flag is cleared for the next.
    func takeStreamAnswer() -> Bool { streamsAnswer.exchange(false, ordering: .relaxed) }

    /// Whether the current request's answer has an action for when it cannot be written.
    var awaitsDelivery: Bool { undelivered.withLock { $0 != nil } }

    /// The answer was not written.
    func answerFailed() {
        undelivered.withLock { action in
            defer { action = nil }
            return action
        }?.run()
    }
}
