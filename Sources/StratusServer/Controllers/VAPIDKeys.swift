import Crypto
import Foundation
import StratusCore

/// Each container's VAPID key pair (RFC 8292), with which Web Push requests are signed and which
/// a web app passes to `pushManager.subscribe` as `applicationServerKey`. Derived from the server
/// secret and the container's id (HKDF-SHA-256), so every server process sharing the database has
/// the same key without storing it; a container moved to a server with another secret has another
/// key, and its browsers subscribe again.
struct VAPIDKeys: Sendable {
    nonisolated(unsafe) let secret: SymmetricKey

    init(secret: [UInt8]) {
        self.secret = SymmetricKey(data: secret)
    }

    /// The container's private key: the first HKDF output (counter 0, 1, …) that is a valid P-256
    /// scalar (all but about one in four billion are).
    func privateKey(containerID: ContainerID) -> P256.Signing.PrivateKey {
        for counter in 0..<UInt8.max {
            let info = Array("stratus vapid v1".utf8) + withUnsafeBytes(of: containerID.rawValue.bigEndian, Array.init) + [counter]
            let bytes = HKDF<SHA256>.deriveKey(inputKeyMaterial: secret, info: info, outputByteCount: 32)
                .withUnsafeBytes { Array($0) }
            if let key = try? P256.Signing.PrivateKey(rawRepresentation: bytes) { return key }
        }
        preconditionFailure("no P-256 scalar among 255 HKDF outputs")
    }

    /// The container's public key as browsers take it: the uncompressed point (65 bytes), base64url.
    func publicKey(containerID: ContainerID) -> String {
        TokenSealer.base64url(Array(privateKey(containerID: containerID).publicKey.x963Representation))
    }
}
