import Dispatch
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// The long-lived parts of a running service (the HTTP server, each piece of background work, the
/// database pools), each registered by name while it runs: what a shutdown that overruns its
/// deadline names as still running (`ShutdownWatchdog`).
public final class RunningParts: Sendable {
    private let parts = Mutex<[String: Int]>([:])

    public init() {}

    /// Runs `body` registered as `name`.
    public func run<T: Sendable>(_ name: String, _ body: () async throws -> T) async rethrows -> T {
        parts.withLock { $0[name, default: 0] += 1 }
        defer {
            parts.withLock { parts in
                parts[name, default: 1] -= 1
                if parts[name] == 0 { parts[name] = nil }
            }
        }
        return try await body()
    }

    /// The parts running now, by name.
    public var names: [String] { parts.withLock { $0.keys.sorted() } }
}

/// A service that runs `base` registered in `parts` as `name`.
public struct NamedService: Service, CustomStringConvertible {
    let name: String
    let base: any Service
    let parts: RunningParts

    public init(_ name: String, _ base: any Service, in parts: RunningParts) {
        self.name = name
        self.base = base
        self.parts = parts
    }

    /// What ServiceLifecycle logs: the name alone (the wrapped service's description may hold configuration).
    public var description: String { name }

    public func run() async throws {
        try await parts.run(name) { try await base.run() }
    }
}

/// Bounds `stratus serve`'s shutdown. Last in the service group, so the first told of a graceful
/// shutdown (SIGTERM or SIGINT): it logs what is in flight, and then
/// - past `deadline` (the requests' `--shutdown-timeout`, after which ServiceLifecycle cancels
///   what is left, plus `margin` for the cancelled work to unwind), or
/// - at a second SIGTERM or SIGINT,
/// it logs what is still running (the parts in `parts`, the requests being answered by route
/// family) and ends the process with status 1, after `abandon` (which stops the embedded
/// PostgreSQL). Work that ignores cancellation, such as a statement PostgreSQL is still running
/// with `--statement-timeout 0`, cannot then hold the process, and a supervisor gets an exit with
/// the reason in the log instead of having to send SIGKILL. What was acknowledged is committed
/// already; a transaction still open is rolled back by PostgreSQL when its connection closes.
///
/// `disarm()` once the service group and the pools have ended: the process is then on its way out.
public final class ShutdownWatchdog: Service, Sendable {
    let deadline: Duration
    let margin: Duration
    let parts: RunningParts
    let abandon: @Sendable () -> Void
    let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var disarmed = false
        var metrics: Metrics?
        var signals = SignalSources()
    }

    /// The second signal's sources, kept until `disarm()` (Dispatch's sources are thread-safe).
    private struct SignalSources: @unchecked Sendable {
        var sources: [any DispatchSourceSignal] = []
    }

    public init(deadline: Duration, margin: Duration = .seconds(5), parts: RunningParts, logger: Logger,
                abandon: @escaping @Sendable () -> Void) {
        self.deadline = deadline
        self.margin = margin
        self.parts = parts
        self.logger = logger
        self.abandon = abandon
    }

    /// Where the requests in flight are counted (the app is made after the watchdog, which must
    /// outlive it).
    public func count(requestsIn metrics: Metrics) {
        state.withLock { $0.metrics = metrics }
    }

    private func inFlight() -> [(family: String, count: Int)] {
        state.withLock { $0.metrics }?.inFlight ?? []
    }

    public func run() async throws {
        do {
            try await gracefulShutdown()
        } catch {
            return  // cancelled: the group ends without a graceful shutdown
        }
        let requests = inFlight()
        logger.notice("shutting down: no new connections; requests in flight have \(Self.text(deadline)) to finish",
                      metadata: ["stratus.requests_in_flight": "\(Self.describe(requests))"])
        let signals = SignalSources(sources: [SIGTERM, SIGINT].map { number in
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { [self] in
                giveUp(because: "a second \(number == SIGTERM ? "SIGTERM" : "SIGINT") came during the shutdown")
            }
            source.resume()
            return source
        })
        state.withLock { $0.signals = signals }
        DispatchQueue.global().asyncAfter(deadline: .now() + (deadline + margin).inSeconds) { [self] in
            giveUp(because: "the shutdown ran \(Self.text(margin)) past --shutdown-timeout (\(Self.text(deadline)))")
        }
    }

    /// The process is on its way out on its own: nothing more to watch.
    public func disarm() {
        let signals = state.withLock { state in
            state.disarmed = true
            defer { state.signals = SignalSources() }
            return state.signals
        }
        for source in signals.sources { source.cancel() }
    }

    private func giveUp(because reason: String) {
        let disarmed = state.withLock { state in
            defer { state.disarmed = true }
            return state.disarmed
        }
        guard !disarmed else { return }
        let running = parts.names
        logger.error("\(reason): exiting without waiting for what is still running; PostgreSQL rolls back the transactions they had open",
                     metadata: ["stratus.still_running": "\(running.isEmpty ? "nothing registered" : running.joined(separator: ", "))",
                                "stratus.requests_in_flight": "\(Self.describe(inFlight()))"])
        abandon()
        fflush(nil)
        _exit(1)
    }

    static func describe(_ requests: [(family: String, count: Int)]) -> String {
        requests.isEmpty ? "none" : requests.map { "\($0.family) \($0.count)" }.joined(separator: ", ")
    }

    static func text(_ duration: Duration) -> String {
        let seconds = duration.inSeconds
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }
}

extension Duration {
    /// The duration in seconds, with its fraction.
    var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
