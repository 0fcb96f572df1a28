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
        if !takesMany {
            held.withLock { $0[HeldKey(key: key, token: tokenHash), default: Held()].polls += 1 }
        }
        startSweep()
        return waiter
    }

    private func startSweep() {
        if sweeping.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
            Task { await self.sweepDeadlines() }
        }
    }

    // MARK: Held between polls

    /// Notifications for a token whose long poll is in this process, or answered here a moment
    /// ago, kept in memory for its next poll. CloudKit JS's poll answers with one notification and
    /// polls again at once; a write usually makes several for one subscriber (one per matching
    /// subscription), and all but the first used to go through the queue table (an INSERT, then
    /// one take per poll). Held ones cost no statement. Not taken within `holdWindow` after the
    /// last poll ended (the client went away, or its next poll went to another process), they are
    /// queued after all (`flushHeld`), so every notification is still delivered once. A process
    /// that dies loses what it held, as PostgreSQL losing its unlogged queue would.
    private let held = Mutex<[HeldKey: Held]>([:])

    struct HeldKey: Hashable {
        var key: Key
        var token: String
    }

    struct Held {
        var payloads: [String] = []
        /// Each held notification's coalescing key (zone and database notifications).
        var keys: [String?] = []
        /// When each was made (for the delivery latency `/metrics` shows).
        var made: [Date] = []
        /// Long polls of the token registered now.
        var polls = 0
        /// With no poll registered, notifications are held until then.
        var until: ContinuousClock.Instant?

        /// What is held, to be queued with each one's coalescing key: queued without it, a held
        /// database or zone notification no longer coalesced with a twin made after it.
        var notifications: [HeldNotification] { zip(payloads, keys).map { (payload: $0, coalesceKey: $1) } }
    }

    /// How long after a poll ends its token's notifications are still held for the next one
    /// (CloudKit JS polls again ~10 ms after an answer).
    static let holdWindow: Duration = .milliseconds(500)
    /// Most notifications held for one token; past it they are queued.
    static let maximumHeld = 256

    /// A held notification handed over to be queued: its payload and its coalescing key.
    typealias HeldNotification = (payload: String, coalesceKey: String?)
    /// Where held notifications go when no poll came for them (set once by the notifier).
    let flushHeld = Mutex<(@Sendable (Key, String, [HeldNotification]) -> Void)?>(nil)

    /// Holds `payload` for `token`'s next poll if one is registered here or ended a moment ago
    /// (and wakes that poll): `true`; `nil` when one with the same coalescing key is held already
    /// (dropped, as the queue drops it); `false` otherwise (the caller queues it). One with a
    /// coalescing key is held only while the token's queue is known empty: else the queue may
    /// hold its twin, and coalesces it there.
    private func hold(_ payload: String, to key: Key, token: String, coalesceKey: String?) -> Bool? {
        // A twin still held, even past its window (the sweep has not queued it yet), coalesces
        // this one: queued instead, it would reach a poll that takes the held twin first.
        if let coalesceKey, held.withLock({ $0[HeldKey(key: key, token: token)]?.keys.contains(coalesceKey) ?? false }) { return nil }
        if coalesceKey != nil, mayHaveQueued(key, token: token) { return false }
        let now = ContinuousClock.now
        let kept = held.withLock { held -> Bool? in
            let heldKey = HeldKey(key: key, token: token)
            guard var entry = held[heldKey], entry.polls > 0 || (entry.until.map { now < $0 } ?? false),
                  entry.payloads.count < Self.maximumHeld else { return false }
            if let coalesceKey, entry.keys.contains(coalesceKey) { return nil }
            entry.payloads.append(payload)
            entry.keys.append(coalesceKey)
            entry.made.append(Date())
            held[heldKey] = entry
            return true
        }
        guard kept == true else { return kept }
        for waiter in waiters.withLock({ (($0[key] ?? [:]).values.filter { $0.tokenHash == token }) }) { waiter.wake() }
        return true
    }

    /// The oldest notification held for `token`, if any (once).
    func takeHeld(_ key: Key, token: String) -> (payload: String, made: Date)? {
        held.withLock { held in
            let heldKey = HeldKey(key: key, token: token)
            guard var entry = held[heldKey], !entry.payloads.isEmpty else { return nil }
            let payload = entry.payloads.removeFirst()
            entry.keys.removeFirst()
            let made = entry.made.removeFirst()
            held[heldKey] = entry
            return (payload, made)
        }
    }

    /// Hands over the held notifications no poll came for in time, and forgets idle tokens.
    private func flushExpiredHeld(_ now: ContinuousClock.Instant) {
        let expired = held.withLock { held -> [(HeldKey, [HeldNotification])] in
            var expired: [(HeldKey, [HeldNotification])] = []
            for (heldKey, entry) in held where entry.polls == 0 && (entry.until.map { now >= $0 } ?? true) {
                if !entry.payloads.isEmpty { expired.append((heldKey, entry.notifications)) }
                held.removeValue(forKey: heldKey)
            }
            return expired
        }
        guard !expired.isEmpty, let flush = flushHeld.withLock({ $0 }) else { return }
        for (heldKey, payloads) in expired { flush(heldKey.key, heldKey.token, payloads) }
    }

    /// Everything held, handed over at once (shutdown).
    func flushAllHeld() {
        let all = held.withLock { held -> [(HeldKey, [HeldNotification])] in
            defer { held.removeAll() }
            return held.filter { !$0.value.payloads.isEmpty }.map { ($0.key, $0.value.notifications) }
        }
        guard let flush = flushHeld.withLock({ $0 }) else { return }
        for (heldKey, payloads) in all { flush(heldKey.key, heldKey.token, payloads) }
    }

    /// Whether the deadline sweep runs (it does while any poll is registered).
    private let sweeping = Atomic<Bool>(false)
    /// How often waits past their deadline are ended: a poll's timeout is that much late at most.
    static let sweepPeriod: Duration = .milliseconds(100)

    /// Ends the waits past their deadlines every `sweepPeriod`, until no poll is registered.
    private func sweepDeadlines() async {
        while true {
            try? await Task.sleep(for: Self.sweepPeriod)
            let now = ContinuousClock.now
            flushExpiredHeld(now)
            let all = waiters.withLock { $0.values.flatMap(\.values) }
            if all.isEmpty, held.withLock({ $0.isEmpty }) {
                sweeping.store(false, ordering: .releasing)
                // A poll registered just now found the sweep running: take it up again for it.
                guard !waiters.withLock({ $0.isEmpty }) || !held.withLock({ $0.isEmpty }),
                      sweeping.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
                continue
            }
            for waiter in all { waiter.wakeIfPast(now) }
        }
    }

    /// Ends a poll's registration (and its wait).
    func remove(_ key: Key, _ waiter: CourierWaiter) {
        waiters.withLock { waiting in
            waiting[key]?.removeValue(forKey: ObjectIdentifier(waiter))
            if waiting[key]?.isEmpty == true { waiting.removeValue(forKey: key) }
        }
        if !waiter.takesMany {
            let until = ContinuousClock.now + Self.holdWindow
            held.withLock { held in
                let heldKey = HeldKey(key: key, token: waiter.tokenHash)
                held[heldKey]?.polls -= 1
                held[heldKey]?.until = until
            }
        }
        waiter.wake()
    }

    /// Hands `payload` to a poll of `token` waiting in this process, if one is parked now, or holds
    /// it for the token's next poll (see `held`): `true`; `nil` when it coalesced with one held;
    /// `false` when neither (the caller queues it).
    func offer(_ payload: String, to key: Key, token: String, coalesceKey: String? = nil) -> Bool? {
        let candidates = waiters.withLock { waiting in (waiting[key] ?? [:]).values.filter { $0.tokenHash == token } }
        if candidates.contains(where: { $0.offer(payload) }) { return true }
        return hold(payload, to: key, token: token, coalesceKey: coalesceKey)
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
        var handed: [(payload: String, made: Date)] = []
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
                state.handed.append((payload, Date()))
                return (true, continuation)
            }
            guard takesMany, state.handed.count < Self.maximumHanded else { return (false, nil) }
            state.handed.append((payload, Date()))
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
    func takeHanded() -> (payload: String, made: Date)? {
        state.withLock { state in state.handed.isEmpty ? nil : state.handed.removeFirst() }
    }

    /// Every notification handed and not taken (once): put back when the waiter goes.
    func takeAllHanded() -> [String] {
        state.withLock { state in
            defer { state.handed.removeAll() }
            return state.handed.map(\.payload)
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
