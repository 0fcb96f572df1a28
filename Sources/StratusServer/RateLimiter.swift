import Foundation
import Logging
import StratusCore
import StratusStore
import Synchronization

/// Rate limits and request metering, shared by every server process on one database.
///
/// Each limited key (a container-environment; a signed-in user; for calls without a user, the API
/// token and client address) has a one-second window. A process admits requests against its
/// *allowance* for the current window without asking anyone: a request costs its operations
/// (records of a lookup, operations of a modify; 1 otherwise), and is answered `THROTTLED` with
/// `retryAfter` when the allowance would be passed. About twenty times a second each process writes
/// its own counts of the current window to `rate_windows` and reads the others': its allowance
/// becomes what it has admitted plus an equal share (among the processes active on the key) of
/// what the window has left. One process alone is exact; with several, each can pass the limit
/// only by what the others admitted since their last report (at most one sync interval of their
/// share), and a new window starts each process at its share (limit ÷ processes seen last).
/// A key is reported only once a window has used a tenth of the process's share of its limit,
/// so keys far from their limits (nearly all of them) cost no database work at all.
///
/// Counts of requests, throttled and refused (`QUOTA_EXCEEDED`) operations per
/// container-environment go to `request_counts` once a second, for `stratus usage`.
public final class RateLimiter: Sendable {
    /// A limited key.
    struct Key: Hashable, Sendable {
        enum Kind: UInt8, Sendable { case container, user, client, notifications, pushes }
        var kind: Kind
        var containerID: ContainerID
        var environment: ContainerEnvironment
        /// The user, or the API token's digest and the client address; empty for the container.
        var name: String

        /// The key's name in `rate_windows`.
        var text: String { "\(kind.rawValue):\(containerID):\(environment.code):\(name)" }
    }

    struct Window {
        var second: Int64 = 0
        var admitted: Int64 = 0
        var allowance: Int64 = 0
        /// The key's limit at its last admission.
        var limit: Int64 = 0
        /// Admitted past the allowance by a request larger than it (carried into the next windows).
        var debt: Int64 = 0
        /// Processes active on the key at the last sync (this one included).
        var processes: Int64 = 1

        /// Whether the window has used a tenth of this process's share of the limit. Keys below
        /// that are not reported: far from their limit, they need no coordination, and a
        /// container far below its limits costs PostgreSQL nothing. What other processes then
        /// cannot see is at most a tenth of the limit per process (the error bound in the README).
        var isWorthReporting: Bool { admitted > 0 && admitted * 10 * processes >= limit }
    }

    struct Meter {
        var requests: Int64 = 0
        var throttled: Int64 = 0
        var refused: Int64 = 0
        var notifications: Int64 = 0
        var notificationsDropped: Int64 = 0
        var pushes: Int64 = 0
    }

    struct MeterKey: Hashable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
        var bucket: Int64
    }

    struct State {
        var windows: [Key: Window] = [:]
        var meters: [MeterKey: Meter] = [:]
    }

    /// This process, in `rate_windows`.
    let process = RandomUUID.string()
    let state = Mutex(State())
    let admin: AdminStore
    let configuration: DatabaseConfiguration
    let logger: Logger
    /// Time between syncs.
    static let interval: Duration = .milliseconds(50)

    init(admin: AdminStore, configuration: DatabaseConfiguration, logger: Logger) {
        self.admin = admin
        self.configuration = configuration
        self.logger = logger
    }

    struct QuotaKey: Hashable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
    }
    /// Each container-environment's limits, as last read.
    let quotaLimits = Mutex<[QuotaKey: (limits: QuotaLimits, read: ContinuousClock.Instant)]>([:])

    /// A container-environment's limits, read at most once a minute (and again as soon as an
    /// operator changes them, on every process: `invalidate`).
    func limits(containerID: ContainerID, environment: ContainerEnvironment) async throws -> QuotaLimits {
        let key = QuotaKey(containerID: containerID, environment: environment)
        let now = ContinuousClock.now
        if let cached = quotaLimits.withLock({ $0[key] }), now - cached.read < .seconds(60) { return cached.limits }
        let limits = try await admin.metering.quotaSettings(containerID: containerID, environment: environment).limits
        quotaLimits.withLock { $0[key] = (limits, now) }
        return limits
    }

    /// Forgets limits an operator changed (on any process).
    func invalidate(_ event: Invalidations.Event) {
        switch event {
        case .quota(let containerID, let environment):
            _ = quotaLimits.withLock { $0.removeValue(forKey: QuotaKey(containerID: containerID, environment: environment)) }
        case .all:
            quotaLimits.withLock { $0.removeAll() }
        default:
            break
        }
    }

    /// The current window: the wall-clock second, or (tests) a second held fixed.
    func nowSecond() -> Int64 { heldSecond.withLock { $0 } ?? Int64(Date().timeIntervalSince1970) }

    /// Tests hold the window still, so what a second admits does not depend on how fast they run.
    let heldSecond = Mutex<Int64?>(nil)
    public func holdWindow(_ second: Int64?) { heldSecond.withLock { $0 = second } }

    /// Admits a request of `cost` operations under both `(key, limit)` pairs (the container's and
    /// the caller's), or answers `THROTTLED`. Two pairs, not a list: no array per request.
    func admit(_ first: (key: Key, limit: Int64), _ second: (key: Key, limit: Int64), cost: Int64, containerID: ContainerID,
               environment: ContainerEnvironment) throws(StratusError) {
        let now = nowSecond()
        let refusal: Key? = state.withLock { state in
            /// The key's window in this second; `nil` when `cost` does not fit in it.
            func window(_ key: Key, limit: Int64) -> Window? {
                var window = state.windows[key] ?? Window()
                if window.second != now {
                    let debt = window.second == now - 1 ? window.debt : 0
                    window = Window(second: now, admitted: debt, allowance: max(1, limit / window.processes), limit: limit, debt: 0,
                                    processes: window.processes)
                }
                window.limit = limit
                // A request larger than the whole allowance passes in an empty window, and the
                // excess is carried into the next ones.
                if window.admitted + cost > window.allowance, !(window.admitted == 0 && cost > window.allowance) { return nil }
                return window
            }
            let meterKey = MeterKey(containerID: containerID, environment: environment, bucket: now / 10 * 10)
            guard var one = window(first.key, limit: first.limit) else {
                state.meters[meterKey, default: Meter()].throttled += cost
                return first.key
            }
            guard var two = window(second.key, limit: second.limit) else {
                state.meters[meterKey, default: Meter()].throttled += cost
                return second.key
            }
            func admit(_ window: inout Window, under key: Key) {
                window.admitted += cost
                if window.admitted > window.allowance { window.debt = window.admitted - window.allowance }
                state.windows[key] = window
            }
            admit(&one, under: first.key)
            admit(&two, under: second.key)
            state.meters[meterKey, default: Meter()].requests += cost
            return nil
        }
        guard let refusal else { return }
        let whose: String
        switch refusal.kind {
        case .container: whose = "this container's"
        case .user: whose = "your user's"
        case .client: whose = "this API token's (for this client address)"
        case .notifications: whose = "this container's notification"  // never a request's key
        case .pushes: whose = "this container's push"  // never a request's key
        }
        throw StratusError(.throttled, "too many requests: \(whose) limit of operations per second is reached; retry after the time given (a batch counts each of its operations)",
                           retryAfter: 1)
    }

    /// How many of `count` notifications a container-environment may queue now under its
    /// `notificationsPerSecond` (the same windows and cross-process shares as requests); the rest
    /// are counted as dropped.
    func admitNotifications(_ count: Int, containerID: ContainerID, environment: ContainerEnvironment) async -> Int {
        let admitted = await admit(count, kind: .notifications, limit: \.notificationsPerSecond, containerID: containerID, environment: environment)
        if admitted < count {
            let key = MeterKey(containerID: containerID, environment: environment, bucket: nowSecond() / 10 * 10)
            state.withLock { $0.meters[key, default: Meter()].notificationsDropped += Int64(count - admitted) }
        }
        return admitted
    }

    /// How many of `count` pushes a container-environment may send now under its `pushesPerSecond`
    /// (the same windows and cross-process shares as requests); the rest wait in the queue.
    func admitPushes(_ count: Int, containerID: ContainerID, environment: ContainerEnvironment) async -> Int {
        await admit(count, kind: .pushes, limit: \.pushesPerSecond, containerID: containerID, environment: environment)
    }

    /// How many of `count` things that are not requests (notifications, pushes) the
    /// container-environment's per-second `limit` lets through in this second's window. When the
    /// limits are out of reach, all of them: the write that made them was made.
    private func admit(_ count: Int, kind: Key.Kind, limit path: KeyPath<QuotaLimits, Int64>, containerID: ContainerID,
                       environment: ContainerEnvironment) async -> Int {
        guard count > 0 else { return 0 }
        guard let limit = try? await limits(containerID: containerID, environment: environment)[keyPath: path] else { return count }
        let key = Key(kind: kind, containerID: containerID, environment: environment, name: "")
        let second = nowSecond()
        return Int(state.withLock { state -> Int64 in
            var window = state.windows[key] ?? Window()
            if window.second != second {
                window = Window(second: second, admitted: 0, allowance: max(1, limit / window.processes), limit: limit, debt: 0,
                                processes: window.processes)
            }
            window.limit = limit
            let admitted = max(0, min(Int64(count), window.allowance - window.admitted))
            window.admitted += admitted
            state.windows[key] = window
            return admitted
        })
    }

    /// Counts notifications queued for subscribers.
    func noteNotifications(_ count: Int64, containerID: ContainerID, environment: ContainerEnvironment) {
        guard count > 0 else { return }
        let key = MeterKey(containerID: containerID, environment: environment, bucket: nowSecond() / 10 * 10)
        state.withLock { $0.meters[key, default: Meter()].notifications += count }
    }

    /// Counts pushes the providers accepted.
    func notePushes(_ count: Int64, containerID: ContainerID, environment: ContainerEnvironment) {
        guard count > 0 else { return }
        let key = MeterKey(containerID: containerID, environment: environment, bucket: nowSecond() / 10 * 10)
        state.withLock { $0.meters[key, default: Meter()].pushes += count }
    }

    /// Counts operations refused with `QUOTA_EXCEEDED`.
    func noteRefused(_ count: Int64, containerID: ContainerID, environment: ContainerEnvironment) {
        guard count > 0 else { return }
        let key = MeterKey(containerID: containerID, environment: environment, bucket: nowSecond() / 10 * 10)
        state.withLock { $0.meters[key, default: Meter()].refused += count }
    }

    /// Syncs with the other processes until the task is cancelled, on a connection of its own
    /// (never one a request is waiting for).
    func run() async {
        var settings = configuration
        settings.maximumConnections = 1
        let database = Database(configuration: settings, logger: logger)
        let store = AdminStore(database: database, logger: logger)
        await withDiscardingTaskGroup { group in
            group.addTask { await database.run() }
            var ticks = 0
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.interval)
                ticks += 1
                do {
                    try await sync(store)
                    if ticks % 20 == 0 { try await flushMeters(store) }
                    if ticks % 1200 == 0 { try await store.metering.sweepRateCounts(now: nowSecond()) }
                } catch {
                    if Task.isCancelled { break }
                    logger.debug("rate limit sync failed", metadata: ["stratus.error": "\(String(reflecting: error))"])
                }
            }
            group.cancelAll()
        }
    }

    /// Reports this process's counts of the current window and takes its new allowances.
    func sync(_ store: AdminStore) async throws {
        let second = nowSecond()
        let (keys, counts): ([Key], [Int64]) = state.withLock { state in
            // Forget keys idle for a while; report the ones near their share of the limit.
            state.windows = state.windows.filter { second - $0.value.second < 10 }
            let active = state.windows.filter { $0.value.second == second && $0.value.isWorthReporting }
            return (Array(active.keys), active.map(\.value.admitted))
        }
        guard !keys.isEmpty else { return }
        let texts = keys.map(\.text)
        let others = try await store.metering.exchangeRateCounts(second: second, process: process, keys: texts, counts: counts)
        state.withLock { state in
            for (index, key) in keys.enumerated() {
                guard var window = state.windows[key], window.second == second else { continue }
                let limit = window.limit
                let (count, processes) = others[texts[index]] ?? (0, 0)
                window.processes = 1 + processes
                let reported = counts[index]
                window.allowance = max(window.admitted, reported + max(0, limit - count - reported) / window.processes)
                state.windows[key] = window
            }
        }
    }

    /// Adds this process's request counts to `request_counts`.
    func flushMeters(_ store: AdminStore) async throws {
        let meters = state.withLock { state in
            defer { state.meters.removeAll() }
            return state.meters
        }
        guard !meters.isEmpty else { return }
        let entries = Array(meters)
        do {
            try await store.metering.addRequestCounts(entries.map {
                RequestCounts(containerID: $0.key.containerID, environment: $0.key.environment, bucket: $0.key.bucket,
                              requests: $0.value.requests, throttled: $0.value.throttled, refused: $0.value.refused,
                              notifications: $0.value.notifications, notificationsDropped: $0.value.notificationsDropped, pushes: $0.value.pushes)
            })
        } catch {
            // Not lost: added back for the next flush (on Citus, those whose worker failed).
            let unsaved = (error as? RowsUnsaved).map { failure in failure.positions.map { entries[$0] } } ?? entries
            state.withLock { state in
                for (key, meter) in unsaved {
                    state.meters[key, default: Meter()].requests += meter.requests
                    state.meters[key, default: Meter()].throttled += meter.throttled
                    state.meters[key, default: Meter()].refused += meter.refused
                    state.meters[key, default: Meter()].notifications += meter.notifications
                    state.meters[key, default: Meter()].notificationsDropped += meter.notificationsDropped
                    state.meters[key, default: Meter()].pushes += meter.pushes
                }
            }
            throw error
        }
    }
}
