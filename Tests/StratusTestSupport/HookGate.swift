import Testing

/// Holds the service's work at a test hook (`RecordStore.testHooks`) until the test opens it.
///
/// Never longer than `limit`, and not past the held task's cancellation: a test that fails, or
/// runs out of time, between closing the gate and opening it must not leave a request held
/// forever (at a commit hook, inside its transaction, with a pooled connection), nor its harness
/// waiting for that connection: the whole run then stops at CI's limit without naming the test.
actor HookGate {
    /// Whom the gate holds: every caller, or only the first (later ones pass at once).
    enum Holding: Sendable {
        case everyone
        case first
    }

    let holding: Holding
    let limit: Duration
    private(set) var isOpen = false
    /// How many callers came to the gate (held or not).
    private(set) var arrived = 0

    init(holding: Holding = .everyone, limit: Duration = .seconds(120)) {
        self.holding = holding
        self.limit = limit
    }

    /// Holds the caller until the gate opens (or `limit` passes, or the caller is cancelled).
    func pass() async {
        arrived += 1
        if holding == .first, arrived > 1 { return }
        let until = ContinuousClock.now + limit
        while !isOpen, ContinuousClock.now < until {
            do { try await Task.sleep(for: .milliseconds(5)) } catch { return }
        }
    }

    func open() { isOpen = true }

    /// Waits until `count` callers came, failing the test if they did not within `within`.
    func waitUntilArrived(_ count: Int = 1, within: Duration = .seconds(30)) async throws {
        let until = ContinuousClock.now + within
        while arrived < count, ContinuousClock.now < until { try await Task.sleep(for: .milliseconds(5)) }
        try #require(arrived >= count, "\(arrived) of \(count) requests came to the hook within \(within)")
    }

    /// Runs `body` with a closed gate and opens it when `body` ends, however it ends.
    static func closed<T>(holding: Holding = .everyone, _ body: (HookGate) async throws -> T) async throws -> T {
        let gate = HookGate(holding: holding)
        do {
            let value = try await body(gate)
            await gate.open()
            return value
        } catch {
            await gate.open()
            throw error
        }
    }
}
