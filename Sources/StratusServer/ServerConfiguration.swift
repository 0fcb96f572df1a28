import Foundation
import StratusCore
import StratusStore

/// Settings of the HTTP service.
public struct ServerConfiguration: Sendable {
    /// The admin token the management API requires (`Authorization: Bearer …`); `nil` disables it.
    public var adminToken: String?
    /// Largest request body accepted, in bytes; larger ones get 413 before they are read.
    public var maximumBodyBytes: Int
    /// bcrypt cost for passwords (12 in production; tests may lower it).
    public var bcryptCost: UInt8
    /// How long a session (a web auth token) lasts at most, however often it is used.
    public var sessionLifetime: Duration
    /// How long a session may go unused before it ends.
    public var sessionIdleTimeout: Duration
    /// Base URL clients reach this server at, for `redirectURL` (e.g. `http://127.0.0.1:8080`).
    public var publicURL: String
    /// How often the planner statistics of the service's tables are checked (`StatisticsKeeper`);
    /// `nil` leaves them to autovacuum alone.
    public var statisticsInterval: Duration? = ServerConfiguration.defaultStatisticsInterval
    /// The default check of the planner statistics: every second.
    public static let defaultStatisticsInterval: Duration = .seconds(1)

    /// The default session lifetime: 30 days.
    public static let defaultSessionLifetime: Duration = .seconds(30 * 86_400)
    /// The default idle limit: 7 days without a request.
    public static let defaultSessionIdleTimeout: Duration = .seconds(7 * 86_400)

    /// Most connections one client address may hold open at once; more are answered `THROTTLED`
    /// and closed.
    public var maximumConnectionsPerAddress = ServerConfiguration.defaultMaximumConnectionsPerAddress
    public static let defaultMaximumConnectionsPerAddress = 1024

    /// The certificate the server's port speaks TLS with, or nil: plain HTTP (behind a proxy
    /// that terminates TLS, or on loopback).
    public var tls: TLSCertificate?
    /// Seconds of `Strict-Transport-Security` on every response, or nil for none. `stratus serve`
    /// sets it when the public URL is https (a year by default).
    public var strictTransportSecurity: Int?
    public static let defaultStrictTransportSecurity = 31_536_000
    /// A token that reads `GET /metrics` and nothing else (a Prometheus scrape job's), or nil:
    /// the admin token or a superuser's credential only.
    public var metricsToken: String?
    /// Load balancers whose `X-Forwarded-For` names the client (none by default).
    public var trustedProxies: TrustedProxies = .none

    /// Where asset bytes are kept (`stratus serve`: files under the data folder by default).
    public var assetStorage: AssetStorage = .postgres(stagingDirectory: NSTemporaryDirectory() + "stratus-asset-staging")
    /// Largest asset one upload may carry (CloudKit documents 50 MB for web uploads).
    public var maximumAssetBytes: Int64 = ServerConfiguration.defaultMaximumAssetBytes
    public static let defaultMaximumAssetBytes: Int64 = 50 * 1024 * 1024
    /// How long an upload URL from `assets/upload` takes bytes (CloudKit: 15 minutes).
    public var uploadURLLifetime: Duration = .seconds(15 * 60)
    /// How long the receipt of an upload (or of `assets/rereference`) can be saved into a record;
    /// an asset no record holds is deleted once this long unused.
    public var assetReceiptLifetime: Duration = .seconds(60 * 60)
    /// How long an asset's `downloadURL` serves it.
    public var downloadURLLifetime: Duration = .seconds(60 * 60)
    /// How often unreferenced assets are looked for and deleted.
    public var assetSweepInterval: Duration = .seconds(60)

    /// PostgreSQL streaming replicas that serve queries and custom zones' change feeds once they
    /// have replayed every acknowledged write (`ReplicaReads`).
    public var replicaURLs: [String] = []
    /// Where pushes go (`--apns-host`) and which extra authorities their hosts may present (`--push-ca-file`).
    public var push = PushSettings()

    /// The default body limit: 8 MiB (200 operations of ~40 KB each).
    public static let defaultMaximumBodyBytes = 8 * 1024 * 1024

    public init(adminToken: String?, maximumBodyBytes: Int = ServerConfiguration.defaultMaximumBodyBytes, bcryptCost: UInt8 = 12,
                sessionLifetime: Duration = ServerConfiguration.defaultSessionLifetime,
                sessionIdleTimeout: Duration = ServerConfiguration.defaultSessionIdleTimeout, publicURL: String = "http://127.0.0.1:8080") {
        self.sessionIdleTimeout = sessionIdleTimeout
        self.adminToken = adminToken
        self.maximumBodyBytes = maximumBodyBytes
        self.bcryptCost = bcryptCost
        self.sessionLifetime = sessionLifetime
        self.publicURL = publicURL
    }
}
