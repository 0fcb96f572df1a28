import Foundation
import StratusCore
import Testing

@Suite struct RandomUUIDTests {
    @Test func isAVersionFourUUIDInTheRequestedCase() throws {
        for uppercase in [false, true] {
            let text = RandomUUID.string(uppercase: uppercase)
            let parsed = try #require(UUID(uuidString: text), "\(text) is not a UUID")
            #expect(parsed.uuidString == text.uppercased())
            #expect(text == (uppercase ? text.uppercased() : text.lowercased()))
            let bytes = withUnsafeBytes(of: parsed.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version nibble of \(text)")
            #expect(bytes[8] >> 6 == 0b10, "variant bits of \(text)")
        }
    }

    @Test func doesNotRepeatAndUsesEveryHexDigit() {
        var seen = Set<String>()
        var digits = Set<Character>()
        for _ in 0..<10_000 {
            let text = RandomUUID.string()
            seen.insert(text)
            digits.formUnion(text.filter { $0 != "-" })
        }
        #expect(seen.count == 10_000)
        #expect(digits == Set("0123456789abcdef"))
    }
}
