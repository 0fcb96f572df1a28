import StratusCore

/// Settings of the HTTP service.
public struct ServerConfiguration: Sendable {
    /// The admin token the management API requires (`Authorization: Bearer …`); `nil` disables it.
    public var adminToken: String?
    /// Largest request body accepted, in bytes; larger ones get 413 before they are read.
    public var maximumBodyBytes: Int
    /// bcrypt cost for passwords (12 in production; tests may lower it).
    public var bcryptCost: UInt8
    /// Lifetime of a web auth token, in seconds.
    public var sessionLifetime: Int64
    /// Base URL clients reach this server at, for `redirectURL` (e.g. `http://127.0.0.1:8080`).
    public var publicURL: String
    /// How often the planner statistics of the service's tables are checked (`StatisticsKeeper`);
    /// `nil` leaves them to autovacuum alone.
    public var statisticsInterval: Duration? = .seconds(1)

    /// The default body limit: 8 MiB (200 operations of ~40 KB each).
    public static let defaultMaximumBodyBytes = 8 * 1024 * 1024

    public init(adminToken: String?, maximumBodyBytes: Int = ServerConfiguration.defaultMaximumBodyBytes, bcryptCost: UInt8 = 12,
                sessionLifetime: Int64 = 14 * 24 * 3600, publicURL: String = "http://127.0.0.1:8080") {
        self.adminToken = adminToken
        self.maximumBodyBytes = maximumBodyBytes
        self.bcryptCost = bcryptCost
        self.sessionLifetime = sessionLifetime
        self.publicURL = publicURL
    }
}
