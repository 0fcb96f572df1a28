import Foundation
import HTTPTypes
import Hummingbird
import StratusCore

/// The records browser: a query builder over any database, a record's fields by type, and its
/// creation, change and deletion.
struct ConsoleRecordPages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/records") { call in
            let container = call.container
            let place = RecordPlace(call.query)
            let access = await call.access()
            try place.check(access)
            let schema = try await self.consoleSchema(call, container: container, environment: place.environment)
            // Choices for the place, on the page where it is chosen (a type's pages keep it as
            // chosen): the database's zones, and (for someone who may open them) users. Not on every
            // query, where they would be one more read (audited, of a user's database) each time.
            let choosing = call.query("type") == nil
            var zones: [String] = []
            if choosing, !place.isUsers || (place.user != nil && place.reason != nil) {
                var request = place.body
                request["zoneID"] = nil
                zones = (await call.api(.listZones, body: request)).json["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } ?? []
            }
            let users = choosing && access.mayOpenUserDatabases
                ? (await call.api(.users, query: ["environment": place.environment.rawValue, "limit": "200"])).json["users"]?.arrayValue?
                    .compactMap { $0["emailAddress"]?.stringValue } ?? []
                : []
            var body = Self.placeForm(call, place: place, access: access, container: container, zones: zones, users: users)
            if place.isUsers, place.user == nil || place.reason == nil {
                let missing = place.user == nil ? "Give the user whose \(place.database) database to open" : "Say why you open this user's \(place.database) database"
                body = "<p class=\"error\" role=\"alert\">\(missing): the reason is kept in the audit log with every page you read.</p>\(body)"
                return call.page("Records", container: container, section: "records", body)
            }
            guard let type = call.query("type"), let fields = schema.recordTypes[type] else {
                let links = schema.recordTypes.keys.sorted().map { type -> HTML in
                    "<li><a href=\"\(ConsolePath.make("c", container, "records") + ConsolePath.query(place.pairs + [("type", type)]))\">\(type)</a></li>"
                }
                body = "\(body)\(links.isEmpty ? "<p class=\"empty\">The \(place.environment.rawValue) schema has no record types yet.</p>" : "<h2>Record types</h2><ul>\(links)</ul>" as HTML)"
                return call.page("Records", container: container, section: "records", body)
            }
            // The query, from the builder's fields.
            var filters: [JSON] = []
            var used: [(index: Int, field: String)] = []
            var problems: [String] = []
            for index in 1...3 {
                guard let field = call.query("f\(index)"), let comparator = call.query("o\(index)") else { continue }
                guard let definition = fields[field] else { problems.append("Filter \(index): \(type) has no field \(field)"); continue }
                guard let kind = FilterComparator(rawValue: comparator), Query.comparators(for: definition).contains(kind) else {
                    let allowed = Query.comparators(for: definition).map(\.rawValue)
                    problems.append("Filter \(index) (\(field)): " + (allowed.isEmpty ? "\(field) cannot be filtered: it has no index"
                        : "\(comparator) does not apply to \(field); choose \(allowed.joined(separator: ", "))"))
                    continue
                }
                do {
                    filters.append(try Self.filterJSON(field: field, comparator: comparator, text: call.query("v\(index)") ?? "", definition: definition))
                    used.append((index, field))
                } catch let error as StratusError {
                    problems.append("Filter \(index) (\(field)): \(error.reason)")
                }
            }
            var query: [String: JSON] = ["recordType": .string(type), "filterBy": .array(filters)]
            if let sort = call.query("sort"), let definition = fields[sort], Query.isSortable(definition) {
                query["sortBy"] = [["fieldName": .string(sort), "ascending": .bool(call.query("order") != "descending")]]
            }
            var request = place.body
            request["query"] = .object(query)
            request["resultsLimit"] = .int(Int64(min(200, max(1, Int(call.query("limit") ?? "") ?? 50))))
            if let marker = call.query("marker") { request["continuationMarker"] = .string(marker) }
            var results: HTML = ""
            if problems.isEmpty {
                let answer = await call.api(.queryRecords, body: request)
                if answer.status == 401 || answer.status == 403 || (answer.status == 404 && answer.reason.hasPrefix("container ")) {
                    throw ConsoleFailure(status: answer.status, reason: answer.reason)
                }
                if answer.ok {
                    results = Self.recordTable(answer.json, type: type, fields: fields, place: place, container: container,
                                               columns: Self.columns(call, fields: fields), query: call.keptQuery())
                    if let marker = answer.json["continuationMarker"]?.stringValue {
                        let kept = call.keptQuery(dropping: ["marker"])
                        results = "\(results)<p><a rel=\"next\" href=\"\(ConsolePath.make("c", container, "records") + ConsolePath.query(kept + [("marker", marker)]))\">Next page</a></p>"
                    }
                } else {
                    results = "<p class=\"error\" role=\"alert\">\(Self.consoleWords(answer.reason, filters: used))</p>"
                }
            } else {
                results = "<p class=\"error\" role=\"alert\">\(problems.joined(separator: "; "))</p>"
            }
            let new = ConsolePath.make("c", container, "records", "new") + ConsolePath.query(place.pairs + [("type", type)])
            let newLink: HTML = access.may(.modifyRecords, in: place.environment) ? "<p><a href=\"\(new)\">New \(type) record</a></p>" : ""
            let active = (1...3).compactMap { call.query("f\($0)") }.count
            body = """
                <details class="finder" open data-phone-closed><summary>Where, query\(active > 0 ? " (\(active) filter\(active == 1 ? "" : "s"))" : "") and columns</summary>
                \(body)\(Self.queryForm(call, place: place, type: type, fields: fields, container: container))\(Self.columnsForm(call, fields: fields, container: container))</details>
                \(newLink)\(results)
                """
            return call.page("\(type) records", container: container, section: "records", body)
        }
        // The columns form's boxes (col=a&col=b) become one `cols=a,b` on the records page.
        console.route(router, .get, "/console/c/:container/records/columns") { call in
            let chosen = call.queryForm.all("col").joined(separator: ",")
            let kept = call.keptQuery(dropping: ["col", "cols", "marker"])
            return ConsoleController.seeOther(ConsolePath.make("c", call.container, "records") + ConsolePath.query(kept + [("cols", chosen)]))
        }
        console.route(router, .get, "/console/c/:container/records/view") { call in
            let container = call.container
            let place = RecordPlace(call.query)
            let access = await call.access()
            try place.check(access)
            guard let name = call.query("name") else { throw ConsoleFailure(status: 400, reason: "which record? (name= is missing)") }
            var request = place.body
            request["records"] = [["recordName": .string(name)]]
            let answer = await call.api(.lookupRecords, body: request)
            guard answer.ok else { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
            guard let record = answer.json["records"]?.arrayValue?.first, record["serverErrorCode"] == nil else {
                throw ConsoleFailure(status: 404, reason: answer.json["records"]?.arrayValue?.first?["reason"]?.stringValue ?? "no such record")
            }
            let type = record["recordType"]?.stringValue ?? ""
            let schema = try await self.consoleSchema(call, container: container, environment: place.environment)
            guard access.may(.modifyRecords, in: place.environment) else {
                return call.page(name, container: container, section: "records", Self.recordDetails(record, place: place, container: container))
            }
            let body: HTML = """
                \(Self.recordDetails(record, place: place, container: container))
                \(Self.recordForm(call, place: place, type: type, fields: schema.recordTypes[type] ?? [:], record: record, container: container))
                <form method="post" action="\(ConsolePath.make("c", container, "records", "delete"))" class="stack">\(ConsoleLayout.csrf(call.user))\(place.hidden)
                <h2>Delete</h2><input type="hidden" name="name" value="\(name)"><input type="hidden" name="tag" value="\(record["recordChangeTag"]?.stringValue ?? "")">
                <label><input type="checkbox" name="really" value="on"> Delete \(name) for good</label>\(Self.productionConfirmation(place, container: container))
                <button type="submit" class="danger">Delete the record</button></form>
                """
            return call.page(name, container: container, section: "records", body)
        }
        console.route(router, .get, "/console/c/:container/records/new") { call in
            let container = call.container
            let place = RecordPlace(call.query)
            let access = await call.access()
            try place.check(access)
            let schema = try await self.consoleSchema(call, container: container, environment: place.environment)
            guard let type = call.query("type"), let fields = schema.recordTypes[type] else { throw ConsoleFailure(status: 404, reason: "choose a record type of the schema") }
            guard access.may(.modifyRecords, in: place.environment) else {
                throw ConsoleFailure(status: 403, reason: "creating records in \(place.environment.rawValue) needs the \(place.environment == .production ? "owner" : "developer") role in \(container)")
            }
            return call.page("New \(type) record", container: container, section: "records",
                             Self.recordForm(call, place: place, type: type, fields: fields, record: nil, container: container))
        }
        // A save sends only the fields the person changed; a refused one shows the form again as
        // they filled it in, with the reason beside the field (or, for a conflict, both values).
        console.route(router, .post, "/console/c/:container/records/save") { call in
            let container = call.container
            let place = RecordPlace { call.form.text($0) }
            let schema = try await self.consoleSchema(call, container: container, environment: place.environment)
            guard let type = call.form.text("type"), let fields = schema.recordTypes[type] else { throw ConsoleFailure(status: 400, reason: "choose a record type of the schema") }
            let name = call.form.text("name")
            let tag = call.form.text("tag")
            func again(_ error: String?, problems: [String: String] = [:], conflict: (theirs: JSON, changes: [String: JSON])? = nil) -> Response {
                let title = name.map { "Change \($0)" } ?? "New \(type) record"
                var form = call.form
                if let conflict { form = Self.rebased(call.form, on: conflict.theirs, fields: fields) }
                let table: HTML = conflict.map { Self.conflictTable($0.changes, $0.theirs) } ?? ""
                let body: HTML = "\(table)\(Self.recordForm(call, place: place, type: type, fields: fields, record: nil, container: container, posted: form, problems: problems, error: error))"
                var response = call.page(title, container: container, section: "records", body)
                response.status = conflict == nil ? .badRequest : .conflict
                return response
            }
            if place.environment == .production, call.form.text("confirm") != container {
                return again("a change in production needs the container's identifier typed to confirm; nothing was changed")
            }
            let changes: [String: JSON]
            do throws(ConsoleRecordEditor.ProblemList) {
                changes = try ConsoleRecordEditor.changes(call.form, fields: fields)
            } catch {
                return again("nothing was saved: correct the fields marked below", problems: error.byField)
            }
            let view = ConsolePath.make("c", container, "records", "view")
            if tag != nil, changes.isEmpty, let name {
                return ConsoleController.seeOther(view + ConsolePath.query(place.pairs + [("name", name), ("notice", "nothing changed in \(name)")]))
            }
            var record: [String: JSON] = ["recordType": .string(type), "fields": .object(changes)]
            if let name { record["recordName"] = .string(name) }
            if let tag { record["recordChangeTag"] = .string(tag) }
            var request = place.body
            request["operations"] = [["operationType": .string(tag == nil ? "create" : "update"), "record": .object(record)]]
            let answer = await call.api(.modifyRecords, body: request)
            if answer.status == 401 || answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
            guard answer.ok else { return again(answer.reason) }
            let saved = answer.json["records"]?.arrayValue?.first
            if saved?["serverErrorCode"]?.stringValue == "CONFLICT", let theirs = saved?["serverRecord"] {
                return again("someone changed \(name ?? "this record") after you opened it: compare below, then save again to keep yours", conflict: (theirs, changes))
            }
            if let reason = saved?["reason"]?.stringValue { return again(reason) }
            let savedName = saved?["recordName"]?.stringValue ?? name ?? ""
            return ConsoleController.seeOther(view + ConsolePath.query(place.pairs + [("name", savedName), ("notice", "saved \(savedName)")]))
        }
        // An upload URL for one asset field, for the editor's script (JSON): it sends the file there,
        // as an app does, and saves the receipt with the record.
        console.route(router, .post, "/console/c/:container/records/upload") { call in
            let place = RecordPlace { call.form.text($0) }
            var body = place.body
            var token: [String: JSON] = ["recordType": .string(call.form.text("type") ?? ""), "fieldName": .string(call.form.text("field") ?? "")]
            if let name = call.form.text("name") { token["recordName"] = .string(name) }
            body["tokens"] = [.object(token)]
            let answer = await call.api(.requestAssetUploads, body: body)
            let json: JSON = answer.ok ? ["url": answer.json["tokens"]?.arrayValue?.first?["url"] ?? .null] : ["error": .string(answer.reason)]
            var response = Response.json(json, status: .init(code: answer.status))
            for field in ConsoleController.consoleHeaders(contentType: "application/json; charset=utf-8") where field.name != .contentType { response.headers[field.name] = field.value }
            return response
        }
        console.route(router, .post, "/console/c/:container/records/delete") { call in
            let container = call.container
            let place = RecordPlace { call.form.text($0) }
            let name = call.form.text("name") ?? ""
            let view = ConsolePath.make("c", container, "records", "view") + ConsolePath.query(place.pairs + [("name", name)])
            guard call.form["really"] == "on" else { return ConsoleController.seeOther(view + "&error=" + ConsolePath.segment("tick the box to delete; nothing was deleted")) }
            if place.environment == .production, call.form.text("confirm") != container {
                return ConsoleController.seeOther(view + "&error=" + ConsolePath.segment("a change in production needs the container's identifier typed to confirm; nothing was changed"))
            }
            // With the change tag the page showed, a record changed since is not deleted (CONFLICT).
            var record: [String: JSON] = ["recordName": .string(name)]
            let tag = call.form.text("tag")
            if let tag { record["recordChangeTag"] = .string(tag) }
            var request = place.body
            request["operations"] = [["operationType": tag == nil ? "forceDelete" : "delete", "record": .object(record)]]
            let answer = await call.api(.modifyRecords, body: request)
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: view) }
            if let reason = answer.json["records"]?.arrayValue?.first?["reason"]?.stringValue { return ConsoleController.seeOther(view + "&error=" + ConsolePath.segment(reason)) }
            return ConsoleController.seeOther(ConsolePath.make("c", container, "records") + ConsolePath.query(place.pairs + [("notice", "deleted \(name)")]))
        }
    }

    /// The environment's schema, through the management API.
    func consoleSchema(_ call: ConsoleCall, container: String, environment: ContainerEnvironment) async throws -> Schema {
        let exported = try await call.require(.schema, query: ["environment": environment.rawValue])
        return (try? SchemaLanguage.parse(exported["schema"]?.stringValue ?? "")) ?? Schema()
    }

    /// Chooses environment, database, user and zone: a user's database (and the user and reason
    /// it asks for) only for someone who may open it.
    static func placeForm(_ call: ConsoleCall, place: RecordPlace, access: ConsoleAccess, container: String,
                          zones: [String] = [], users choices: [String] = []) -> HTML {
        let users = access.mayOpenUserDatabases
        let databases = (users ? ["public", "private", "shared"] : ["public"]).map { "<option\($0 == place.database ? " selected" : "")>\($0)</option>" as HTML }
        let type: HTML = call.query("type").map { "<input type=\"hidden\" name=\"type\" value=\"\($0)\">" } ?? ""
        let whose: HTML = users ? """
            <label for="user">User (private and shared: email or record name)</label> <input id="user" name="user" value="\(place.user ?? "")" list="user-choices">
            <datalist id="user-choices">\(choices.map { "<option value=\"\($0)\"></option>" as HTML })</datalist>
            <label for="reason">Reason (private and shared: kept in the audit log)</label> <input id="reason" name="reason" value="\(place.reason ?? "")" maxlength="500">
            """ : ""
        return """
            <form method="get" action="\(ConsolePath.make("c", container, "records"))" class="inline">\(type)
            <label for="environment">Environment</label> \(ConsoleLayout.environmentSelect(place.environment))
            <label for="database">Database</label> <select id="database" name="database">\(databases)</select>
            \(whose)<label for="zone">Zone</label> <input id="zone" name="zone" value="\(place.zone)" list="zone-choices">
            <datalist id="zone-choices">\(zones.map { "<option value=\"\($0)\"></option>" as HTML })</datalist>
            <button type="submit">Open</button></form>
            """
    }

    /// A field's value as a person reads it: dates as dates, locations as coordinates, references
    /// as links to their record, assets as a download link.
    static func renderValue(_ field: JSON, place: RecordPlace, container: String) -> HTML {
        let type = field["type"]?.stringValue ?? ""
        let value = field["value"] ?? .null
        func one(_ value: JSON, _ type: String) -> HTML {
            switch type {
            case "TIMESTAMP":
                if case .int(let milliseconds) = value { return "<time>\(ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000)))</time>" }
            case "LOCATION":
                if let latitude = value["latitude"], let longitude = value["longitude"] { return "\(JSONWriter.string(latitude)), \(JSONWriter.string(longitude))" }
            case "REFERENCE":
                if let name = value["recordName"]?.stringValue {
                    var target = place
                    if let zone = value["zoneID"]?["zoneName"]?.stringValue { target.zone = zone }
                    return "<a href=\"\(ConsolePath.make("c", container, "records", "view") + ConsolePath.query(target.pairs + [("name", name)]))\">\(HTML.isolated(name))</a>"
                }
            case "ASSETID":
                if let url = value["downloadURL"]?.stringValue, url.hasPrefix("http://") || url.hasPrefix("https://") {
                    return "<a href=\"\(url)\">download (\(value["size"]?.intValue ?? 0) bytes)</a>"
                }
                return "asset (\(value["size"]?.intValue ?? 0) bytes)"
            case "BYTES":
                return "\(((value.stringValue ?? "").count * 3) / 4) bytes"
            default:
                if let text = value.stringValue { return HTML.isolated(text) }
            }
            return "\(JSONWriter.string(value))"
        }
        if type.hasSuffix("_LIST"), let items = value.arrayValue {
            let scalar = String(type.dropLast(5))
            return "<ul class=\"list\">\(items.map { "<li>\(one($0, scalar))</li>" as HTML })</ul>"
        }
        return one(value, type)
    }

    /// A record's fields and metadata.
    static func recordDetails(_ record: JSON, place: RecordPlace, container: String) -> HTML {
        let fields = record["fields"]?.objectValue ?? [:]
        let rows = fields.keys.sorted().map { name -> [HTML] in
            ["\(name)", "\(fields[name]?["type"]?.stringValue ?? "")", renderValue(fields[name]!, place: place, container: container)]
        }
        func stamp(_ key: String) -> String {
            let when = record[key]?["timestamp"]?.intValue.map { ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double($0) / 1000)) } ?? ""
            return "\(when) by \(record[key]?["userRecordName"]?.stringValue ?? "")"
        }
        let share: HTML = record["share"]?["recordName"]?.stringValue.map { "<dt>Share</dt><dd>\($0)</dd>" } ?? ""
        return """
            <dl class="meta"><dt>Type</dt><dd>\(record["recordType"]?.stringValue ?? "")</dd><dt>Created</dt><dd>\(stamp("created"))</dd>
            <dt>Modified</dt><dd>\(stamp("modified"))</dd><dt>Change tag</dt><dd><code>\(record["recordChangeTag"]?.stringValue ?? "")</code></dd>
            <dt>Where</dt><dd>\(place.environment.rawValue), \(place.database)\(place.user.map { " of \(HTML.isolated($0))" as HTML } ?? ""), zone \(HTML.isolated(place.zone))</dd>\(share)</dl>
            \(ConsoleLayout.table("Fields", ["Field", "Type", "Value"], rows, empty: "No fields.", whole: true))
            """
    }

    /// The form that creates a record (`record` nil) or changes one: an input per field as its
    /// type needs (`ConsoleRecordEditor`), starting from the record's values, or from what was
    /// `posted` when a save was refused (with its `problems` beside the fields).
    static func recordForm(_ call: ConsoleCall, place: RecordPlace, type: String, fields: [String: FieldSchema], record: JSON?, container: String,
                           posted: ConsoleForm? = nil, problems: [String: String] = [:], error: String? = nil) -> HTML {
        let inputs = fields.keys.filter { !$0.hasPrefix("___") }.sorted().map { name -> HTML in
            let definition = fields[name]!
            if let posted {
                let values = posted.values.filter { $0.key == "field." + name || $0.key.hasPrefix("field." + name + ".") || $0.key == "order." + name }
                return ConsoleRecordEditor.inputs(name, definition, values: values, was: posted["was." + name], problem: problems[name])
            }
            let value = record?["fields"]?[name]?["value"]
            return ConsoleRecordEditor.inputs(name, definition, values: ConsoleRecordEditor.formValues(name, definition, value),
                                              was: value.map(JSONWriter.string), problem: nil)
        }
        let recordName = posted?["name"] ?? record?["recordName"]?.stringValue
        let tag = posted?["tag"] ?? record?["recordChangeTag"]?.stringValue
        let identity: HTML = tag.map { "<input type=\"hidden\" name=\"name\" value=\"\(recordName ?? "")\"><input type=\"hidden\" name=\"tag\" value=\"\($0)\">" }
            ?? "<label for=\"record-name\">Record name (empty: a new UUID)</label><input id=\"record-name\" name=\"name\" value=\"\(recordName ?? "")\">"
        let message: HTML = error.map { "<p class=\"error\" role=\"alert\">\($0)</p>" } ?? ""
        return """
            <form method="post" action="\(ConsolePath.make("c", container, "records", "save"))" class="stack record-editor" \
            data-asset-upload="\(ConsolePath.make("c", container, "records", "upload"))" data-csrf="\(call.user.csrf)">\(ConsoleLayout.csrf(call.user))\(place.hidden)
            <h2>\(tag == nil ? "Create" : "Change")</h2>\(message)<input type="hidden" name="type" value="\(type)">\(identity)\(inputs)
            \(productionConfirmation(place, container: container))<button type="submit">Save</button></form>
            """
    }

    /// A refused save's form moved onto the record as it now is (its change tag, and its values as
    /// what the form started from): saving it again keeps the person's values where they differ.
    static func rebased(_ form: ConsoleForm, on theirs: JSON, fields: [String: FieldSchema]) -> ConsoleForm {
        var form = form
        form.set("tag", [theirs["recordChangeTag"]?.stringValue ?? ""])
        for name in fields.keys { form.set("was." + name, theirs["fields"]?[name]?["value"].map { [JSONWriter.string($0)] } ?? []) }
        return form
    }

    /// A conflict in words: each field the person changed, with their value and the one saved meanwhile.
    static func conflictTable(_ changed: [String: JSON], _ theirs: JSON) -> HTML {
        let rows = changed.keys.sorted().map { name -> [HTML] in
            let mine = changed[name]?["value"].map { $0 == .null ? "(cleared)" : JSONWriter.string($0) } ?? ""
            let saved = theirs["fields"]?[name]?["value"].map(JSONWriter.string) ?? "(none)"
            return ["\(name)", "<code>\(mine)</code>", "<code>\(saved)</code>"]
        }
        return ConsoleLayout.table("Your changes and the record as saved meanwhile", ["Field", "Yours", "Saved meanwhile"], rows,
                                   empty: "The other change touched no field you changed.")
    }

    /// In production, the field that confirms a change by the container's identifier.
    static func productionConfirmation(_ place: RecordPlace, container: String) -> HTML {
        guard place.environment == .production else { return "" }
        return "<label for=\"confirm\">This changes production: type the container's identifier, \(container), to confirm</label><input id=\"confirm\" name=\"confirm\" autocomplete=\"off\">"
    }
}
