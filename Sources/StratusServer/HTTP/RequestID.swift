import HTTPTypes
import Logging
import StratusCore

/// The id of the request the current task answers. `StratusHTTPChannel` takes the client's
/// `X-Request-ID` when it is well formed (`accepted`), or makes a new UUID, and sets it for the
/// request's whole task: the response carries it back in `X-Request-ID`, an error dictionary's
/// `uuid` is it (`newUUID()`), and every log line written while the request is answered has it
/// as `stratus.request_id` (`metadataProvider`, installed by `stratus serve`'s logging).
public enum RequestID {
    /// The request the current task answers: its id, and what it ended with beyond its status
    /// (the error dictionary's code, set by `StratusError.response`, for `/metrics`).
    final class State: @unchecked Sendable {
        let id: String
        var errorCode: String?
        /// The error dictionary's reason, for the request log.
        var reason: String?
        /// For the request log: the container and environment the request was authenticated
        /// against (nil: not logged), the database it named, its user and client address.
        var container: (id: ContainerID, environment: ContainerEnvironment)?
        var database: DatabaseScope?
        var user: UserID?
        /// The client's address (`ClientAddress.current`).
        var client: String?
        /// The connection the request came on (`RequestConnection.current`); nil in router tests.
        let connection: RequestConnection?
        init(id: String, connection: RequestConnection? = nil) {
            self.id = id
            self.connection = connection
        }
    }
    /// The one task-local value a request sets: its address and connection are read from it too,
    /// since each `withValue` is an async call of its own (two executor checks, a task-local
    /// entry) on every request.
    @TaskLocal static var state: State?

    public static var current: String? { state?.id }

    /// The response and request header.
    static let header = HTTPField.Name("X-Request-ID")!

    /// A client's id, when it is 1–128 characters of letters, digits and `-_.:@/+=`: enough for
    /// UUIDs, trace ids and the usual correlation tokens, and safe to write into a header and a
    /// log line. Anything else is ignored and the request gets an id of its own.
    static func accepted(_ value: String?) -> String? {
        guard let value, !value.isEmpty, value.utf8.count <= 128 else { return nil }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "@"), UInt8(ascii: "/"),
                 UInt8(ascii: "+"), UInt8(ascii: "="):
                continue
            default:
                return nil
            }
        }
        return value
    }

    /// Adds `stratus.request_id` to every log line written within a request.
    public static let metadataProvider = Logger.MetadataProvider {
        guard let id = RequestID.current else { return [:] }
        return ["stratus.request_id": .string(id)]
    }
}
