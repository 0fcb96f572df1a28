import Foundation
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

@Suite struct TokenSealerTests {
    @Test func base64urlRoundTripsAndRejectsOtherAlphabets() {
        for length in 0..<40 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255) }
            let text = TokenSealer.base64url(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(TokenSealer.decode(text) == bytes)
            #expect(text == Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: ""))
        }
        #expect(TokenSealer.decode("a+b/") == nil)
        #expect(TokenSealer.decode("abcde") == nil)
    }

    @Test func sealedPayloadsAreBoundToTheirPurpose() {
        let sealer = TokenSealer(secret: Array(repeating: 7, count: 32))
        let token = sealer.seal(["x": 1], purpose: "a")
        #expect(sealer.open(token, purpose: "a") == ["x": 1])
        #expect(sealer.open(token, purpose: "b") == nil)
        #expect(TokenSealer(secret: Array(repeating: 8, count: 32)).open(token, purpose: "a") == nil)
        var forged = Array(token.utf8)
        forged[2] = forged[2] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(sealer.open(String(decoding: forged, as: UTF8.self), purpose: "a") == nil)
    }

    /// A sync token's positions move by an import's shift (`ContainerArchive`); one the shift
    /// would carry past 64 bits is refused as invalid, not a crash (found by the token fuzzer's
    /// harness: `Tests/StratusFuzz/Corpus/token/shift-overflow.json`).
    @Test func shiftedPositionsThatLeave64BitsAreInvalidTokens() throws {
        let db = DatabaseRef(containerID: 1, environment: .development, scope: .private, owner: "_0123456789abcdef0123456789abcdef")
        var payload: [String: JSON] = ["c": 1, "e": "development", "d": "private", "o": "_0123456789abcdef0123456789abcdef", "x": .int(Int64.min + 1), "s": 3, "z": 4]
        #expect(throws: StratusError.self) { _ = try SyncTokens.cursor(.object(payload), db: db, zoneScoped: true, shift: 1 << 40) }
        payload["x"] = 12
        payload["p"] = [.int(Int64.min)]
        #expect(throws: StratusError.self) { _ = try SyncTokens.cursor(.object(payload), db: db, zoneScoped: true, shift: 1) }
        payload["p"] = [10]
        let (cursor, zone) = try SyncTokens.cursor(.object(payload), db: db, zoneScoped: true, shift: 2)
        #expect(cursor.position.xid == 10 && cursor.pending == [8] && zone == 4)
    }
}
