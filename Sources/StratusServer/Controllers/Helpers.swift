import Foundation
import Logging
import StratusCore

/// The time now, in milliseconds since 1970 (how records and tokens carry time).
func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

/// Runs `body`, turning a thrown `StratusError` into a typed throw and rethrowing anything else as
/// internal (logged with the id the answer quotes).
func wrap<T: Sendable>(_ logger: Logger, _ body: () async throws -> T) async throws(StratusError) -> T {
    do {
        return try await body()
    } catch let error as StratusError {
        throw error
    } catch {
        throw internalError(error, logger: logger).error
    }
}

/// An unexpected failure as the `INTERNAL_ERROR` a client is answered: logged in full under a new
/// id, which the answer quotes; nothing of its internals in the answer.
func internalError(_ error: any Error, logger: Logger) -> (error: StratusError, uuid: String) {
    let uuid = newUUID()
    logger.error("internal error", metadata: ["stratus.error_id": "\(uuid)", "stratus.error": "\(String(reflecting: error))"])
    return (StratusError(.internalError, "the server failed to handle the request; quote \(uuid) when reporting it", underlying: error), uuid)
}
