import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import NIOWebSocket
import StratusCore
import Synchronization

/// The HTTP/1.1 messages `StratusHTTPChannel` reads and writes, whatever its responder.
enum HTTPWire {
    static let decoderName = "stratus.http-decoder"
    static let handlerName = "stratus.http"

    /// A response as sent: status line, `headers` (less any framing of their own), length,
    /// date, server and connection headers, then `body` (none for HEAD).
    /// The header lines every response carries after `Date`: `Server`, and with
    /// `strictTransportSecurity` (seconds) `Strict-Transport-Security`, which tells browsers to
    /// reach this host over https only for that long.
    static func serverHeaders(name: String, strictTransportSecurity: Int? = nil) -> String {
        var lines = "Server: \(name)\r\n"
        if let strictTransportSecurity { lines += "Strict-Transport-Security: max-age=\(strictTransportSecurity)\r\n" }
        return lines
    }

    static func wire(status code: Int, headers: HTTPFields, body: ByteBuffer?, length: Int, http10: Bool, close: Bool,
                     serverHeaders: String) -> ByteBuffer {
        var out = ByteBuffer()
        out.reserveCapacity(256 + (body?.readableBytes ?? 0))
        func header(_ name: String, _ value: String) {
            out.writeString(name)
            out.writeStaticString(": ")
            out.writeString(value)
            out.writeStaticString("\r\n")
        }
        let status = HTTPResponseStatus(statusCode: code)
        out.writeString(http10 ? "HTTP/1.0 " : "HTTP/1.1 ")
        out.writeString("\(status.code) \(status.reasonPhrase)\r\n")
        if code == 101 {
            // Switching to WebSocket: the handshake's own headers, no framing.
            for field in headers { header(field.name.rawName, field.value) }
            out.writeStaticString("\r\n")
            return out
        }
        for field in headers where field.name != .transferEncoding && field.name != .connection && field.name != .contentLength {
            header(field.name.rawName, field.value)
        }
        header("Content-Length", String(length))
        header("Date", HTTPDate.now)
        out.writeString(serverHeaders)
        if close {
            header("Connection", "close")
        } else if http10 {
            header("Connection", "keep-alive")
        }
        out.writeStaticString("\r\n")
        if let body { out.writeImmutableBuffer(body) }
        return out
    }

    /// The swift-http-types request Hummingbird's responders take. `nil` for a method token
    /// swift-http-types refuses.
    static func request(_ head: HTTPRequestHead, body: RequestBody) -> Request? {
        guard let method = HTTPRequest.Method(head.method.rawValue) else { return nil }
        var fields = HTTPFields()
        fields.reserveCapacity(head.headers.count)
        var authority: String?
        for (name, value) in head.headers {
            if authority == nil, name.utf8.count == 4, name.lowercased() == "host" {
                authority = value
            } else if let fieldName = HTTPField.Name(name) {
                fields.append(HTTPField(name: fieldName, value: value))
            }
        }
        let request = HTTPRequest(method: method, scheme: nil, authority: authority, path: head.uri, headerFields: fields)
        return Request(head: request, body: body)
    }
}
