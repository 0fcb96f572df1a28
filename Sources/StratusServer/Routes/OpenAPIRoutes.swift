import Hummingbird
import NIOCore
import StratusCore

/// `GET /openapi.json`: the OpenAPI 3.1 description of every route (`Resources/openapi.json`,
/// compiled in). Open without credentials: it describes the service, and holds nothing of a
/// tenant's.
extension StratusApp {
    /// The document as served: parsed once (a broken document fails the first request and the
    /// tests, not a build of a client) and written compactly.
    static let openAPIDocument: ByteBuffer? = {
        guard let text = EmbeddedResources.files.first(where: { $0.name == "openapi.json" })?.text,
              let document = try? JSONParser.parse(Array(text.utf8)) else { return nil }
        return ByteBuffer(string: JSONWriter.string(document))
    }()

    func addOpenAPIRoute(to router: Router<BasicRequestContext>) {
        router.get("/openapi.json") { _, _ -> Response in
            guard let document = Self.openAPIDocument else {
                throw StratusError(.internalError, "the OpenAPI document compiled into this build is not valid JSON")
            }
            return Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "public, max-age=300"],
                            body: ResponseBody(byteBuffer: document))
        }
    }
}
