import Crypto
import Foundation
import Hummingbird
import StratusCore
import StratusStore

/// Server-to-server keys: `stratus key add|list|revoke`.
struct KeyManagement: Sendable {
    let api: ManagementAPI
    let admin: AdminStore
    let authenticator: Authenticator

    func addRoutes(to router: Router<BasicRequestContext>) {
        api.manage(router, .addKey) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let body = try call.object()
            let environment = try ManagementGate.environment(in: body, default: nil)
            guard let pem = try Wire.string(body["publicKey"], key: "publicKey") else {
                throw StratusError.badRequest("missing required key 'publicKey': the PEM text of a P-256 public key")
            }
            let publicKey = try Self.parsePublicKey(pem)
            let name = try Wire.string(body["name"], key: "name") ?? "server key"
            guard !name.isEmpty, name.utf8.count <= 200, name.unicodeScalars.allSatisfy(Names.isPrintable) else {
                throw StratusError.badRequest("the key name must be 1–200 printable characters")
            }
            let key = try await self.admin.addServerKey(container: container, environment: environment, name: name,
                                                        publicKey: publicKey.x963Representation, by: grant.actor)
            return .json(["keyID": .string(key.keyID), "key": ManagementJSON.keyJSON(key)], status: .created)
        }
        api.manage(router, .keys) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let keys = try await self.admin.serverKeys(containerID: container.id)
            return .json(["keys": .array(keys.map(ManagementJSON.keyJSON))])
        }
        api.manage(router, .revokeKey) { call -> ManagementReply in
            let grant = call.grant
            let container = try grant.container
            let keyID = call.pathParameter("key")
            guard (8...64).contains(keyID.utf8.count), keyID.utf8.allSatisfy(\.isHexDigit) else {
                throw StratusError.badRequest("give the key ID (64 hexadecimal digits, from 'stratus key list'), or at least its first 8 digits")
            }
            let key = try await self.admin.revokeServerKey(containerID: container.id, idOrPrefix: keyID, by: grant.actor)
            self.authenticator.invalidate(.serverKey(containerID: container.id, keyID: key.keyID))
            return .json(["key": ManagementJSON.keyJSON(key)])
        }
    }

    /// A P-256 public key from PEM (`-----BEGIN PUBLIC KEY-----`, as `openssl ec -pubout` writes).
    static func parsePublicKey(_ pem: String) throws(StratusError) -> P256.Signing.PublicKey {
        let text = pem.trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.utf8.count <= 4096 else { throw .badRequest("'publicKey' is too long for a P-256 public key") }
        if text.contains("PRIVATE KEY") {
            throw .badRequest("that is a private key: give the public key only (openssl ec -in eckey.pem -pubout); keep the private key on your server")
        }
        do {
            return try P256.Signing.PublicKey(pemRepresentation: text)
        } catch {
            throw .badRequest("'publicKey' is not a PEM P-256 (prime256v1) public key; make one with: openssl ecparam -name prime256v1 -genkey -noout -out eckey.pem && openssl ec -in eckey.pem -pubout")
        }
    }
}
