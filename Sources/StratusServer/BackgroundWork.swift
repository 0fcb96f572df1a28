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

    public func run() async throws {
        try await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                if let keeper { group.addTask { await keeper.run() } }
                group.addTask { await invalidations.run() }
                group.addTask { await rateLimiter.run() }
                group.addTask { await requestLog.run() }
                group.addTask { await sweepNotifications() }
                group.addTask { await sweepAssets() }
                if let replicaReads { group.addTask { await replicaReads.run() } }
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
            try? await records.sweepNotifications(lifetime: StratusApp.notificationLifetime, tokenLifetime: StratusApp.courierTokenLifetime)
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
                       replicaReads: replicaReads, requestLog: requestLog)
    }
}
