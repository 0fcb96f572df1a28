import ServiceLifecycle
import StratusStore

/// The service's work beside the HTTP server, run in the same `ServiceGroup` by `stratus serve`
/// (and by the tests' harness, as `serve` runs it): it keeps the planner statistics current
/// (`StatisticsKeeper`) and listens for changes other server processes make to what this one
/// caches (`Invalidations`), shares rate-limit counts with them (`RateLimiter`) and writes the
/// request log (`RequestLog`). It stops when the group shuts down.
public struct BackgroundWork: Service {
    let keeper: StatisticsKeeper?
    let invalidations: Invalidations
    let rateLimiter: RateLimiter
    let records: RecordStore
    let assets: AssetStore
    /// How often assets are swept, and how long an asset must go unused first (the receipts' lifetime).
    /// (Not the whole configuration: ServiceLifecycle logs the service's description, and that holds the admin token.)
    let assetSweepInterval: Duration
    let assetReceiptLifetime: Duration
    let replicaReads: ReplicaReads?
    let requestLog: RequestLog
    let pushes: PushDispatcher
    /// Where each piece registers while it runs (`StratusApp.running`).
    let running: RunningParts

    public func run() async throws {
        try await cancelWhenGracefulShutdown { [running] in
            await withDiscardingTaskGroup { group in
                func add(_ name: String, _ work: @escaping @Sendable () async -> Void) {
                    group.addTask { await running.run(name, work) }
                }
                if let keeper { add("planner statistics") { await keeper.run() } }
                add("cache invalidations") { await invalidations.run() }
                add("rate-limit counts") { await rateLimiter.run() }
                add("request log") { await requestLog.run() }
                add("notification sweep") { await sweepNotifications() }
                add("push delivery") { await pushes.run() }
                add("asset sweep") { await sweepAssets() }
                if let replicaReads { add("replica positions") { await replicaReads.run() } }
            }
        }
    }
}

extension BackgroundWork {
    /// Every minute, drops undelivered notifications past their lifetime and unpolled courier tokens.
    func sweepNotifications() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: .seconds(60))
            guard !Task.isCancelled else { return }
            try? await records.subscriptions.sweepNotifications(lifetime: CourierController.notificationLifetime, tokenLifetime: CourierController.courierTokenLifetime)
        }
    }
}

extension BackgroundWork {
    /// Every `assetSweepInterval`, deletes the assets no record holds and no receipt can still
    /// attach (with their bytes), and uploads a dead process left half-staged.
    func sweepAssets() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: assetSweepInterval)
            guard !Task.isCancelled else { return }
            while let swept = try? await assets.sweep(unusedFor: assetReceiptLifetime), swept == 500, !Task.isCancelled {}
            assets.cleanStaging(olderThan: 24 * 3600)
        }
    }
}

extension StratusApp {
    /// The background work to run beside this app's HTTP server.
    public var background: BackgroundWork {
        BackgroundWork(keeper: configuration.statisticsInterval.map { StatisticsKeeper(database: database, logger: logger, interval: $0) },
                       invalidations: invalidations, rateLimiter: rateLimiter, records: records, assets: assets,
                       assetSweepInterval: configuration.assetSweepInterval, assetReceiptLifetime: configuration.assetReceiptLifetime,
                       replicaReads: replicaReads, requestLog: requestLog, pushes: pushes, running: running)
    }
}
