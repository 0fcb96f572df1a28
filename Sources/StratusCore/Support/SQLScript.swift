/// Splits a SQL script into statements at top-level semicolons, respecting single-quoted
/// strings, double-quoted identifiers, dollar-quoted bodies (`$$ … $$`, `$tag$ … $tag$`),
/// `--` line comments and nested `/* */` block comments. PostgresNIO sends each query as a
/// prepared statement, which holds one statement only.
public enum SQLScript {
    /// The statements of `script`, trimmed, without empty or comment-only ones.
    public static func split(_ script: String) -> [String] {
        let chars = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var hasCode = false
        var i = 0
        func flush() {
            let text = String(current).trimmingWhitespace()
            if hasCode, !text.isEmpty { statements.append(text) }
            current = String.UnicodeScalarView()
            hasCode = false
        }
        while i < chars.count {
            let c = chars[i]
            let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
            if c == "-" && next == "-" {
                while i < chars.count && chars[i] != "\n" { current.append(chars[i]); i += 1 }
                continue
            }
            if c == "/" && next == "*" {
                var depth = 0
                repeat {
                    if chars[i] == "/" && i + 1 < chars.count && chars[i + 1] == "*" {
                        depth += 1; current.append(chars[i]); current.append(chars[i + 1]); i += 2; continue
                    }
                    if chars[i] == "*" && i + 1 < chars.count && chars[i + 1] == "/" {
                        depth -= 1; current.append(chars[i]); current.append(chars[i + 1]); i += 2; continue
                    }
                    current.append(chars[i]); i += 1
                } while depth > 0 && i < chars.count
                continue
            }
            if c == "'" || c == "\"" {
                hasCode = true
                current.append(c); i += 1
                while i < chars.count {
                    current.append(chars[i])
                    if chars[i] == c {
                        if i + 1 < chars.count && chars[i + 1] == c { current.append(chars[i + 1]); i += 2; continue }
                        i += 1
                        break
                    }
                    i += 1
                }
                continue
            }
            if c == "$", let tagEnd = dollarTagEnd(chars, from: i) {
                hasCode = true
                let tag = Array(chars[i...tagEnd])
                for scalar in tag { current.append(scalar) }
                i = tagEnd + 1
                while i < chars.count {
                    if chars[i] == "$", i + tag.count <= chars.count, Array(chars[i..<(i + tag.count)]) == tag {
                        for scalar in tag { current.append(scalar) }
                        i += tag.count
                        break
                    }
                    current.append(chars[i]); i += 1
                }
                continue
            }
            if c == ";" {
                flush()
                i += 1
                continue
            }
            if !c.properties.isWhitespace { hasCode = true }
            current.append(c)
            i += 1
        }
        flush()
        return statements
    }

    /// The index of the closing `$` of a dollar-quote tag starting at `start`, if one starts there.
    static func dollarTagEnd(_ chars: [Unicode.Scalar], from start: Int) -> Int? {
        var j = start + 1
        if j < chars.count, chars[j] == "$" { return j }
        guard j < chars.count, chars[j].properties.isAlphabetic || chars[j] == "_" else { return nil }
        while j < chars.count {
            if chars[j] == "$" { return j }
            guard chars[j].properties.isAlphabetic || chars[j] == "_" || ("0"..."9").contains(chars[j]) else { return nil }
            j += 1
        }
        return nil
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var scalars = Substring(self).unicodeScalars
        while let first = scalars.first, first.properties.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.properties.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}
