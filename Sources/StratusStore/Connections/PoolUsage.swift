import Synchronization

/// How a `Database`'s connections are used, for `/metrics`: leases taken, how many are held
/// now, how many callers wait for one, and the time spent waiting. A few atomic additions per
/// lease; read whole only when the metrics are scraped.
public final class PoolUsage: Sendable {
    private let requested = Atomic<Int>(0)
    private let finished = Atomic<Int>(0)
    private let held = Atomic<Int>(0)
    private let leases = Atomic<Int>(0)
    private let waitNanoseconds = Atomic<Int>(0)

    init() {}

    /// Runs `lease`, which asks the pool for a connection, counted: its body calls `acquired` on
    /// the connection it gets (with the instant handed to `lease`) and `released` when done.
    func count<T>(_ lease: (ContinuousClock.Instant) async throws -> T) async throws -> T {
        requested.add(1, ordering: .relaxed)
        defer { finished.add(1, ordering: .relaxed) }
        return try await lease(ContinuousClock.now)
    }

    func acquired(since started: ContinuousClock.Instant) {
        let waited = ContinuousClock.now - started
        leases.add(1, ordering: .relaxed)
        held.add(1, ordering: .relaxed)
        waitNanoseconds.add(Int(waited.components.seconds) * 1_000_000_000 + Int(waited.components.attoseconds / 1_000_000_000), ordering: .relaxed)
    }

    func released() { held.subtract(1, ordering: .relaxed) }

    public struct Snapshot: Sendable {
        public var inUse: Int
        public var waiting: Int
        public var leases: Int
        public var waitSeconds: Double
    }

    public var snapshot: Snapshot {
        let inUse = held.load(ordering: .relaxed)
        let waiting = requested.load(ordering: .relaxed) - finished.load(ordering: .relaxed) - inUse
        return Snapshot(inUse: inUse, waiting: max(0, waiting), leases: leases.load(ordering: .relaxed),
                        waitSeconds: Double(waitNanoseconds.load(ordering: .relaxed)) / 1e9)
    }
}
