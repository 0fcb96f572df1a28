/// FNV-1a, 64 bits, of a text's UTF-8, in hex: a short name that stays the same for the same
/// text (the embedded cluster's folder, the pgbench baselines' digests). Not a secure digest.
public enum FNV1a {
    public static func hex(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }
}
