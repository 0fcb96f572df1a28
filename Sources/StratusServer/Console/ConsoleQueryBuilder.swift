import Foundation
import StratusCore

/// The records page's query builder (filters by field type and index, sort, page size), the
/// records table (columns chosen, sortable headers) and the wording of query errors.
extension ConsoleRecordPages {
    /// The query builder: three filters, a sort, a page size. Only the fields a filter may use
    /// (indexed ones), only the comparators valid for the field (`Query.comparators(for:)`, the
    /// API's own rules), a value input of the field's type; sorting only by SORTABLE fields.
    static func queryForm(_ call: ConsoleCall, place: RecordPlace, type: String, fields: [String: FieldSchema], container: String) -> HTML {
        let filterable = fields.keys.sorted().compactMap { name -> (String, FieldSchema, [FilterComparator])? in
            let comparators = Query.comparators(for: fields[name]!)
            return comparators.isEmpty ? nil : (name, fields[name]!, comparators)
        }
        let sortable = fields.keys.sorted().filter { Query.isSortable(fields[$0]!) }
        let rows = (1...3).map { index -> HTML in
            let chosen = call.query("f\(index)").flatMap { name in filterable.first { $0.0 == name } }
            let options = filterable.map { name, definition, comparators -> HTML in
                let input = valueInput(definition.type)
                return """
                    <option value="\(name)" data-comparators="\(comparators.map(\.rawValue).joined(separator: " "))" data-input="\(input.mode)" \
                    data-hint="\(input.hint)"\(name == chosen?.0 ? " selected" : "")>\(name) (\(definition.type.description))</option>
                    """
            }
            // The comparators of the chosen field, or of any field until one is chosen (the script narrows them as a field is picked).
            let offered = chosen?.2 ?? FilterComparator.allCases.filter { comparator in filterable.contains { $0.2.contains(comparator) } }
            let comparators = offered.map { "<option\($0.rawValue == call.query("o\(index)") ? " selected" : "")>\($0.rawValue)</option>" as HTML }
            let input = chosen.map { valueInput($0.1.type) } ?? (mode: "text", hint: "")
            return """
                <div class="filter" data-filter><label for="f\(index)">Filter \(index) field</label> \
                <select id="f\(index)" name="f\(index)" data-filter-field><option value="">(none)</option>\(options)</select>
                <label for="o\(index)">comparator</label> <select id="o\(index)" name="o\(index)" data-filter-comparator>\(comparators)</select>
                <label for="v\(index)">value</label> <input id="v\(index)" name="v\(index)" inputmode="\(input.mode)" placeholder="\(input.hint)" \
                value="\(call.query("v\(index)") ?? "")" data-filter-value></div>
                """
        }
        let sortOptions = sortable.map { "<option\($0 == call.query("sort") ? " selected" : "")>\($0)</option>" as HTML }
        let order = ["ascending", "descending"].map { "<option\($0 == (call.query("order") ?? "ascending") ? " selected" : "")>\($0)</option>" as HTML }
        let columns = (call.query("cols") == nil ? "" : "<input type=\"hidden\" name=\"cols\" value=\"\(call.query("cols")!)\">") as HTML
        let none: HTML = filterable.isEmpty
            ? "<p class=\"hint\">No field of \(type) can be filtered: give one an index (QUERYABLE, SORTABLE or SEARCHABLE) on the Schema page.</p>" : ""
        return """
            <form method="get" action="\(ConsolePath.make("c", container, "records"))" class="stack query">\(place.hidden)<input type="hidden" name="type" value="\(type)">\(columns)
            <h2>Query</h2>\(none)\(filterable.isEmpty ? [] : rows)
            <p class="hint">Fields with an index can be filtered, with the comparators their index allows. Dates as 2026-11-26T10:00:00Z, locations (NEAR) as latitude,longitude,metres, references as a record name; IN and the LIST_…_ANY/ALL comparators take values separated by commas.</p>
            <div><label for="sort">Sort by</label> <select id="sort" name="sort"><option value="">(record order)</option>\(sortOptions)</select>
            <label for="order">order</label> <select id="order" name="order">\(order)</select>
            <label for="limit">per page</label> <input id="limit" name="limit" value="\(call.query("limit") ?? "50")" inputmode="numeric" size="4"></div>
            <button type="submit">Run the query</button></form>
            """
    }

    /// The keyboard a filter's value wants for a field of `type` (`inputmode`), and what to type.
    static func valueInput(_ type: FieldType) -> (mode: String, hint: String) {
        switch type.scalar {
        case .int64, .double: ("decimal", "a number (several, comma-separated, for IN and LIST_…_ANY/ALL)")
        case .timestamp: ("text", "2026-11-26T10:00:00Z")
        case .location: ("text", "latitude,longitude,metres")
        case .reference: ("text", "a record name")
        default: ("text", "text")
        }
    }

    /// A query error in the console's words: the API's `query.filterBy[0]` becomes "Filter 1 (title)".
    static func consoleWords(_ reason: String, filters: [(index: Int, field: String)]) -> String {
        var words = reason
        for (position, filter) in filters.enumerated().reversed() {
            words = words.replacingOccurrences(of: "query.filterBy[\(position)]", with: "Filter \(filter.index) (\(filter.field))")
        }
        return words.replacingOccurrences(of: "query.sortBy[0]", with: "Sort")
    }

    /// One filter of the query builder as the API takes it.
    static func filterJSON(field: String, comparator: String, text: String, definition: FieldSchema) throws(StratusError) -> JSON {
        guard let kind = FilterComparator(rawValue: comparator) else { throw .badRequest("unknown comparator \(comparator)") }
        var filter: [String: JSON] = ["fieldName": .string(field), "comparator": .string(kind.rawValue)]
        let element = FieldType(definition.type.scalar)
        switch kind {
        case .near:
            let parts = text.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 3, let latitude = parts[0], let longitude = parts[1], let metres = parts[2] else {
                throw .badRequest("NEAR takes latitude,longitude,metres")
            }
            filter["fieldValue"] = ["value": ["latitude": .double(latitude), "longitude": .double(longitude)]]
            filter["distance"] = .double(metres)
        case .in, .notIn, .listContainsAny, .notListContainsAny, .listContainsAll, .notListContainsAll:
            let items = try text.split(separator: ",").map { piece throws(StratusError) in try fieldValue(piece.trimmingCharacters(in: .whitespaces), element) }
            filter["fieldValue"] = ["value": .array(items)]
        default:
            filter["fieldValue"] = ["value": try fieldValue(text, element)]
        }
        return .object(filter)
    }

    /// A field's value from what a person typed, by the field's type.
    static func fieldValue(_ text: String, _ type: FieldType) throws(StratusError) -> JSON {
        if type.isList {
            let items = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            return .array(try items.map { item throws(StratusError) in try ConsoleRecordEditor.scalar(item, type.scalar) })
        }
        return try ConsoleRecordEditor.scalar(text, type.scalar)
    }

    /// A page of query results.
    static func recordTable(_ answer: JSON, type: String, fields: [String: FieldSchema], place: RecordPlace, container: String,
                            columns shown: [String], query: [(String, String)]) -> HTML {
        let rows = (answer["records"]?.arrayValue ?? []).map { record -> [HTML] in
            let name = record["recordName"]?.stringValue ?? ""
            let link: HTML = "<a href=\"\(ConsolePath.make("c", container, "records", "view") + ConsolePath.query(place.pairs + [("name", name)]))\">\(HTML.isolated(name))</a>"
            let modified = record["modified"]?["timestamp"]?.intValue.map { ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double($0) / 1000)) }
            return [link] + shown.map { field in record["fields"]?[field].map { renderValue($0, place: place, container: container) } ?? "" }
                + [ConsoleLayout.time(modified)]
        }
        // A SORTABLE field's header sorts by it (again: the other way); the page goes back to the first.
        let base = query.filter { !["sort", "order", "marker"].contains($0.0) }
        let sort = query.last { $0.0 == "sort" }?.1
        let descending = query.last { $0.0 == "order" }?.1 == "descending"
        let headings = shown.map { field -> HTML in
            guard Query.isSortable(fields[field]!) else { return "\(field)" }
            let next = sort == field && !descending ? "descending" : "ascending"
            let mark = sort == field ? (descending ? " ↓" : " ↑") : ""
            let href = ConsolePath.make("c", container, "records") + ConsolePath.query(base + [("sort", field), ("order", next)])
            return "<a href=\"\(href)\" aria-label=\"Sort by \(field), \(next)\">\(field)\(mark)</a>"
        }
        return ConsoleLayout.table("\(type) records", headings: ["Record"] + headings + ["Modified"], rows, empty: "No records match.")
    }

    /// The fields the records table shows: the `cols` the person chose (comma-separated), or the
    /// first six.
    static func columns(_ call: ConsoleCall, fields: [String: FieldSchema]) -> [String] {
        let names = fields.keys.filter { !$0.hasPrefix("___") }.sorted()
        guard let chosen = call.query("cols") else { return Array(names.prefix(6)) }
        let wanted = Set(chosen.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        return names.filter { wanted.contains($0) }
    }

    /// Chooses the table's columns: a box per field, the chosen ones ticked.
    static func columnsForm(_ call: ConsoleCall, fields: [String: FieldSchema], container: String) -> HTML {
        let shown = Set(columns(call, fields: fields))
        let boxes = fields.keys.filter { !$0.hasPrefix("___") }.sorted().map { name -> HTML in
            "<label><input type=\"checkbox\" name=\"col\" value=\"\(name)\"\(shown.contains(name) ? " checked" : "")> \(name)</label>"
        }
        let kept = call.keptQuery(dropping: ["cols", "col", "marker", "csrf"])
            .map { "<input type=\"hidden\" name=\"\($0.0)\" value=\"\($0.1)\">" as HTML }
        return """
            <details class="columns"><summary>Columns</summary>
            <form method="get" action="\(ConsolePath.make("c", container, "records", "columns"))" class="inline">\(kept)\(boxes)
            <button type="submit">Show these columns</button></form></details>
            """
    }
}
