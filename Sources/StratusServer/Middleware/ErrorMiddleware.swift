import Hummingbird
import Logging
import StratusCore

/// The outermost layer (`StratusResponder`; `failure` also for the console's calls of management
/// functions): renders every failure as a CKWS error dictionary. Client mistakes
/// keep their code; anything unexpected is logged in full with an id and answered
/// `INTERNAL_ERROR` without internals (Hummingbird's own 500 would have an empty body).
struct ErrorMiddleware<Context: RequestContext> {
    /// Runs `next`, rendering what it throws; on the caller's executor (no executor switch on the
    /// way in and out of it and of `next`).
    func run(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let (failure, uuid) = Self.failure(error, request: request, logger: context.logger)
            return failure.response(uuid: uuid)
        }
    }

    /// What a failure is answered with, and the id it is logged and answered under: client
    /// mistakes as they are, anything unexpected logged in full and answered `INTERNAL_ERROR`.
    static func failure(_ error: any Error, request: Request, logger: Logger) -> (StratusError, uuid: String) {
        switch error {
        case let error as StratusError:
            let uuid = newUUID()
            if error.code == .internalError {
                logger.error("internal error", metadata: ["stratus.error_id": "\(uuid)", "stratus.error": "\(String(reflecting: error.underlying ?? error))"])
            } else if error.code == .tryAgainLater, let underlying = error.underlying {
                logger.warning("transient failure", metadata: ["stratus.error_id": "\(uuid)", "stratus.error": "\(String(reflecting: underlying))"])
            }
            return (error, uuid)
        case let error as any HTTPResponseError:
            return (translate(status: error.status, message: (error as? HTTPError)?.body, request: request), newUUID())
        default:
            return internalError(error, logger: logger)
        }
    }

    static func translate(status: HTTPResponse.Status, message: String?, request: Request) -> StratusError {
        switch status.code {
        case 404:
            return StratusError(.notFound, "no endpoint \(request.method) \(request.uri.path.prefix(200)); see the CloudKit Web Services paths in README.md")
        case 405:
            return StratusError(StratusError.Code("BAD_REQUEST", httpStatus: 405), "method \(request.method) is not allowed on \(request.uri.path.prefix(200))")
        case 413:
            return StratusError.bodyTooLarge(limit: 0)
        default:
            return StratusError(StratusError.Code("BAD_REQUEST", httpStatus: status.code < 500 ? status.code : 400),
                                message ?? "the request could not be processed")
        }
    }
}

/// The router's one middleware: Hummingbird's own failures (`HTTPError`: no such route, a wrong
/// method) become the service's errors, which the router would otherwise render itself before
/// `ErrorMiddleware`, around the whole service, could.
struct RouterErrors<Context: RequestContext>: RouterMiddleware {
    @concurrent func handle(_ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as any HTTPResponseError {
            throw ErrorMiddleware<Context>.translate(status: error.status, message: (error as? HTTPError)?.body, request: request)
        }
    }
}
