import Foundation
@testable import StratusServer
import StratusCore
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
}
