/// The limits of one container-environment. Each is set by the operator or takes its
/// documented default.
public struct QuotaLimits: Sendable, Equatable {
    public var maxRecords: Int64
    public var maxStorageBytes: Int64
    public var requestsPerSecond: Int64
    public var userRequestsPerSecond: Int64
    public var userPrivateStorageBytes: Int64
    /// Notifications queued per second for the container-environment's subscribers; past it, a
    /// write's notifications are dropped (and counted), the write itself is not refused.
    public var notificationsPerSecond: Int64
    /// Pushes sent per second to the environment's devices (APNs and Web Push); past it, pushes
    /// wait their turn in the queue.
    public var pushesPerSecond: Int64
    /// Sign-up attempts one client address may make in an hour, each counted whether it creates
    /// an account or is answered `EXISTS`; past it, `THROTTLED`.
    public var signupsPerAddressPerHour: Int64
    /// Sign-up attempts the whole environment takes in an hour (only those within their
    /// address's limit count, so one address cannot use up everyone's).
    public var signupsPerHour: Int64
    /// Rows of the request log kept (the newest); 0 keeps none.
    public var logRequests: Int64

    public init(maxRecords: Int64, maxStorageBytes: Int64, requestsPerSecond: Int64, userRequestsPerSecond: Int64,
                userPrivateStorageBytes: Int64, notificationsPerSecond: Int64, pushesPerSecond: Int64, signupsPerAddressPerHour: Int64,
                signupsPerHour: Int64, logRequests: Int64) {
        self.maxRecords = maxRecords
        self.maxStorageBytes = maxStorageBytes
        self.requestsPerSecond = requestsPerSecond
        self.userRequestsPerSecond = userRequestsPerSecond
        self.userPrivateStorageBytes = userPrivateStorageBytes
        self.notificationsPerSecond = notificationsPerSecond
        self.pushesPerSecond = pushesPerSecond
        self.signupsPerAddressPerHour = signupsPerAddressPerHour
        self.signupsPerHour = signupsPerHour
        self.logRequests = logRequests
    }

    /// Generous: a new app never meets them by surprise. The sign-up limits are the exception
    /// that matters: 20 an hour is more than a household behind one address needs, and far
    /// fewer than a script farming accounts wants.
    public static let defaults = QuotaLimits(maxRecords: 10_000_000, maxStorageBytes: 10 << 30, requestsPerSecond: 50_000,
                                             userRequestsPerSecond: 10_000, userPrivateStorageBytes: 1 << 30, notificationsPerSecond: 10_000,
                                             pushesPerSecond: 5_000, signupsPerAddressPerHour: 20, signupsPerHour: 10_000,
                                             logRequests: 100_000)

    /// The wire names of the limits, in order, with their key paths (immutable; key paths are not Sendable).
    nonisolated(unsafe) public static let keys: [(name: String, path: WritableKeyPath<QuotaLimits, Int64>)] = [
        ("maxRecords", \.maxRecords), ("maxStorageBytes", \.maxStorageBytes), ("requestsPerSecond", \.requestsPerSecond),
        ("userRequestsPerSecond", \.userRequestsPerSecond), ("userPrivateStorageBytes", \.userPrivateStorageBytes),
        ("notificationsPerSecond", \.notificationsPerSecond), ("pushesPerSecond", \.pushesPerSecond), ("signupsPerAddressPerHour", \.signupsPerAddressPerHour),
        ("signupsPerHour", \.signupsPerHour), ("logRequests", \.logRequests),
    ]

    /// The limits 0 is a valid value of: it turns the thing off.
    public static let zeroAllowed: Set<String> = ["logRequests"]

    /// The largest value a limit may take.
    public static let maximum: Int64 = 1 << 50

    /// Changes to limits from a JSON object: each key a whole number from 1 to `maximum`, or null
    /// for the default. Unknown keys are refused (a misspelt limit must not pass silently).
    public static func changes(_ body: [String: JSON], ignoring ignored: Set<String> = []) throws(StratusError) -> [String: Int64?] {
        var changes: [String: Int64?] = [:]
        for (key, value) in body where !ignored.contains(key) {
            guard keys.contains(where: { $0.name == key }) else {
                throw .badRequest("unknown limit '\(Names.printable(key))'; the limits are \(keys.map(\.name).joined(separator: ", "))")
            }
            if value == .null {
                changes[key] = .some(nil)
                continue
            }
            let least: Int64 = zeroAllowed.contains(key) ? 0 : 1
            guard case .int(let number) = value, number >= least, number <= maximum else {
                throw .badRequest("'\(key)' must be a whole number from \(least) to \(maximum), or null for the default")
            }
            changes[key] = .some(number)
        }
        guard !changes.isEmpty else {
            throw .badRequest("nothing to change: give one or more of \(keys.map(\.name).joined(separator: ", "))")
        }
        return changes
    }
}
