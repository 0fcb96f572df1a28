import Foundation

/// Full-text tokens of STRING values, for SEARCHABLE fields and `CONTAINS_ALL_TOKENS` /
/// `CONTAINS_ANY_TOKENS`.
///
/// CloudKit documents its token search as case- and diacritic-insensitive, splitting on
/// whitespace and punctuation. Here a token is a maximal run of letters, digits and combining
/// marks; it is compared after canonical decomposition with the combining marks removed and
/// lowercased, so `Crème`, `CREME` and `creme` are one token, and `don't` is `don` and `t`.
public enum TextTokens {
    /// The key under which a field's tokens are stored beside its values in the index entries. A
    /// field name starts with a letter, so no field can have this name.
    public static func key(of field: String) -> String { "~tokens:" + field }

    /// Tokens longer than this are cut to it (the stored key stays small; a query token is cut
    /// the same way, so matching is unchanged for all but pathological inputs).
    public static let maximumLength = 64
    /// At most this many distinct tokens of one value are indexed.
    public static let maximumPerValue = 1000

    /// The distinct tokens of `text`, in order of first appearance.
    public static func tokens(of text: String, limit: Int = maximumPerValue) -> [String] {
        var tokens: [String] = []
        var seen: Set<String> = []
        var current = String.UnicodeScalarView()
        var length = 0
        func finish() {
            if !current.isEmpty {
                let token = String(current)
                if seen.insert(token).inserted { tokens.append(token) }
            }
            current = String.UnicodeScalarView()
            length = 0
        }
        for scalar in text.lowercased().decomposedStringWithCanonicalMapping.unicodeScalars {
            guard tokens.count < limit else { break }
            let properties = scalar.properties
            switch properties.generalCategory {
            case .nonspacingMark, .spacingMark, .enclosingMark:
                continue  // diacritics: part of the token, not kept
            default:
                break
            }
            if properties.isAlphabetic || properties.numericType != nil {
                if length < maximumLength { current.append(scalar) }
                length += 1
            } else {
                finish()
            }
        }
        if tokens.count < limit { finish() }
        return tokens
    }
}
