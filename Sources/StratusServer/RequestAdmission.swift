import StratusCore
import StratusStore

extension RateLimiter {
    /// Charges a request to the container's, and the user's (or, without a user, the API token's
    /// and client address's) rate limits: `THROTTLED` past them. A request costs its operations
    /// (or the records it looks up), so batching does not get around a limit.
    func admit(_ caller: Caller, body: [String: JSON]) async throws {
        let limits = try await limits(containerID: caller.container.id, environment: caller.environment)
        let (containerID, environment) = (caller.container.id, caller.environment)
        let cost = Int64(max(1, body["operations"]?.arrayValue?.count ?? body["records"]?.arrayValue?.count ?? 1))
        let personal: RateLimiter.Key
        if let user = caller.user {
            personal = RateLimiter.Key(kind: .user, containerID: containerID, environment: environment, name: user.rawValue)
        } else {
            personal = RateLimiter.Key(kind: .client, containerID: containerID, environment: environment,
                                       name: FNV1a.hex(caller.apiToken ?? "") + "@" + (ClientAddress.current ?? ""))
        }
        try admit((RateLimiter.Key(kind: .container, containerID: containerID, environment: environment, name: ""), limits.requestsPerSecond),
                              (personal, limits.userRequestsPerSecond),
                              cost: cost, containerID: containerID, environment: environment)
    }
}
