/// A piece of HTML. Its templates are Swift string literals in which every interpolated value is
/// escaped (for text and for quoted attribute values alike) unless it is itself `HTML`: what a
/// record, a user, a zone, a schema or the audit log holds can only ever be text on a page.
struct HTML: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    private(set) var text: String

    init(stringLiteral value: String) {
        text = value
    }

    init(stringInterpolation: Interpolation) {
        text = stringInterpolation.text
    }

    var description: String { text }

    struct Interpolation: StringInterpolationProtocol {
        var text = ""

        init(literalCapacity: Int, interpolationCount: Int) {
            text.reserveCapacity(literalCapacity + interpolationCount * 16)
        }

        mutating func appendLiteral(_ literal: String) {
            text += literal
        }

        /// Text: escaped.
        mutating func appendInterpolation(_ value: String) {
            text += HTML.escape(value)
        }

        mutating func appendInterpolation<T: BinaryInteger>(_ value: T) {
            text += String(value)
        }

        /// HTML made elsewhere by these rules: as is.
        mutating func appendInterpolation(_ html: HTML) {
            text += html.text
        }

        mutating func appendInterpolation(_ parts: [HTML]) {
            for part in parts { text += part.text }
        }

        mutating func appendInterpolation(_ html: HTML?) {
            if let html { text += html.text }
        }
    }

    /// `&`, `<`, `>`, `"` and `'` as character references: safe in text and in quoted attributes.
    static func escape(_ value: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(value.utf8.count)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            case "\0": escaped += "\u{FFFD}"
            default: escaped.unicodeScalars.append(scalar)
            }
        }
        return escaped
    }

    /// Text from the data as a person should read it: isolated from the text around it (`<bdi>`),
    /// its bidirectional controls shown as their code points (`[U+202E]`), so "\u{202E}gnp.exe"
    /// reads as what it is, not as "exe.png". Only for showing: a form's value keeps every character.
    static func isolated(_ value: String) -> HTML {
        var html = HTML(stringLiteral: "<bdi>")
        var run = ""
        for scalar in value.unicodeScalars {
            if isBidiControl(scalar) {
                html.text += escape(run) + "<span class=\"ctl\">[U+" + String(scalar.value, radix: 16, uppercase: true).leftPadded(to: 4) + "]</span>"
                run = ""
            } else {
                run.unicodeScalars.append(scalar)
            }
        }
        html.text += escape(run) + "</bdi>"
        return html
    }

    /// The characters that change the direction of the text after them: embeddings, overrides,
    /// isolates and the marks.
    static func isBidiControl(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// Joins pieces.
    static func join(_ parts: [HTML], separator: HTML = "") -> HTML {
        var result = HTML(stringLiteral: "")
        for (index, part) in parts.enumerated() {
            if index > 0 { result.text += separator.text }
            result.text += part.text
        }
        return result
    }
}

/// Console URLs: every segment percent-encoded, so a name from the data can only ever be one
/// path segment (never `javascript:`, never another path).
enum ConsolePath {
    static let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".unicodeScalars)

    static func segment(_ value: String) -> String {
        var encoded = ""
        for byte in value.utf8 {
            let scalar = Unicode.Scalar(byte)
            if byte < 0x80, allowed.contains(scalar) {
                encoded.unicodeScalars.append(scalar)
            } else {
                encoded += "%" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return encoded
    }

    /// `/console/` and the segments.
    static func make(_ segments: String...) -> String {
        "/console/" + segments.map(segment).joined(separator: "/")
    }

    /// A query string from pairs (values percent-encoded).
    static func query(_ pairs: [(String, String)]) -> String {
        pairs.isEmpty ? "" : "?" + pairs.map { "\(segment($0.0))=\(segment($0.1))" }.joined(separator: "&")
    }
}

extension String {
    func leftPadded(to width: Int, with pad: Character = "0") -> String {
        count >= width ? self : String(repeating: pad, count: width - count) + self
    }
}
