import Hummingbird
import NIOCore
import StratusCore

/// Request bodies read whole, up to the service's limit, and parsed as JSON.
struct RequestBodies: Sendable {
    let maximumBodyBytes: Int

    /// Reads a request body whole. Bodies over the limit get 413 before they are read (by
    /// `Content-Length`) or as soon as the limit is passed (chunked).
    func readBody(_ request: Request) async throws -> ByteBuffer {
        let limit = maximumBodyBytes
        if let length = request.headers.first(.contentLength).flatMap({ Int($0) }), length > limit {
            throw StratusError.bodyTooLarge(limit: limit)
        }
        // Read piece by piece rather than with `collect(upTo:)`: its layers of async calls cost
        // twice the executor checks, and the HTTP channel hands over each body as one piece.
        var pieces = request.body.makeAsyncIterator()
        guard var body = try await pieces.next() else { return ByteBuffer() }
        guard body.readableBytes <= limit else { throw StratusError.bodyTooLarge(limit: limit) }
        while var piece = try await pieces.next() {
            guard piece.readableBytes <= limit - body.readableBytes else { throw StratusError.bodyTooLarge(limit: limit) }
            body.writeBuffer(&piece)
        }
        return body
    }

    /// Parses a JSON body, whatever its content type.
    func parseJSON(_ buffer: ByteBuffer) throws(StratusError) -> JSON {
        do {
            let result: Result<JSON, JSONParser.Failure> = buffer.withUnsafeReadableBytes { bytes in
                Result { () throws(JSONParser.Failure) -> JSON in try JSONParser.parse(bytes) }
            }
            return try result.get()
        } catch {
            throw StratusError.badRequest(error.description)
        }
    }

    /// Parses a JSON body that must be an object.
    func parseObject(_ buffer: ByteBuffer) throws(StratusError) -> [String: JSON] {
        let body = try parseJSON(buffer)
        guard let members = body.objectValue else { throw StratusError.badRequest("the body must be a JSON object, not \(body.kindName)") }
        return members
    }

    /// Reads a JSON body that must be an object.
    func readObject(_ request: Request) async throws -> [String: JSON] {
        try parseObject(try await readBody(request))
    }
}
