import Crypto
import Foundation
import StratusCore

/// Seals the operators' APNs keys for storage (AES-GCM with a key derived from the server
/// secret), so a copy of the database alone does not hand them out.
struct PushKeySealer: Sendable {
    nonisolated(unsafe) let key: SymmetricKey

    init(secret: [UInt8]) {
        key = HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: secret), info: Array("stratus push-key seal v1".utf8), outputByteCount: 32)
    }

    func seal(_ pem: String) throws -> [UInt8] {
        Array(try AES.GCM.seal(Array(pem.utf8), using: key).combined!)
    }

    func open(_ sealed: [UInt8]) throws -> String {
        String(decoding: try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: key), as: UTF8.self)
    }
}

/// ES256 JSON Web Tokens, as APNs (provider tokens) and Web Push (VAPID, RFC 8292) take them.
enum ES256JWT {
    static func make(header: JSON, claims: JSON, key: P256.Signing.PrivateKey) throws -> String {
        let input = TokenSealer.base64url(JSONWriter.bytes(header)) + "." + TokenSealer.base64url(JSONWriter.bytes(claims))
        let signature = try key.signature(for: Array(input.utf8))
        return input + "." + TokenSealer.base64url(Array(signature.rawRepresentation))
    }
}

/// RFC 8291 message encryption for Web Push: ECDH with the browser's key, HKDF with its
/// authentication secret, one aes128gcm record (RFC 8188).
enum WebPushEncryption {
    /// The body to POST: the aes128gcm header (salt, record size, the server's ephemeral public
    /// key) and the one encrypted record. `nil` when the browser's keys are not valid.
    static func encrypt(_ plaintext: [UInt8], p256dh: String, auth: String,
                        ephemeral: P256.KeyAgreement.PrivateKey = P256.KeyAgreement.PrivateKey(),
                        salt: [UInt8] = (0..<16).map { _ in UInt8.random(in: 0...255) }) -> [UInt8]? {
        guard let uaPublicBytes = TokenSealer.decode(p256dh), let authSecret = TokenSealer.decode(auth), authSecret.count == 16,
              let uaPublic = try? P256.KeyAgreement.PublicKey(x963Representation: uaPublicBytes),
              let shared = try? ephemeral.sharedSecretFromKeyAgreement(with: uaPublic) else { return nil }
        let asPublic = Array(ephemeral.publicKey.x963Representation)
        let ecdh = shared.withUnsafeBytes { Array($0) }
        // IKM = HKDF(salt = auth_secret, ikm = ecdh_secret, info = "WebPush: info" 0x00 ua_public as_public, 32)
        let keyInfo = Array("WebPush: info".utf8) + [0] + uaPublicBytes + asPublic
        let prkKey = HKDF<SHA256>.extract(inputKeyMaterial: SymmetricKey(data: ecdh), salt: authSecret)
        let ikm = HKDF<SHA256>.expand(pseudoRandomKey: prkKey, info: keyInfo, outputByteCount: 32)
        let prk = HKDF<SHA256>.extract(inputKeyMaterial: ikm, salt: salt)
        let cek = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: aes128gcm".utf8) + [0], outputByteCount: 16)
        let nonce = HKDF<SHA256>.expand(pseudoRandomKey: prk, info: Array("Content-Encoding: nonce".utf8) + [0], outputByteCount: 12)
        // One record, the last: the content and its delimiter 0x02.
        guard let box = try? AES.GCM.seal(plaintext + [2], using: cek, nonce: AES.GCM.Nonce(data: nonce.withUnsafeBytes { Array($0) })) else { return nil }
        let recordSize = UInt32(4096)
        var body = salt
        body += withUnsafeBytes(of: recordSize.bigEndian, Array.init)
        body.append(UInt8(asPublic.count))
        body += asPublic
        body += Array(box.ciphertext) + Array(box.tag)
        return body
    }

    /// The most content one record of 4,096 bytes carries, within the 4,096-byte body push
    /// services accept: less the header (86 bytes), the tag (16) and the delimiter (1).
    static let maximumContent = 4096 - 86 - 16 - 1
}
