import StratusCore
@testable import StratusServer
import StratusStore

/// Sync tokens and continuation markers: any text is opened or refused (never a crash), and a
/// forged one never opens; any payload sealed opens back to itself, for its own purpose only;
/// whatever an opened sync token carries, the feed's cursor reader takes or refuses; unpadded
/// base64url decodes and encodes back to the same bytes.
enum TokenTarget {
    static let sealer = TokenSealer(secret: Array(repeating: 7, count: 32))
    static let database = DatabaseRef(containerID: 1, environment: .development, scope: .private, owner: "_0123456789abcdef0123456789abcdef")

    static func run(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        for purpose in [SyncTokens.syncPurpose, RecordsController.markerPurpose] {
            if let opened = sealer.open(text, purpose: purpose) {
                // Only a token this sealer made opens (the corpus holds some); its payload is read as the server reads it.
                read(opened)
            }
        }
        if let decoded = TokenSealer.decode(text) {
            guard TokenSealer.decode(TokenSealer.base64url(decoded)) == decoded else { FuzzFailure.fail("base64url does not round-trip") }
        }
        guard let payload = try? JSONParser.parse(bytes) else { return }
        let token = sealer.seal(payload, purpose: SyncTokens.syncPurpose)
        if token.utf8.count <= 4096 {
            guard sealer.open(token, purpose: SyncTokens.syncPurpose) == payload else { FuzzFailure.fail("a sealed payload does not open to itself") }
            guard sealer.open(token, purpose: RecordsController.markerPurpose) == nil else { FuzzFailure.fail("a sync token opens as a continuation marker") }
        }
        read(payload)
    }

    /// What the server does with an opened sync token's or continuation marker's payload.
    static func read(_ payload: JSON) {
        for zoneScoped in [true, false] {
            _ = try? SyncTokens.cursor(payload, db: database, zoneScoped: zoneScoped, shift: 0)
            _ = try? SyncTokens.cursor(payload, db: database, zoneScoped: zoneScoped, shift: 1 << 40)
        }
        for value in payload["v"]?.arrayValue ?? [] { _ = RecordsController.decodeIndexValue(value) }
    }
}
