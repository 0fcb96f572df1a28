import Foundation
import StratusCore

/// The record editor: an input for each field as its type needs, and what a save sends, which is
/// only what the person changed.
///
/// Each field's inputs are posted as `field.<name>` (and `field.<name>.<part>` for a location's
/// or a reference's parts, `order.<name>` for a list's positions), beside `was.<name>`: the value
/// the form started from, as JSON text (which holds no raw line break for a browser to rewrite).
/// A field whose inputs still say what it started from is not sent at all; an emptied one is
/// cleared (`{"value": null}`); only a changed one is written.
enum ConsoleRecordEditor {
    /// A field the person filled in wrongly: which, and why (shown beside it).
    struct Problem: Error, Sendable {
        var field: String
        var reason: String
    }

    /// What a form posts for a field holding `value` (`nil`: absent), as the inputs' names and
    /// values: a record's fields start the form from these, and a refused save shows the posted ones.
    static func formValues(_ name: String, _ definition: FieldSchema, _ value: JSON?) -> [String: [String]] {
        let key = "field." + name
        guard let value, value != .null else { return [:] }
        if definition.type.isList {
            let items = value.arrayValue ?? []
            return [key: items.map { itemText($0, definition.type.scalar) }, "order." + name: items.indices.map { String($0 + 1) }]
        }
        switch definition.type.scalar {
        case .location:
            var values: [String: [String]] = [:]
            for part in locationParts { if let number = value[part] { values[key + "." + part] = [JSONWriter.string(number)] } }
            return values
        case .reference:
            return [key: [value["recordName"]?.stringValue ?? ""], key + ".zone": [value["zoneID"]?["zoneName"]?.stringValue ?? ""],
                    key + ".action": [value["action"]?.stringValue ?? "NONE"]]
        default:
            return [key: [itemText(value, definition.type.scalar)]]
        }
    }

    /// A location's keys, latitude and longitude first.
    static let locationParts = ["latitude", "longitude", "altitude", "horizontalAccuracy", "verticalAccuracy", "course", "speed", "timestamp"]

    /// One value (or list item) as its input holds it.
    static func itemText(_ value: JSON, _ scalar: ScalarType) -> String {
        switch scalar {
        case .timestamp:
            if case .int(let milliseconds) = value { return localTime(milliseconds) }
        case .location:
            if let latitude = value["latitude"], let longitude = value["longitude"] { return "\(JSONWriter.string(latitude)),\(JSONWriter.string(longitude))" }
        case .reference:
            return value["recordName"]?.stringValue ?? ""
        case .int64, .double:
            return JSONWriter.string(value)
        default:
            if let text = value.stringValue { return text }
        }
        return JSONWriter.string(value)
    }

    /// The inputs of one field, holding `values` (a record's, or what was posted), with the value
    /// the form started from (`was`, JSON text) and a problem to show beside it.
    static func inputs(_ name: String, _ definition: FieldSchema, values: [String: [String]], was: String?, problem: String?) -> HTML {
        let key = "field." + name
        let id = "field-" + name
        let typeName = SchemaLanguage.typeName(definition)
        let wasInput: HTML = was.map { "<input type=\"hidden\" name=\"was.\(name)\" value=\"\($0)\">" } ?? ""
        let error: HTML = problem.map { "<p class=\"error field-error\" id=\"\(id)-error\" role=\"alert\">\($0)</p>" } ?? ""
        let described: HTML = problem == nil ? "" : " aria-describedby=\"\(id)-error\" aria-invalid=\"true\""
        let first = values[key]?.first ?? ""
        let control: HTML
        if definition.type.isList {
            let items = values[key] ?? []
            let orders = values["order." + name] ?? []
            var rows: [HTML] = []
            for (index, item) in (items + [""]).enumerated() {
                let order = index < orders.count ? orders[index] : String(index + 1)
                let label = index < items.count ? "Item \(index + 1)" : "New item"
                rows.append("""
                    <li><label class="visually-hidden" for="\(id)-\(index)">\(name): \(label)</label>\(itemInput(key, id: "\(id)-\(index)", item, definition.type.scalar, described: described))
                    <label class="order">Position <input name="order.\(name)" value="\(order)" inputmode="numeric" size="3"></label></li>
                    """)
            }
            control = "<ol class=\"list-editor\" id=\"\(id)\">\(rows)</ol><p class=\"hint\">Empty an item to remove it; change positions to reorder; the last row adds one.</p>"
        } else {
            switch definition.type.scalar {
            case .location:
                let parts = locationParts.filter { $0 == "latitude" || $0 == "longitude" || values[key + "." + $0] != nil }
                control = HTML.join(parts.map { part -> HTML in
                    let partID = part == "latitude" ? id : "\(id)-\(part)"
                    return "<label for=\"\(partID)\">\(part)</label><input id=\"\(partID)\" name=\"\(key).\(part)\" value=\"\(values[key + "." + part]?.first ?? "")\" inputmode=\"decimal\"\(described)>"
                }, separator: " ")
            case .reference:
                let action = values[key + ".action"]?.first ?? "NONE"
                let options = HTML.join(["NONE", "DELETE_SELF", "VALIDATE"].map { "<option\($0 == action ? " selected" : "")>\($0)</option>" as HTML })
                control = """
                    <input id="\(id)" name="\(key)" value="\(first)" placeholder="record name"\(described)>
                    <label for="\(id)-zone">zone</label><input id="\(id)-zone" name="\(key).zone" value="\(values[key + ".zone"]?.first ?? "")" placeholder="this record's zone">
                    <label for="\(id)-action">action</label><select id="\(id)-action" name="\(key).action">\(options)</select>
                    """
            case .asset:
                // The script uploads a chosen file when the form is saved and puts its receipt here.
                let remove: HTML = was == nil ? ""
                    : "<label class=\"check\"><input id=\"\(id)-remove\" type=\"checkbox\" name=\"clear.\(name)\" value=\"on\"> Remove this asset</label>"
                control = """
                    <input id="\(id)" type="file" data-asset-field="\(name)"\(described)><input type="hidden" name="\(key)" value="" data-asset-receipt="\(name)">
                    \(remove)<span class="hint">A file chosen here replaces the asset when you save (uploading needs the console's script).</span>
                    """
            default:
                control = itemInput(key, id: id, first, definition.type.scalar, described: described)
            }
        }
        let zone: HTML = definition.type.scalar == .timestamp ? " (UTC)" : ""
        return "<div class=\"field\"><label for=\"\(id)\">\(name) (\(typeName))\(zone)</label>\(error)\(control)\(wasInput)</div>"
    }

    /// One value's input, as its type needs.
    static func itemInput(_ key: String, id: String, _ text: String, _ scalar: ScalarType, described: HTML) -> HTML {
        switch scalar {
        case .string, .bytes:
            // A leading line break is dropped by the parser unless another comes first.
            let rows = min(12, max(1, text.split(separator: "\n", omittingEmptySubsequences: false).count))
            return "<textarea id=\"\(id)\" name=\"\(key)\" rows=\"\(rows)\"\(described)>\n\(text)</textarea>"
        case .int64:
            return "<input id=\"\(id)\" name=\"\(key)\" value=\"\(text)\" inputmode=\"numeric\"\(described)>"
        case .double:
            return "<input id=\"\(id)\" name=\"\(key)\" value=\"\(text)\" inputmode=\"decimal\"\(described)>"
        case .timestamp:
            return "<input id=\"\(id)\" name=\"\(key)\" type=\"datetime-local\" step=\"0.001\" value=\"\(text)\"\(described)>"
        default:
            return "<input id=\"\(id)\" name=\"\(key)\" value=\"\(text)\"\(described)>"
        }
    }

    /// The fields a save sends: each one whose inputs no longer say what the form started from,
    /// as `{"value": …}`, or `{"value": null}` for one emptied. Throws every field filled in wrongly.
    static func changes(_ form: ConsoleForm, fields: [String: FieldSchema]) throws(ProblemList) -> [String: JSON] {
        var changed: [String: JSON] = [:]
        var problems: [Problem] = []
        for (name, definition) in fields where !name.hasPrefix("___") {
            let was = form["was." + name].flatMap { try? JSONParser.parse($0) }
            let value: JSON?
            do {
                value = try posted(name, definition, form, was: was)
            } catch {
                problems.append(Problem(field: name, reason: error.reason))
                continue
            }
            if definition.type.scalar == .asset {
                if let value {
                    changed[name] = ["value": value]
                } else if form["clear." + name] == "on", was != nil {
                    changed[name] = ["value": .null]
                }
                continue
            }
            guard !same(value, was, definition.type) else { continue }
            if let value { changed[name] = ["value": value] } else if was != nil { changed[name] = ["value": .null] }
        }
        guard problems.isEmpty else { throw ProblemList(problems: problems.sorted { $0.field < $1.field }) }
        return changed
    }

    /// Every field filled in wrongly.
    struct ProblemList: Error, Sendable {
        var problems: [Problem]
        var byField: [String: String] { Dictionary(problems.map { ($0.field, $0.reason) }, uniquingKeysWith: { first, _ in first }) }
    }

    /// The value a field's inputs hold (`nil`: emptied).
    static func posted(_ name: String, _ definition: FieldSchema, _ form: ConsoleForm, was: JSON?) throws(StratusError) -> JSON? {
        let key = "field." + name
        if definition.type.isList {
            let items = form.all(key), orders = form.all("order." + name)
            var kept: [(order: Double, index: Int, value: JSON)] = []
            for (index, item) in items.enumerated() where !lineBreaksAsTyped(item).isEmpty {
                let order = index < orders.count ? Double(orders[index].trimmingCharacters(in: .whitespaces)) ?? Double(index + 1) : Double(index + 1)
                kept.append((order, index, try scalar(lineBreaksAsTyped(item), definition.type.scalar)))
            }
            if kept.isEmpty { return was == nil ? nil : .array([]) }
            return .array(kept.sorted { ($0.order, $0.index) < ($1.order, $1.index) }.map(\.value))
        }
        switch definition.type.scalar {
        case .location:
            var members: [String: JSON] = [:]
            for part in locationParts {
                guard let text = form[key + "." + part]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { continue }
                guard let number = Double(text), number.isFinite else { throw .badRequest("\(part) '\(text)' is not a number") }
                members[part] = .double(number)
            }
            if members.isEmpty { return nil }
            guard members["latitude"] != nil, members["longitude"] != nil else { throw .badRequest("a location needs both latitude and longitude") }
            return .object(members)
        case .reference:
            guard let recordName = form[key]?.trimmingCharacters(in: .whitespaces), !recordName.isEmpty else { return nil }
            try Names.validateRecordName(recordName)
            var reference: [String: JSON] = ["recordName": .string(recordName), "action": .string(form[key + ".action"] ?? "NONE")]
            if let zone = form[key + ".zone"]?.trimmingCharacters(in: .whitespaces), !zone.isEmpty {
                try Names.validateZone(zone)
                reference["zoneID"] = ["zoneName": .string(zone)]
            }
            return .object(reference)
        case .asset:
            // What an upload answered (`singleFile`: fileChecksum, size, receipt), put here by the script.
            guard let text = form[key], !text.isEmpty else { return nil }
            guard let upload = try? JSONParser.parse(text), upload["receipt"]?.stringValue != nil, upload["fileChecksum"]?.stringValue != nil else {
                throw .badRequest("the upload did not finish; choose the file again")
            }
            return ["fileChecksum": upload["fileChecksum"]!, "size": upload["size"] ?? 0, "receipt": upload["receipt"]!]
        default:
            guard let text = form[key].map(lineBreaksAsTyped), !text.isEmpty else { return nil }
            return try scalar(text, definition.type.scalar)
        }
    }

    /// A text area's value as the person typed it: browsers send its line breaks as CR LF.
    static func lineBreaksAsTyped(_ text: String) -> String {
        text.replacingOccurrences(of: "\r\n", with: "\n")
    }

    /// One scalar value from its input's text.
    static func scalar(_ text: String, _ scalar: ScalarType) throws(StratusError) -> JSON {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        switch scalar {
        case .string:
            return .string(text)
        case .int64:
            guard let value = Int64(trimmed) else { throw .badRequest("'\(text)' is not a whole number") }
            return .int(value)
        case .double:
            guard let value = Double(trimmed), value.isFinite else { throw .badRequest("'\(text)' is not a number") }
            return .double(value)
        case .timestamp:
            if let milliseconds = Int64(trimmed) { return .int(milliseconds) }
            guard let milliseconds = parseLocalTime(trimmed) else { throw .badRequest("'\(text)' is not a date and time such as 2026-11-26T10:00") }
            return .int(milliseconds)
        case .reference:
            try Names.validateRecordName(trimmed)
            return ["recordName": .string(trimmed), "action": "NONE"]
        case .location:
            let parts = trimmed.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
            guard parts.count == 2, let latitude = parts[0], let longitude = parts[1] else { throw .badRequest("a location is latitude,longitude") }
            return ["latitude": .double(latitude), "longitude": .double(longitude)]
        case .bytes:
            let compact = text.filter { !$0.isWhitespace }
            guard Data(base64Encoded: compact) != nil else { throw .badRequest("bytes are given as base64") }
            return .string(compact)
        case .asset:
            throw .badRequest("assets are uploaded by apps, not typed here")
        }
    }

    /// Whether a posted value says what the form started from.
    static func same(_ value: JSON?, _ was: JSON?, _ type: FieldType) -> Bool {
        switch (value, was) {
        case (nil, nil): return true
        case (nil, _?), (_?, nil): return false
        case (let value?, let was?):
            if type.isList {
                guard let items = value.arrayValue, let old = was.arrayValue, items.count == old.count else { return false }
                return zip(items, old).allSatisfy { same($0, $1, FieldType(type.scalar)) }
            }
            switch type.scalar {
            case .string, .bytes:
                return value.stringValue.map(lineBreaksAsTyped) == was.stringValue.map(lineBreaksAsTyped)
            case .int64, .double, .timestamp:
                return number(value) == number(was)
            case .location:
                return locationParts.allSatisfy { number(value[$0] ?? .null) == number(was[$0] ?? .null) }
            case .reference:
                return value["recordName"] == was["recordName"] && (value["action"]?.stringValue ?? "NONE") == (was["action"]?.stringValue ?? "NONE")
                    && value["zoneID"]?["zoneName"]?.stringValue ?? "" == was["zoneID"]?["zoneName"]?.stringValue ?? ""
            case .asset:
                return true
            }
        }
    }

    static func number(_ json: JSON) -> Double? {
        switch json {
        case .int(let value): Double(value)
        case .double(let value): value
        default: nil
        }
    }

    /// Milliseconds since 1970 as a `datetime-local` value in UTC, to the millisecond.
    static func localTime(_ milliseconds: Int64) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let seconds = Int64((Double(milliseconds) / 1000).rounded(.down))
        let date = Date(timeIntervalSince1970: Double(seconds))
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        let millis = milliseconds - seconds * 1000
        func two(_ value: Int?) -> String { String(format: "%02d", value ?? 0) }
        return String(format: "%04d", parts.year ?? 1970) + "-\(two(parts.month))-\(two(parts.day))T\(two(parts.hour)):\(two(parts.minute)):\(two(parts.second))"
            + "." + String(format: "%03d", Int(millis))
    }

    /// A `datetime-local` value (or ISO 8601 with a zone) as milliseconds since 1970; local values are UTC.
    static func parseLocalTime(_ text: String) -> Int64? {
        if text.hasSuffix("Z") || text.contains("+") {
            let formatter = ISO8601DateFormatter()
            if let date = formatter.date(from: text) { return Int64((date.timeIntervalSince1970 * 1000).rounded()) }
            formatter.formatOptions.insert(.withFractionalSeconds)
            return formatter.date(from: text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
        }
        guard let match = text.wholeMatch(of: /(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,3}))?)?/) else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let components = DateComponents(year: Int(match.output.1), month: Int(match.output.2), day: Int(match.output.3),
                                        hour: Int(match.output.4), minute: Int(match.output.5), second: match.output.6.flatMap { Int($0) } ?? 0)
        guard let date = calendar.date(from: components) else { return nil }
        let fraction = match.output.7.map { String($0).padding(toLength: 3, withPad: "0", startingAt: 0) }.flatMap { Int64($0) } ?? 0
        return Int64(date.timeIntervalSince1970) * 1000 + fraction
    }
}
