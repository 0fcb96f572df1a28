import Foundation
import StratusStore
import Synchronization

/// The web courier polls (and WebSocket streams) waiting in this process, by subscriber, and what
/// this process knows of their queues: which were found empty since the subscriber's last
/// wake-up. The `Notifier` hands notifications to parked polls and wakes them through it.
final class CourierWaiters: Sendable {
    typealias Key = Notifier.CourierKey

    /// Polls waiting in this process, by subscriber.
    private let waiters = Mutex<[Key: [ObjectIdentifier: CourierWaiter]]>([:])

    /// Registers a poll of `key`'s notifications: wake-ups sent from now on reach its waiter
    /// (one is kept until the next wait), so one sent between a poll's look and its wait is not missed.
    func register(_ key: Key, tokenHash: String, takesMany: Bool = false) -> CourierWaiter {
        let waiter = CourierWaiter(tokenHash: tokenHash, takesMany: takesMany)
        waiters.withLock { $0[key, default: [:]][ObjectIdentifier(waiter)] = waiter }
        if sweeping.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
            Task { await self.sweepDeadlines() }
        }
        return waiter
    }

    /// Whether the deadline sweep runs (it does while any poll is registered).
    private let sweeping = Atomic<Bool>(false)
    /// How often waits past their deadline are ended: a poll's timeout is that much late at most.
    static let sweepPeriod: Duration = .milliseconds(100)

    /// Ends the waits past their deadlines every `sweepPeriod`, until no poll is registered.
    private func sweepDeadlines() async {
        while true {
            try? await Task.sleep(for: Self.sweepPeriod)
            let all = waiters.withLock { $0.values.flatMap(\.values) }
            if all.isEmpty {
                sweeping.store(false, ordering: .releasing)
                // A poll registered just now found the sweep running: take it up again for it.
                guard !waiters.withLock({ $0.isEmpty }),
                      sweeping.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
                continue
            }
            let now = ContinuousClock.now
            for waiter in all { waiter.wakeIfPast(now) }
        }
    }

    /// Ends a poll's registration (and its wait).
    func remove(_ key: Key, _ waiter: CourierWaiter) {
        waiters.withLock { waiting in
            waiting[key]?.removeValue(forKey: ObjectIdentifier(waiter))
            if waiting[key]?.isEmpty == true { waiting.removeValue(forKey: key) }
        }
        waiter.wake()
    }

    /// Hands `payload` to a poll of `token` waiting in this process, if one is parked now.
    func offer(_ payload: String, to key: Key, token: String) -> Bool {
        let candidates = waiters.withLock { waiting in (waiting[key] ?? [:]).values.filter { $0.tokenHash == token } }
        return candidates.contains { $0.offer(payload) }
    }

    /// Notifications may have been queued for `key`'s tokens: its polls wake and look.
    func wake(_ key: Key) {
        emptiness.withLock { state in
            // Recorded even for a subscriber not seen yet: a take already under way for them must
            // not then mark their queue empty.
            state.forgetAllIfFull()
            state.clock += 1
            state.known[key] = (generation: state.clock, empty: [])
        }
        for waiter in waiters.withLock({ Array(($0[key] ?? [:]).values) }) { waiter.wake() }
    }

    /// Wakes every poll of this process (a wake-up may have been missed while the listener was down).
    func wakeAll() {
        emptiness.withLock { $0.forgetAll() }
        for waiter in waiters.withLock({ $0.values.flatMap(\.values) }) { waiter.wake() }
    }

    // MARK: Known-empty queues

    /// Per subscriber, the wake-ups seen (a generation) and the tokens a take found nothing for
    /// since: a poll of such a token parks without asking PostgreSQL, as nothing can have been
    /// queued for it without a wake-up reaching this process (this process's own queueing wakes
    /// at once, another's through `pg_notify`; a reconnected listener forgets everything). A
    /// subscriber's polls re-poll after every notification, and most find their queue empty:
    /// that was one statement per notification delivered.
    private let emptiness = Mutex(Emptiness())

    struct Emptiness {
        /// Counts wake-ups: each subscriber's generation is the count at their last one.
        var clock = 0
        /// The generation of a subscriber with no entry (the count when everything was last forgotten).
        var floor = 0
        var known: [Key: (generation: Int, empty: Set<String>)] = [:]

        func generation(_ key: Key) -> Int { known[key]?.generation ?? floor }

        /// Forgets every subscriber: what takes under way read before is then stale.
        mutating func forgetAll() {
            known.removeAll()
            clock += 1
            floor = clock
        }

        mutating func forgetAllIfFull() {
            if known.count >= 100_000 { forgetAll() }
        }
    }

    /// The wake-up generation of `key`, to read before looking at its queue.
    func queueGeneration(_ key: Key) -> Int {
        emptiness.withLock { $0.generation(key) }
    }

    /// Whether `token`'s queue may hold notifications (not found empty since the last wake-up).
    func mayHaveQueued(_ key: Key, token: String) -> Bool {
        emptiness.withLock { !($0.known[key]?.empty.contains(token) ?? false) }
    }

    /// A take found nothing for `token`, having read `generation` before it: unless a wake-up
    /// came since, its queue is known empty.
    func noteEmpty(_ key: Key, token: String, generation: Int) {
        emptiness.withLock { state in
            guard state.generation(key) == generation else { return }
            state.forgetAllIfFull()
            if state.known[key] == nil { state.known[key] = (generation: state.floor, empty: []) }
            guard state.known[key]!.generation == generation else { return }
            state.known[key]!.empty.insert(token)
        }
    }
}

/// One poll (or WebSocket stream) waiting for a subscriber's notifications: a flag and at most one
/// suspended task, cheaper per poll than a stream and a task group with a sleeping child (each poll
/// answered is one wait, and a busy subscriber polls tens of times a second). Deadlines are kept,
/// not timed: one sweep for the whole process ends the waits past theirs (a timer per wait, armed
/// and cancelled from outside the event loop, woke an event loop thread twice per poll).
final class CourierWaiter: Sendable {
    private struct State {
        /// A wake-up arrived while nobody waited: the next wait returns at once.
        var woken = false
        var continuation: CheckedContinuation<Void, Never>?
        /// Notifications handed to this waiter (`offer`), oldest first, for it to send: at most one
        /// for a long poll (its answer), up to `maximumHanded` for a WebSocket stream.
        var handed: [String] = []
        /// When the current wait ends without a wake-up.
        var deadline: ContinuousClock.Instant?
    }

    private let state = Mutex(State())
    /// The web courier token polled.
    let tokenHash: String
    /// A WebSocket stream: it sends every notification as it comes, so it takes them while busy
    /// sending too (a long poll answers with one, so it takes one, only while parked).
    let takesMany: Bool
    /// Most notifications a stream holds handed and not yet sent; past it they are queued.
    static let maximumHanded = 64

    init(tokenHash: String, takesMany: Bool = false) {
        self.tokenHash = tokenHash
        self.takesMany = takesMany
    }

    /// Hands `payload` to this waiter, ending its wait if it is parked: a long poll takes one
    /// while parked; a stream takes up to `maximumHanded`, parked or busy sending (its next wait
    /// then returns at once). `false` when it cannot take it (the caller queues it).
    func offer(_ payload: String) -> Bool {
        let (taken, continuation) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            if let continuation = state.continuation, state.handed.isEmpty {
                state.continuation = nil
                state.deadline = nil
                state.handed.append(payload)
                return (true, continuation)
            }
            guard takesMany, state.handed.count < Self.maximumHanded else { return (false, nil) }
            state.handed.append(payload)
            guard let continuation = state.continuation else {
                state.woken = true
                return (true, nil)
            }
            state.continuation = nil
            state.deadline = nil
            return (true, continuation)
        }
        continuation?.resume()
        return taken
    }

    /// The oldest notification handed to this waiter, if any (once).
    func takeHanded() -> String? {
        state.withLock { state in state.handed.isEmpty ? nil : state.handed.removeFirst() }
    }

    /// Every notification handed and not taken (once): put back when the waiter goes.
    func takeAllHanded() -> [String] {
        state.withLock { state in
            defer { state.handed.removeAll() }
            return state.handed
        }
    }

    /// Ends the current wait, or the next one if none is in progress.
    func wake() {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let continuation = state.continuation else {
                state.woken = true
                return nil
            }
            state.continuation = nil
            state.deadline = nil
            return continuation
        }
        continuation?.resume()
    }

    /// Waits for a wake-up (one that came since the last wait counts), or until `deadline`
    /// (noticed by the notifier's deadline sweep, within its period).
    func wait(until deadline: ContinuousClock.Instant) async {
        guard ContinuousClock.now < deadline else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let now = state.withLock { state -> Bool in
                if state.woken {
                    state.woken = false
                    return true
                }
                state.continuation = continuation
                state.deadline = deadline
                return false
            }
            if now { continuation.resume() }
        }
        state.withLock {
            $0.deadline = nil
            // The sweep may have ended the wait as another wake-up came: neither carries over.
            $0.woken = false
        }
    }

    /// Ends the current wait if its deadline has passed.
    func wakeIfPast(_ now: ContinuousClock.Instant) {
        let continuation = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let deadline = state.deadline, deadline <= now, let continuation = state.continuation else { return nil }
            state.continuation = nil
            state.deadline = nil
            return continuation
        }
        continuation?.resume()
    }
}
