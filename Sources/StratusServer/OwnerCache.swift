import StratusCore
import Synchronization

/// What the notifier keeps per subscriber of a container-environment (their web courier tokens,
/// their push devices): read in one statement for the owners not known, kept a minute, and dropped
/// when any process says it changed (`Invalidations`). A read that began before such a drop is
/// used but not kept: it may predate the change the drop announced.
final class OwnerCache<Element: Sendable>: Sendable {
    private let entries = Mutex<[Notifier.CourierKey: (values: [Element], read: ContinuousClock.Instant)]>([:])
    private let generation = Atomic<Int>(0)

    /// The values of each of `owners` that has any: from memory, or `read` for those not known.
    func values(of owners: Set<UserID>, containerID: ContainerID, environment: ContainerEnvironment,
                read: ([UserID]) async throws -> [UserID: [Element]]) async throws -> [UserID: [Element]] {
        let now = ContinuousClock.now
        var known: [UserID: [Element]] = [:]
        var missing: [UserID] = []
        entries.withLock { cached in
            for owner in owners {
                if let entry = cached[Notifier.CourierKey(containerID: containerID, environment: environment, owner: owner)], now - entry.read < .seconds(60) {
                    if !entry.values.isEmpty { known[owner] = entry.values }
                } else {
                    missing.append(owner)
                }
            }
        }
        guard !missing.isEmpty else { return known }
        let started = generation.load(ordering: .sequentiallyConsistent)
        let fresh = try await read(missing)
        entries.withLock { cached in
            guard generation.load(ordering: .sequentiallyConsistent) == started else { return }
            if cached.count >= 100_000 { cached.removeAll() }
            for owner in missing {
                cached[Notifier.CourierKey(containerID: containerID, environment: environment, owner: owner)] = (fresh[owner] ?? [], now)
            }
        }
        return known.merging(fresh.filter { !$0.value.isEmpty }) { a, _ in a }
    }

    /// Forgets one owner's values.
    func forget(_ key: Notifier.CourierKey) {
        generation.add(1, ordering: .sequentiallyConsistent)
        _ = entries.withLock { $0.removeValue(forKey: key) }
    }

    /// Forgets everything.
    func forgetAll() {
        generation.add(1, ordering: .sequentiallyConsistent)
        entries.withLock { $0.removeAll() }
    }
}
