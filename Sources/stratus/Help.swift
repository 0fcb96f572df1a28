import ArgumentParser

/// A command's help text as ArgumentParser should wrap it: each paragraph of prose one line (it
/// wraps them to the terminal once, rather than re-wrapping lines already broken at 100
/// columns), and indented lines (examples, lists) kept as written, an example longer than
/// `width` continued on the next line after a `\`, as a shell reads it.
enum Help {
    /// The widest an indented line may be before it is continued (the help screen's 80 columns).
    static let width = 78

    static func text(_ text: String) -> String {
        text.components(separatedBy: "\n\n").map { paragraph -> String in
            var out: [String] = []
            var prose: [String] = []
            func flush() {
                if !prose.isEmpty { out.append(prose.joined(separator: " ")) }
                prose = []
            }
            for line in paragraph.split(separator: "\n", omittingEmptySubsequences: false).map(String.init) {
                if line.hasPrefix("  ") {
                    // What leads into indented lines ("Examples:") ends there.
                    flush()
                    out += continued(line)
                } else {
                    prose.append(line.trimmingCharacters(in: .whitespaces))
                }
            }
            flush()
            return out.joined(separator: "\n")
        }.joined(separator: "\n\n")
    }

    /// An indented line, broken before `width` at spaces, each piece but the last ending in ` \`
    /// and the ones after it indented two more spaces.
    static func continued(_ line: String) -> [String] {
        guard line.count > width else { return [line] }
        let indent = String(line.prefix { $0 == " " }) + "    "
        var pieces: [String] = []
        var rest = Substring(line)
        var first = true
        while (first ? rest.count : indent.count + rest.count) > width {
            let room = width - 2 - (first ? 0 : indent.count)
            guard let space = breaks(in: rest).last(where: { rest.distance(from: rest.startIndex, to: $0) <= room }),
                  rest[rest.startIndex..<space].contains(where: { $0 != " " }) else { break }
            pieces.append((first ? "" : indent) + rest[..<space] + " \\")
            rest = rest[rest.index(after: space)...]
            first = false
        }
        pieces.append((first ? "" : indent) + rest)
        return pieces
    }

    /// The spaces of `text` a line may break at: not inside quotes (a shell would keep the
    /// continuation's indent in the quoted words).
    static func breaks(in text: Substring) -> [Substring.Index] {
        var quote: Character?
        var found: [Substring.Index] = []
        for index in text.indices {
            let character = text[index]
            if let open = quote {
                if character == open { quote = nil }
            } else if character == "\"" || character == "'" {
                quote = character
            } else if character == " ", index > text.startIndex {
                found.append(index)
            }
        }
        return found
    }
}
