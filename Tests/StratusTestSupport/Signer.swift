import Crypto
import Foundation
import HTTPTypes
@testable import StratusServer

/// A client's server-to-server key: signs requests as CKWS §2.2 says.
struct Signer: Sendable {
    /// The private key's raw bytes (swift-crypto's key types are not `Sendable`).
    let rawKey: Data
    var keyID: String

    init(keyID: String = "", privateKey: P256.Signing.PrivateKey = .init()) {
        self.rawKey = privateKey.rawRepresentation
        self.keyID = keyID
    }

    var privateKey: P256.Signing.PrivateKey { try! P256.Signing.PrivateKey(rawRepresentation: rawKey) }

    var publicKeyPEM: String { privateKey.publicKey.pemRepresentation }

    static func dateText(_ date: Date) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.string(from: date)
    }

    /// The three headers for `body` sent to `signedPath` (what the client signs; the request
    /// target, or another path to forge a mismatch).
    func headers(signedPath: String, body: String, date: Date = Date(), dateText: String? = nil) -> HTTPFields {
        let dateText = dateText ?? Self.dateText(date)
        let bodyHash = Data(SHA256.hash(data: Data(body.utf8))).base64EncodedString()
        let signature = try! privateKey.signature(for: Data("\(dateText):\(bodyHash):\(signedPath)".utf8))
        return [RequestSignature.keyIDHeader: keyID, RequestSignature.dateHeader: dateText,
                RequestSignature.signatureHeader: signature.derRepresentation.base64EncodedString()]
    }
}
