import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StratusCore

/// The console's pages. Each reads and changes through the management API (`ConsoleCall.api`).
struct ConsolePages: Sendable {
    let console: ConsoleController

    func addRoutes(to router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console") { call in
            let containers = try await call.require(.containers)["containers"]?.arrayValue ?? []
            let rows = containers.map { item -> [HTML] in
                let name = item["name"]?.stringValue ?? ""
                return ["<a href=\"\(ConsolePath.make("c", name))\">\(name)</a>", "\(item["role"]?.stringValue ?? (call.user.isSuperuser ? "superuser" : ""))",
                        "\(item["createdAt"]?.stringValue ?? "")"]
            }
            var body = ConsoleLayout.table("Your containers", ["Container", "Your role", "Created"], rows,
                                           empty: call.user.isSuperuser ? "No containers yet: create one below." : "You are in no container's team yet: ask a container's owner to add you.")
            if call.user.isSuperuser {
                body = """
                    \(body)<h2>Create a container</h2>
                    <form method="post" action="/console/containers" class="stack">\(ConsoleLayout.csrf(call.user))
                    <label for="name">Container identifier (letters, digits, '.', '-', '_'; e.g. iCloud.com.example.Notes)</label>
                    <input id="name" name="name" required maxlength="128"><button type="submit">Create</button></form>
                    """
            }
            return call.page("Containers", body)
        }
        console.route(router, .post, "/console/containers") { call in
            let name = call.form.text("name") ?? ""
            let answer = await call.api(.createContainer, body: ["name": .string(name)])
            guard answer.ok else { return try ConsoleController.actionFailed(answer, back: "/console") }
            return ConsoleController.seeOther(ConsolePath.make("c", name) + ConsolePath.query([("notice", "created container \(name)")]))
        }
        console.route(router, .get, "/console/c/:container") { call in
            let container = call.container
            // The schema page answers NOT_FOUND for a container the person may not see.
            _ = try await call.require(.schema)
            let usage = await call.api(.usage, query: ["environment": "production"])
            var cards: [HTML] = []
            for environment in ContainerEnvironment.allCases {
                let env = environment.rawValue
                cards.append("""
                    <section class="card"><h2>\(env)</h2><ul>
                    <li><a href="\(ConsolePath.make("c", container, "schema") + ConsolePath.query([("environment", env)]))">Schema</a></li>
                    <li><a href="\(ConsolePath.make("c", container, "records") + ConsolePath.query([("environment", env)]))">Records</a></li>
                    <li><a href="\(ConsolePath.make("c", container, "users") + ConsolePath.query([("environment", env)]))">Users</a></li>
                    <li><a href="\(ConsolePath.make("c", container, "usage") + ConsolePath.query([("environment", env)]))">Usage and quotas</a></li>
                    </ul></section>
                    """)
            }
            let summary: HTML = usage.ok ? "<p>Production holds \(ConsoleUnits.count(usage.json["records"]?.intValue ?? 0)) records in \(ConsoleUnits.bytes(usage.json["bytes"]?.intValue ?? 0)).</p>" : ""
            return call.page(container, container: container, section: "", "\(summary)<div class=\"cards\">\(cards)</div>")
        }
        addConsoleSchemaPages(router)
    }

    // MARK: Schema and deploy

    func addConsoleSchemaPages(_ router: Router<BasicRequestContext>) {
        console.route(router, .get, "/console/c/:container/schema") { call in
            let container = call.container
            let environment = call.environment
            let exported = try await call.require(.schema, query: ["environment": environment.rawValue])
            let text = exported["schema"]?.stringValue ?? ""
            let schema = (try? SchemaLanguage.parse(text)) ?? Schema()
            let picker = ConsoleLayout.environmentPicker(environment, action: ConsolePath.make("c", container, "schema"))
            let access = await call.access()
            let editable = environment == .development && access.may(.importSchema)
            var body: HTML = "\(picker)<p>Version \(exported["version"]?.intValue ?? 0).</p>\(Self.schemaTables(schema, container: container, environment: environment, editable: editable))"
            if environment == .development, !editable {
                body = "\(body)<p>Changing the development schema needs the developer role; you read it.</p>"
            } else if environment == .development {
                body = "\(body)\(Self.schemaForms(schema, user: call.user, container: container, text: call.query("text") ?? text, error: nil))"
            } else {
                body = "\(body)<p>Production changes only by a deploy: <a href=\"\(ConsolePath.make("c", container, "deploy"))\">review and deploy the development schema</a>.</p>"
            }
            return call.page("Schema", container: container, section: "schema", body)
        }
        // The development schema as text: checked (line:column errors shown beside the text), or applied.
        console.route(router, .post, "/console/c/:container/schema") { call in
            let container = call.container
            let text = call.form["schema"] ?? ""
            let apply = call.form["action"] == "import"
            let answer = await call.api(.importSchema, body: ["schema": .string(text), "dryRun": .bool(!apply)])
            if answer.ok, apply {
                return ConsoleController.seeOther(ConsolePath.make("c", container, "schema") + ConsolePath.query([("notice", "the development schema is now version \(answer.json["version"]?.intValue ?? 0)")]))
            }
            if answer.status == 401 || answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
            let current = try await call.require(.schema, query: ["environment": "development"])
            let schema = (try? SchemaLanguage.parse(current["schema"]?.stringValue ?? "")) ?? Schema()
            let result: HTML = answer.ok
                ? "<p class=\"notice\" role=\"status\">The text is valid. Applying it would make these changes:</p><pre>\(answer.json["planText"]?.stringValue ?? "")</pre>"
                : ""
            let body: HTML = "\(result)\(Self.schemaForms(schema, user: call.user, container: container, text: text, error: answer.ok ? nil : answer.reason))"
            return call.page("Schema", container: container, section: "schema", body)
        }
        // Form edits of the development schema: each reads it, changes it and imports it whole.
        console.route(router, .post, "/console/c/:container/schema/edit") { call in
            let container = call.container
            let current = try await call.require(.schema, query: ["environment": "development"])
            var schema = (try? SchemaLanguage.parse(current["schema"]?.stringValue ?? "")) ?? Schema()
            let back = ConsolePath.make("c", container, "schema")
            do {
                if let removed = Self.indexesRemoved(schema, call.form), !removed.isEmpty, call.form["confirmed"] != "yes" {
                    let field = call.form.text("field") ?? ""
                    return call.ask(ConsoleConfirmation(
                        title: "Remove \(removed.joined(separator: " and ")) from \(field)?",
                        consequence: "Development stops keeping the \(removed.joined(separator: " and ")) index\(removed.count == 1 ? "" : "es") of \(field): queries that filter, sort or search on it that way are refused in development. Production keeps its indexes (a deploy never removes one).",
                        action: "Remove the index\(removed.count == 1 ? "" : "es")", back: ConsolePath.make("c", container, "schema", "indexes") + ConsolePath.query([("field", field)]),
                        route: .importSchema))
                }
                if call.form["edit"] == "delete", call.form["confirmed"] != "yes" {
                    var without = schema
                    _ = try Self.editSchema(&without, call.form)
                    let target = call.form.text("target") ?? ""
                    let type = String(target.split(separator: ".").first ?? "")
                    let preview = await call.api(.importSchema, body: ["schema": .string(SchemaLanguage.print(without)), "dryRun": true])
                    guard preview.ok else { return try ConsoleController.actionFailed(preview, back: back) }
                    let count = preview.json["records"]?[type]?.intValue ?? 0
                    let records = count == 0 ? "No development record is a \(type) record."
                        : "\(count) development record\(count == 1 ? " is a \(type) record" : "s are \(type) records"): they stay, and keep their values"
                          + (target.contains(".") ? " of \(target.split(separator: ".").last ?? "") (apps still read them; writing the field in development adds it back)."
                             : " (apps still read them; saving one in development adds the type back).")
                    let consequence = target.contains(".")
                        ? "\(target) leaves the development schema: queries can no longer filter or sort on it. \(records) Production is not changed (a deploy never removes a field)."
                        : "\(target), its fields and its grants leave the development schema. \(records) Production is not changed (a deploy never removes a type)."
                    return call.ask(ConsoleConfirmation(title: "Delete \(target) from the development schema?", consequence: consequence,
                                                        action: "Delete \(target)", back: back, route: .importSchema))
                }
                let done = try Self.editSchema(&schema, call.form)
                let answer = await call.api(.importSchema, body: ["schema": .string(SchemaLanguage.print(schema))])
                guard answer.ok else { return try ConsoleController.actionFailed(answer, back: back) }
                return ConsoleController.seeOther(back + ConsolePath.query([("notice", done)]))
            } catch let error as StratusError {
                return ConsoleController.seeOther(back + ConsolePath.query([("error", error.reason)]))
            }
        }
        // One field's indexes, shown as they are and changed from there.
        console.route(router, .get, "/console/c/:container/schema/indexes") { call in
            let container = call.container
            let current = try await call.require(.schema, query: ["environment": "development"])
            let schema = (try? SchemaLanguage.parse(current["schema"]?.stringValue ?? "")) ?? Schema()
            let name = call.query("field") ?? ""
            let parts = name.split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2, let field = schema.recordTypes[parts[0]]?[parts[1]] else {
                throw ConsoleFailure(status: 404, reason: "the development schema has no field \(name): choose one on the schema page")
            }
            guard (await call.access()).may(.importSchema) else {
                throw ConsoleFailure(status: 403, reason: "changing indexes needs the developer role in \(container)")
            }
            return call.page("Indexes of \(name)", container: container, section: "schema",
                             Self.indexForm(field, name: name, user: call.user, container: container))
        }
        console.route(router, .get, "/console/c/:container/deploy") { call in
            let container = call.container
            let plan = try await call.require(.schemaDiff)
            return call.page("Deploy to production", container: container, section: "deploy",
                             Self.deployPage(plan, user: call.user, container: container, dryRun: nil, canDeploy: (await call.access()).may(.deploySchema)))
        }
        console.route(router, .post, "/console/c/:container/deploy") { call in
            let container = call.container
            if call.form["action"] == "dry-run" {
                let answer = await call.api(.deploySchema, body: ["dryRun": true])
                guard answer.ok || answer.status == 400 else { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
                let plan = answer.ok ? answer.json : (answer.json["serverRecord"] ?? answer.json)
                return call.page("Deploy to production", container: container, section: "deploy",
                                 Self.deployPage(plan, user: call.user, container: container, dryRun: answer.ok ? "Dry run: nothing was changed." : answer.reason,
                                                 canDeploy: true))
            }
            guard call.form.text("confirm") == container else {
                return ConsoleController.seeOther(ConsolePath.make("c", container, "deploy")
                                     + ConsolePath.query([("error", "type the container's identifier, \(container), to confirm the deploy; nothing was changed")]))
            }
            let answer = await call.api(.deploySchema, body: [:])
            guard answer.ok else {
                if answer.status == 403 || answer.status == 404 { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
                return ConsoleController.seeOther(ConsolePath.make("c", container, "deploy") + ConsolePath.query([("error", answer.reason)]))
            }
            return ConsoleController.seeOther(ConsolePath.make("c", container, "deploy", "progress")
                                 + ConsolePath.query([("notice", "deployed: production is now version \(answer.json["version"]?.intValue ?? 0)")]))
        }
        console.route(router, .get, "/console/c/:container/deploy/progress") { call in
            let container = call.container
            let action = ConsolePath.make("c", container, "indexes")
            // A step is offered only while a build is unfinished, and to someone who may build.
            let pending = try await call.require(.schema, query: ["environment": "production"])["indexBuilds"]?.arrayValue ?? []
            let mayBuild = await call.access().may(.buildIndexes)
            let step: HTML = !pending.isEmpty && mayBuild
                ? "<form method=\"post\" action=\"\(action)\" class=\"inline\">\(ConsoleLayout.csrf(call.user))<button type=\"submit\">Build one step</button></form>"
                : "<p>No index is waiting to be built.</p>"
            let body: HTML = """
                <p>New indexes are built over the records production already holds, a step at a time.</p>
                <div id="index-builds" data-index-build="\(action)" data-csrf="\(call.user.csrf)" aria-live="polite"><p class="progress-text">Starting…</p></div>
                \(step)
                """
            return call.page("Index builds", container: container, section: "deploy", body)
        }
        // One index-build step: JSON for the progress page's script, or back to the page for a form.
        console.route(router, .post, "/console/c/:container/indexes") { call in
            let container = call.container
            let answer = await call.api(.buildIndexes, body: ["batch": 2000])
            if call.request.headers[HTTPField.Name("X-CSRF-Token")!] != nil {
                let json: JSON = answer.ok ? answer.json : ["error": .string(answer.reason)]
                var response = Response.json(json, status: .init(code: answer.status))
                for field in ConsoleController.consoleHeaders(contentType: "application/json; charset=utf-8") where field.name != .contentType { response.headers[field.name] = field.value }
                return response
            }
            guard answer.ok else { throw ConsoleFailure(status: answer.status, reason: answer.reason) }
            let done = answer.json["done"] == true
            return ConsoleController.seeOther(ConsolePath.make("c", container, "deploy", "progress") + ConsolePath.query([("notice", done ? "every index is built" : "one step built")]))
        }
    }

    /// The record types, their fields and indexes, the roles and the grants.
    static func schemaTables(_ schema: Schema, container: String, environment: ContainerEnvironment, editable: Bool) -> HTML {
        var parts: [HTML] = []
        for type in schema.recordTypes.keys.sorted() {
            let fields = schema.recordTypes[type] ?? [:]
            let rows = fields.keys.sorted().map { name -> [HTML] in
                let field = fields[name]!
                let flags = [field.queryable ? "QUERYABLE" : nil, field.sortable ? "SORTABLE" : nil, field.searchable ? "SEARCHABLE" : nil].compactMap { $0 }
                let change: HTML = editable
                    ? " <a href=\"\(ConsolePath.make("c", container, "schema", "indexes") + ConsolePath.query([("field", "\(type).\(name)")]))\">Change<span class=\"visually-hidden\"> the indexes of \(type).\(name)</span></a>"
                    : ""
                return ["\(name)", "\(SchemaLanguage.typeName(field))", "\(flags.joined(separator: " "))\(change)"]
            }
            let records = ConsolePath.make("c", container, "records") + ConsolePath.query([("environment", environment.rawValue), ("type", type)])
            let grants = (schema.grants[type] ?? [:]).keys.sorted().map { role -> String in
                "\((schema.grants[type]?[role] ?? []).sorted().map(\.rawValue).joined(separator: ", ")) to \(role)"
            }
            parts.append("""
                <section class="record-type"><h2 id="type-\(type)">\(type)</h2><p><a href="\(records)">Browse \(type) records</a></p>
                \(ConsoleLayout.table("Fields of \(type)", ["Field", "Type", "Indexes"], rows, empty: "No fields yet."))
                <p>Grants: \(grants.isEmpty ? "none (no role may use it in the public database)" : grants.joined(separator: "; ")).</p></section>
                """)
        }
        let roles = schema.roles.sorted()
        return """
            \(parts.isEmpty ? "<p class=\"empty\">No record types yet.</p>" : HTML.join(parts))
            <h2>Security roles</h2><p>Built in: _world, _icloud, _creator. Custom: \(roles.isEmpty ? "none" : roles.joined(separator: ", ")).</p>
            """
    }

    /// The development schema's edit forms: the text, and forms that add a type, a field, an
    /// index, a role or a grant.
    static func schemaForms(_ schema: Schema, user: ConsoleUser, container: String, text: String, error: String?) -> HTML {
        let action = ConsolePath.make("c", container, "schema")
        let edit = ConsolePath.make("c", container, "schema", "edit")
        let types = schema.recordTypes.keys.sorted()
        let typeOptions = types.map { "<option>\($0)</option>" as HTML }
        let fieldOptions = types.flatMap { type in (schema.recordTypes[type] ?? [:]).keys.sorted().map { "<option value=\"\(type).\($0)\">\(type).\($0)</option>" as HTML } }
        let fieldTypes = SchemaLanguage.fieldTypeNames.map { "<option>\($0)</option>" as HTML }
        let roleOptions = (SystemRole.all.sorted() + schema.roles.sorted()).map { "<option>\($0)</option>" as HTML }
        let permissionOptions = Permission.allCases.map { "<option>\($0.rawValue)</option>" as HTML }
        let errorLine: HTML = error.map { "<p class=\"error\" role=\"alert\" id=\"schema-error\">\($0)</p>" } ?? ""
        let tok = ConsoleLayout.csrf(user)
        let indexFlags: HTML = """
            <fieldset><legend>Indexes</legend>
            <label><input type="checkbox" name="queryable" value="on"> QUERYABLE</label>
            <label><input type="checkbox" name="sortable" value="on"> SORTABLE</label>
            <label><input type="checkbox" name="searchable" value="on"> SEARCHABLE</label></fieldset>
            """
        return """
            <h2>Change the development schema</h2>
            <div class="forms">
            <form method="post" action="\(edit)" class="stack">\(tok)<input type="hidden" name="edit" value="type">
            <h3>Add a record type</h3><label for="new-type">Name</label><input id="new-type" name="type" required pattern="[A-Za-z][A-Za-z0-9_]*">
            <button type="submit">Add the type</button></form>
            <form method="post" action="\(edit)" class="stack">\(tok)<input type="hidden" name="edit" value="field">
            <h3>Add a field</h3><label for="field-type">Record type</label><select id="field-type" name="type">\(typeOptions)</select>
            <label for="field-name">Field name</label><input id="field-name" name="field" required pattern="[A-Za-z][A-Za-z0-9_]*">
            <label for="field-kind">Field type</label><select id="field-kind" name="fieldType">\(fieldTypes)</select>
            \(indexFlags)
            <button type="submit">Add the field</button></form>
            <form method="get" action="\(ConsolePath.make("c", container, "schema", "indexes"))" class="stack">
            <h3>Change a field's indexes</h3><label for="index-field">Field</label><select id="index-field" name="field">\(fieldOptions)</select>
            <button type="submit">Show its indexes</button></form>
            <form method="post" action="\(edit)" class="stack">\(tok)<input type="hidden" name="edit" value="delete">
            <h3>Delete a field or record type</h3><label for="delete-target">Field or record type</label>
            <select id="delete-target" name="target">\(types.flatMap { type in ["<option>\(type)</option>" as HTML] + (schema.recordTypes[type] ?? [:]).keys.sorted().map { "<option>\(type).\($0)</option>" as HTML } })</select>
            <button type="submit" class="danger">Delete…</button></form>
            <form method="post" action="\(edit)" class="stack">\(tok)<input type="hidden" name="edit" value="role">
            <h3>Add a security role</h3><label for="new-role">Name</label><input id="new-role" name="role" required pattern="[A-Za-z][A-Za-z0-9_]*">
            <button type="submit">Add the role</button></form>
            <form method="post" action="\(edit)" class="stack">\(tok)<input type="hidden" name="edit" value="grant">
            <h3>Grant a permission</h3><label for="grant-permission">Permission</label><select id="grant-permission" name="permission">\(permissionOptions)</select>
            <label for="grant-role">To role</label><select id="grant-role" name="role">\(roleOptions)</select>
            <label for="grant-type">On record type</label><select id="grant-type" name="type">\(typeOptions)</select>
            <button type="submit">Grant</button></form>
            </div>
            <h2>Edit as text</h2>
            <form method="post" action="\(action)" class="stack">\(tok)
            <label for="schema-text">The development schema in CloudKit's schema language (.ckdb)</label>\(errorLine)
            <textarea id="schema-text" name="schema" rows="16" spellcheck="false"\(error == nil ? "" : " aria-describedby=\"schema-error\" aria-invalid=\"true\"")>\(text)</textarea>
            <div class="buttons"><button type="submit" name="action" value="check">Check</button>
            <button type="submit" name="action" value="import">Apply to development</button></div></form>
            """
    }

    /// The form of one field's indexes, ticked as they are.
    static func indexForm(_ field: FieldSchema, name: String, user: ConsoleUser, container: String) -> HTML {
        func box(_ key: String, _ label: String, _ on: Bool, _ what: String) -> HTML {
            "<label><input type=\"checkbox\" name=\"\(key)\" value=\"on\"\(on ? " checked" : "")> \(label)</label> <span class=\"hint\">\(what)</span>"
        }
        return """
            <p>\(name) is a \(SchemaLanguage.typeName(field)) field of the development schema. Untick an index to remove it; you are asked before one goes.</p>
            <form method="post" action="\(ConsolePath.make("c", container, "schema", "edit"))" class="stack">\(ConsoleLayout.csrf(user))
            <input type="hidden" name="edit" value="index"><input type="hidden" name="field" value="\(name)">
            <fieldset><legend>Indexes of \(name)</legend>
            \(box("queryable", "QUERYABLE", field.queryable, "filter on it"))<br>
            \(box("sortable", "SORTABLE", field.sortable, "sort by it"))<br>
            \(box("searchable", "SEARCHABLE", field.searchable, "full-text search (strings)"))</fieldset>
            <div class="buttons"><button type="submit">Set the indexes</button> <a class="button" href="\(ConsolePath.make("c", container, "schema"))">Back to the schema</a></div></form>
            """
    }

    /// The indexes an index edit would take off its field (`nil` for another edit or field).
    static func indexesRemoved(_ schema: Schema, _ form: ConsoleForm) -> [String]? {
        guard form["edit"] == "index" else { return nil }
        let parts = (form.text("field") ?? "").split(separator: ".", maxSplits: 1).map(String.init)
        guard parts.count == 2, let field = schema.recordTypes[parts[0]]?[parts[1]] else { return nil }
        return [("QUERYABLE", field.queryable, form["queryable"] == "on"), ("SORTABLE", field.sortable, form["sortable"] == "on"),
                ("SEARCHABLE", field.searchable, form["searchable"] == "on")].filter { $0.1 && !$0.2 }.map(\.0)
    }

    /// Applies one form edit to `schema`; what was done, in words.
    static func editSchema(_ schema: inout Schema, _ form: ConsoleForm) throws(StratusError) -> String {
        func name(_ key: String, what: String) throws(StratusError) -> String {
            guard let value = form.text(key), Names.isIdentifier(value) else {
                throw .badRequest("the \(what) must start with a letter and have only letters, digits and '_'")
            }
            return value
        }
        let flags = (form["queryable"] == "on", form["sortable"] == "on", form["searchable"] == "on")
        switch form["edit"] {
        case "type"?:
            let type = try name("type", what: "record type's name")
            try Names.validateRecordType(type)
            guard schema.recordTypes[type] == nil else { throw .badRequest("there is a record type \(type) already") }
            schema.recordTypes[type] = [:]
            // As a type made just-in-time: apps can use it in the public database at once.
            schema.grants[type] = SystemRole.defaultGrants(for: type)
            return "added record type \(type), with CloudKit's default grants (WRITE to _creator, CREATE to _icloud, READ to _world)"
        case "field"?:
            let type = try name("type", what: "record type")
            let field = try name("field", what: "field's name")
            try Names.validateFieldName(field)
            guard schema.recordTypes[type] != nil else { throw .badRequest("there is no record type \(type); add it first") }
            guard schema.recordTypes[type]?[field] == nil else { throw .badRequest("\(type) has a field \(field) already") }
            guard let kind = form.text("fieldType"), let parsed = SchemaLanguage.fieldType(named: kind) else {
                throw .badRequest("choose the field's type from the list")
            }
            var definition = FieldSchema(type: parsed, queryable: flags.0, sortable: flags.1, searchable: flags.2)
            definition.number = nil
            schema.recordTypes[type]?[field] = definition
            return "added field \(type).\(field)"
        case "index"?:
            let parts = (form.text("field") ?? "").split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2, let field = schema.recordTypes[parts[0]]?[parts[1]] else { throw .badRequest("choose a field from the list") }
            var changed = field
            (changed.queryable, changed.sortable, changed.searchable) = flags
            schema.recordTypes[parts[0]]?[parts[1]] = changed
            return "set the indexes of \(parts[0]).\(parts[1])"
        case "delete"?:
            let parts = (form.text("target") ?? "").split(separator: ".", maxSplits: 1).map(String.init)
            guard let type = parts.first, schema.recordTypes[type] != nil else { throw .badRequest("choose a record type or field from the list") }
            if parts.count == 2 {
                guard schema.recordTypes[type]?[parts[1]] != nil else { throw .badRequest("\(type) has no field \(parts[1])") }
                schema.recordTypes[type]?[parts[1]] = nil
                return "deleted field \(type).\(parts[1]) from the development schema"
            }
            schema.recordTypes[type] = nil
            schema.grants[type] = nil
            return "deleted record type \(type) from the development schema"
        case "role"?:
            let role = try name("role", what: "role's name")
            guard !SystemRole.all.contains(role), !schema.roles.contains(role) else { throw .badRequest("there is a role \(role) already") }
            schema.roles.insert(role)
            return "added role \(role)"
        case "grant"?:
            guard let permission = form.text("permission").flatMap(Permission.init(rawValue:)) else { throw .badRequest("choose READ, CREATE or WRITE") }
            guard let role = form.text("role"), SystemRole.all.contains(role) || schema.roles.contains(role) else { throw .badRequest("choose a role from the list") }
            let type = try name("type", what: "record type")
            guard schema.recordTypes[type] != nil else { throw .badRequest("there is no record type \(type)") }
            schema.grants[type, default: [:]][role, default: []].insert(permission)
            return "granted \(permission.rawValue) on \(type) to \(role)"
        default:
            throw .badRequest("unknown change")
        }
    }

    /// The deploy plan, the dry run's result and the confirmation.
    static func deployPage(_ plan: JSON, user: ConsoleUser, container: String, dryRun: String?, canDeploy: Bool) -> HTML {
        let refused = plan["refused"]?.intValue ?? 0
        let backfills = (plan["backfills"]?.arrayValue ?? []).map { item -> [HTML] in
            ["\(item["recordType"]?.stringValue ?? "").\(item["field"]?.stringValue ?? "")", "\(item["records"]?.intValue ?? 0)"]
        }
        let warnings = (plan["warnings"]?.arrayValue ?? []).compactMap(\.stringValue).map { "<li>\($0)</li>" as HTML }
        let result: HTML = dryRun.map { "<p class=\"notice\" role=\"status\">\($0)</p>" } ?? ""
        let action = ConsolePath.make("c", container, "deploy")
        let nothing = plan["plan"]?.arrayValue?.isEmpty ?? true
        let confirm: HTML = nothing
            ? "<p class=\"notice\" role=\"status\">Production already matches development: there is nothing to deploy.</p>"
            : !canDeploy
            ? "<p>Deploying needs the owner role in \(container); you can review the plan.</p>"
            : refused > 0
            ? "<p class=\"error\" role=\"alert\">\(refused) change\(refused == 1 ? " is" : "s are") refused: production is additive only. Nothing can be deployed until development stops removing or changing what production has.</p>"
            : """
              <form method="post" action="\(action)" class="stack">\(ConsoleLayout.csrf(user))
              <label for="confirm">To deploy, type the container's identifier: \(container)</label>
              <input id="confirm" name="confirm" autocomplete="off">
              <div class="buttons"><button type="submit" name="action" value="dry-run">Dry run</button>
              <button type="submit" name="action" value="deploy" class="danger">Deploy to production</button></div></form>
              """
        return """
            \(result)<h2>The plan</h2><pre id="plan">\(plan["planText"]?.stringValue ?? "")</pre>
            \(ConsoleLayout.table("Index builds after the deploy", ["Index", "Records to index"], backfills, empty: "No new index needs building over existing records."))
            \(warnings.isEmpty ? "" : "<h2>Warnings</h2><ul>\(warnings)</ul>" as HTML)
            \(confirm)
            """
    }
}
