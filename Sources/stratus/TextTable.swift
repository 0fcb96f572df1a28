/// Tab-separated lines as a person reads them on a terminal.
enum TextTable {
    /// Each run of consecutive lines holding tabs becomes columns padded to their widest cell (two
    /// spaces apart); other lines stay as they are. Widths count characters, not bytes.
    static func aligned(_ text: String) -> String {
        var out: [String] = []
        var block: [[String]] = []
        func flush() {
            guard !block.isEmpty else { return }
            let columns = block.map(\.count).max() ?? 0
            let widths = (0..<columns).map { column in block.map { column < $0.count ? $0[column].count : 0 }.max() ?? 0 }
            for row in block {
                let cells = row.enumerated().map { column, cell in
                    column == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[column] - cell.count)
                }
                out.append(cells.joined(separator: "  "))
            }
            block = []
        }
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.contains("\t") {
                block.append(line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init))
            } else {
                flush()
                out.append(String(line))
            }
        }
        flush()
        return out.joined(separator: "\n")
    }
}
