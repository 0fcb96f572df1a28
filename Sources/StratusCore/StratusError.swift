/// The one error type of Stratus. Its ``Code`` is a CloudKit Web Services `serverErrorCode`;
/// its ``reason`` is safe to show to the client; ``underlying`` is only ever logged.
public struct StratusError: Error, Sendable, CustomStringConvertible {
    /// A CKWS `serverErrorCode` with the HTTP status it is answered with.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        /// The exact CKWS spelling, e.g. `BAD_REQUEST`.
        public let name: String
        /// The HTTP status of a whole-request failure with this code.
        public let httpStatus: Int

        public init(_ name: String, httpStatus: Int) {
            self.name = name
            self.httpStatus = httpStatus
        }

        public var description: String { name }

        /// The caller lacks permission for the database, zone or record (403).
        public static let accessDenied = Code("ACCESS_DENIED", httpStatus: 403)
        /// Another operation of an atomic batch failed, so this one was not applied (400).
        public static let atomicError = Code("ATOMIC_ERROR", httpStatus: 400)
        /// The API token, web auth token, admin token or signature was rejected (401).
        public static let authenticationFailed = Code("AUTHENTICATION_FAILED", httpStatus: 401)
        /// The call needs a signed-in user and none was given; carries `redirectURL` (421).
        public static let authenticationRequired = Code("AUTHENTICATION_REQUIRED", httpStatus: 421)
        /// The request is malformed or invalid; the reason names what (400).
        public static let badRequest = Code("BAD_REQUEST", httpStatus: 400)
        /// The `recordChangeTag` is stale; the error carries the server's record (409).
        public static let conflict = Code("CONFLICT", httpStatus: 409)
        /// The record, zone, container or user being created already exists (409).
        public static let exists = Code("EXISTS", httpStatus: 409)
        /// A server-side failure; logged with the request id, never explained to the client (500).
        public static let internalError = Code("INTERNAL_ERROR", httpStatus: 500)
        /// The record, container or resource does not exist (404).
        public static let notFound = Code("NOT_FOUND", httpStatus: 404)
        /// A quota would be exceeded, or the request body is larger than the limit (413).
        public static let quotaExceeded = Code("QUOTA_EXCEEDED", httpStatus: 413)
        /// Too many requests; retry after `retryAfter` seconds (429).
        public static let throttled = Code("THROTTLED", httpStatus: 429)
        /// A transient problem (database unreachable, serialization retries exhausted) (503).
        public static let tryAgainLater = Code("TRY_AGAIN_LATER", httpStatus: 503)
        /// A `VALIDATE` reference points at a missing record, or blocks a delete (412).
        public static let validatingReferenceError = Code("VALIDATING_REFERENCE_ERROR", httpStatus: 412)
        /// The zone named in the request does not exist (404).
        public static let zoneNotFound = Code("ZONE_NOT_FOUND", httpStatus: 404)
    }

    public var code: Code
    /// A sentence the caller can act on. Never contains internals.
    public var reason: String
    /// Seconds to wait before retrying, when the error is retryable.
    public var retryAfter: Int?
    /// Where to sign in, with ``Code/authenticationRequired``.
    public var redirectURL: String?
    /// The server's record, with ``Code/conflict`` and ``Code/exists`` (the server renders it).
    public var serverRecord: Record?
    /// The cause, for the log only.
    public var underlying: (any Error)?

    public init(_ code: Code, _ reason: String, retryAfter: Int? = nil, redirectURL: String? = nil,
                serverRecord: Record? = nil, underlying: (any Error)? = nil) {
        self.code = code
        self.reason = reason
        self.retryAfter = retryAfter
        self.redirectURL = redirectURL
        self.serverRecord = serverRecord
        self.underlying = underlying
    }

    public var description: String { "\(code.name): \(reason)" }

    public static func badRequest(_ reason: String) -> StratusError { StratusError(.badRequest, reason) }
}
