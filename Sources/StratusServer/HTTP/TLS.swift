import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOSSL
import StratusCore
import Synchronization

/// The server's certificate chain and private key, read from two PEM files, as a TLS context that
/// new connections take. `reload()` reads the files again and swaps the context whole: a
/// connection keeps the context it started with, so renewing a certificate (`SIGHUP` to
/// `stratus serve`) drops no connection, and a pair of files that does not load leaves the one
/// in use in place.
///
/// TLS 1.2 and 1.3 only; for 1.2, ECDHE key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305),
/// Mozilla's "intermediate" list. TLS 1.3's suites are all AEAD.
public final class TLSCertificate: Sendable {
    public let certificatePath: String
    public let keyPath: String
    private let context: Mutex<NIOSSLContext>
    private let described: Mutex<String>

    /// The TLS 1.2 cipher suites offered (OpenSSL names).
    static let cipherSuites = [
        "ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-CHACHA20-POLY1305",
    ].joined(separator: ":")

    public init(certificatePath: String, keyPath: String) throws {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
        let (context, description) = try Self.load(certificatePath: certificatePath, keyPath: keyPath)
        self.context = Mutex(context)
        self.described = Mutex(description)
    }

    /// The context a new connection uses.
    var current: NIOSSLContext { context.withLock { $0 } }

    /// The leaf certificate's subject and expiry, for the server's log.
    public var summary: String { described.withLock { $0 } }

    /// Reads the two files again and, when they load, serves the new pair to new connections.
    public func reload() throws {
        let (context, description) = try Self.load(certificatePath: certificatePath, keyPath: keyPath)
        self.context.withLock { $0 = context }
        described.withLock { $0 = description }
    }

    static func load(certificatePath: String, keyPath: String) throws -> (NIOSSLContext, String) {
        let chain: [NIOSSLCertificate]
        do {
            chain = try NIOSSLCertificate.fromPEMFile(certificatePath)
        } catch {
            throw TLSSetupError("cannot read the TLS certificate \(certificatePath) (\(error)): it must be a PEM file, the server's certificate first, then its intermediates")
        }
        guard let leaf = chain.first else {
            throw TLSSetupError("the TLS certificate file \(certificatePath) holds no certificate")
        }
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        } catch {
            throw TLSSetupError("cannot read the TLS private key \(keyPath) (\(error)): it must be an unencrypted PEM key")
        }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.maximumTLSVersion = .tlsv13
        configuration.cipherSuites = cipherSuites
        configuration.applicationProtocols = ["http/1.1"]
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            // BoringSSL refuses a key that is not the certificate's.
            throw TLSSetupError("cannot use the TLS certificate \(certificatePath) with the key \(keyPath) (\(error)): is the key the certificate's?")
        }
        let expires = Date(timeIntervalSince1970: TimeInterval(leaf.notValidAfter))
        return (context, "\(leaf.description), valid until \(expires.formatted(.iso8601))")
    }
}

/// A certificate or key that cannot be used, said so that the operator can fix it.
public struct TLSSetupError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// First on a TLS port's connections: a client that speaks plain HTTP there (its first byte is a
/// letter, not a TLS handshake record's 0x16) is answered `400` in plain HTTP, saying to use
/// https, and the connection closes; a TLS client passes through, and this handler leaves.
final class PlainHTTPOnTLSPortHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let serverHeaders: String
    private var refused = false

    init(serverHeaders: String) { self.serverHeaders = serverHeaders }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        let buffer = unwrapInboundIn(data)
        guard let first = buffer.getInteger(at: buffer.readerIndex, as: UInt8.self) else {
            context.fireChannelRead(data)
            return
        }
        if first == 0x16 {  // a TLS handshake record
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        refused = true
        let id = RandomUUID.string()
        let json = StratusError.badRequest("this port speaks HTTPS: send the request to https:// instead of http://").dictionary(uuid: id)
        let body = ByteBuffer(bytes: JSONWriter.bytes(json))
        let out = HTTPWire.wire(status: 400, headers: [.contentType: "application/json; charset=utf-8", RequestID.header: id], body: body,
                                length: body.readableBytes, http10: false, close: true, serverHeaders: serverHeaders)
        context.writeAndFlush(wrapOutboundOut(out)).whenComplete { _ in context.close(promise: nil) }
    }
}

/// The plain-HTTP port beside a TLS one (`stratus serve --redirect-http-port`): every request is
/// answered `308 Permanent Redirect` to the same path and query over https (308 keeps the method
/// and body, so an API call is sent again as it was), at the public URL when it is https, else
/// at the request's host on the TLS port.
public struct HTTPSRedirectResponder: HTTPResponder {
    public typealias Context = BasicRequestContext
    let publicURL: String?
    let httpsPort: Int

    public init(publicURL: String, httpsPort: Int) {
        let base = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
        self.publicURL = base.lowercased().hasPrefix("https://") ? base : nil
        self.httpsPort = httpsPort
    }

    func location(path: String?, authority: String?) -> String {
        let target = (path?.hasPrefix("/") == true ? path! : "/")
        if let publicURL { return publicURL + target }
        var host = authority ?? "localhost"
        // The host without its port (an IPv6 literal keeps its brackets).
        if let colon = host.lastIndex(of: ":"), !host[colon...].contains("]") { host = String(host[..<colon]) }
        return "https://\(host)\(httpsPort == 443 ? "" : ":\(httpsPort)")\(target)"
    }

    public func respond(to request: Request, context: BasicRequestContext) async throws -> Response {
        let authority = request.head.authority
        let target = location(path: request.head.path, authority: authority)
        let body = ByteBuffer(string: "This server speaks HTTPS: \(target)\n")
        return Response(status: .permanentRedirect,
                        headers: [.location: target, .contentType: "text/plain; charset=utf-8", .contentLength: String(body.readableBytes)],
                        body: .init(byteBuffer: body))
    }
}
