import Foundation
import PostgresNIO
import StratusCore
import StratusStore
@testable import StratusTestSupport
import Testing

/// Schema environments and promotion through the CLI (`stratus schema …`) and the data API.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct SchemaDeployTests {
    func cli(_ harness: Harness, _ arguments: [String]) async throws -> Subprocess.Output {
        try await Programs.cli(arguments, server: "http://127.0.0.1:\(harness.client.port ?? 0)", token: Harness.adminToken)
    }

    @Test func justInTimeDevelopmentStrictProductionAndDeploy() async throws {
        try await Harness.run(live: true) { harness in
            let name = "iCloud.com.example.Schema\(UInt32.random(in: 0...UInt32.max))"
            let dev = try await harness.container(name, environment: .development).signedUp()
            let prodToken = try await harness.admin(.post, "containers/\(name)/tokens", json: ["environment": "production"])
            var prod = Session(harness: harness, container: name, environment: .production, apiToken: prodToken.json["apiToken"]?.stringValue ?? "")
            prod = try await prod.signedUp()

            // development creates the type just-in-time, with CloudKit's default grants
            let saved = try await dev.modify("public", [op("create", "n1", type: "Note", fields: ["title": ["value": "hello"], "stars": ["value": 3]])])
            #expect(saved.json.record(0)?["recordChangeTag"] != nil)
            let exported = try await cli(harness, ["schema", "export", "--container", name, "--environment", "development"])
            #expect(exported.status == 0, "\(exported.text)")
            #expect(exported.text.contains("RECORD TYPE Note"))
            #expect(exported.text.contains("GRANT WRITE TO \"_creator\""))
            #expect(exported.text.contains("GRANT CREATE TO \"_icloud\""))
            #expect(exported.text.contains("GRANT READ TO \"_world\""))

            // production refuses it until deployed, naming what is missing, and never changes its schema implicitly
            let refused = try await prod.modify("public", [op("create", "p1", type: "Note", fields: ["title": ["value": "x"]])])
            #expect(refused.json.record(0)?.errorCode == "BAD_REQUEST")
            #expect(refused.json.record(0)?["reason"]?.stringValue?.contains("Note") == true)
            let prodBefore = try await cli(harness, ["schema", "export", "--container", name, "--environment", "production"])
            #expect(prodBefore.text.trimmingCharacters(in: .whitespacesAndNewlines) == "DEFINE SCHEMA")

            // dry run prints the plan and changes nothing; --yes applies
            let dry = try await cli(harness, ["schema", "deploy", "--container", name, "--dry-run"])
            #expect(dry.status == 0, "\(dry.text)")
            #expect(dry.text.contains("+ added type: Note"))
            #expect(dry.text.contains("+ added field: Note.title STRING QUERYABLE SORTABLE"))
            #expect(try await prod.modify("public", [op("create", "p1", type: "Note")]).json.record(0)?.errorCode == "BAD_REQUEST")
            let noTTY = try await cli(harness, ["schema", "deploy", "--container", name])
            #expect(noTTY.status != 0, "without --yes and without a terminal the deploy is not applied")
            let deployed = try await cli(harness, ["schema", "deploy", "--container", name, "--yes"])
            #expect(deployed.status == 0, "\(deployed.text)")
            let accepted = try await prod.modify("public", [op("create", "p1", type: "Note", fields: ["title": ["value": "x"], "stars": ["value": 5]])])
            #expect(accepted.json.record(0)?["recordChangeTag"] != nil, "\(accepted.json)")
            let prodQuery = try await prod.post("public", "records/query", ["query": ["recordType": "Note", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "x"]]]]])
            #expect(prodQuery.json["records"]?.arrayValue?.count == 1, "indexes arrived with the type")
            let prodExport = try await cli(harness, ["schema", "export", "--container", name, "--environment", "production"])
            #expect(prodExport.text == exported.text, "grants and indexes arrive unchanged")
            // still strict: a new field in production is refused
            let newField = try await prod.modify("public", [op("create", "p2", type: "Note", fields: ["extra": ["value": 1]])])
            #expect(newField.json.record(0)?.errorCode == "BAD_REQUEST")
            #expect(newField.json.record(0)?["reason"]?.stringValue?.contains("extra") == true)
            #expect(try await cli(harness, ["schema", "export", "--container", name, "--environment", "production"]).text == prodExport.text)

            // development queries are remembered for deploy warnings
            let devQuery = try await dev.post("public", "records/query", ["query": ["recordType": "Note", "filterBy": [["fieldName": "title", "comparator": "EQUALS", "fieldValue": ["value": "hello"]]]]])
            #expect(devQuery.json["records"]?.arrayValue?.count == 1)
            let versionBefore = try await harness.admin(.get, "containers/\(name)/schema?environment=production").json["version"]

            // a deploy that removes a field or changes its type is refused, naming it; production stays byte-identical
            let folder = NSTemporaryDirectory() + "stratus-schema-\(UInt32.random(in: 0...UInt32.max))"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let destructive = exported.text.replacingOccurrences(of: "stars INT64 QUERYABLE SORTABLE", with: "stars DOUBLE QUERYABLE SORTABLE")
                .replacingOccurrences(of: "        title STRING QUERYABLE SORTABLE SEARCHABLE,\n", with: "")
            #expect(destructive != exported.text)
            try destructive.write(toFile: folder + "/destructive.ckdb", atomically: true, encoding: .utf8)
            let imported = try await cli(harness, ["schema", "import", "--container", name, "--file", folder + "/destructive.ckdb", "--yes"])
            #expect(imported.status == 0, "\(imported.text)")
            let refusedDeploy = try await cli(harness, ["schema", "deploy", "--container", name, "--yes"])
            #expect(refusedDeploy.status != 0)
            // The refusal, with what is refused; not the plan it will not apply.
            #expect(refusedDeploy.text.hasPrefix("stratus: deploy refused: production is additive only, and 2 changes are not"), "\(refusedDeploy.text)")
            #expect(refusedDeploy.text.contains("\n  removed field: Note.title"), "\(refusedDeploy.text)")
            #expect(refusedDeploy.text.contains("\n  changed field type: Note.stars INT64 → DOUBLE"), "\(refusedDeploy.text)")
            #expect(!refusedDeploy.text.contains("Deploy plan for") && !refusedDeploy.text.contains("+ "), "\(refusedDeploy.text)")
            let planned = try await cli(harness, ["schema", "diff", "--container", name])
            #expect(planned.text.contains("REFUSED removed field: Note.title") && planned.text.contains("warning: development queries used Note.title"), "\(planned.text)")
            #expect(try await cli(harness, ["schema", "export", "--container", name, "--environment", "production"]).text == prodExport.text)
            #expect(try await harness.admin(.get, "containers/\(name)/schema?environment=production").json["version"] == versionBefore)
            #expect(planned.status != 0)

            // export → import → export is identical; validate reports line and column
            try exported.text.write(toFile: folder + "/good.ckdb", atomically: true, encoding: .utf8)
            #expect(try await cli(harness, ["schema", "import", "--container", name, "--file", folder + "/good.ckdb", "--yes"]).status == 0)
            #expect(try await cli(harness, ["schema", "export", "--container", name, "--environment", "development"]).text == exported.text)
            #expect(try await cli(harness, ["schema", "validate", "--file", folder + "/good.ckdb"]).status == 0)
            try "DEFINE SCHEMA\n  RECORD TYPE A (\n    x STRNG\n  );\n".write(toFile: folder + "/bad.ckdb", atomically: true, encoding: .utf8)
            let invalid = try await cli(harness, ["schema", "validate", "--file", folder + "/bad.ckdb"])
            #expect(invalid.status != 0)
            #expect(invalid.text.contains("bad.ckdb:3:7: unknown field type 'STRNG'"), "\(invalid.text)")

            // history lists the deploy with its plan
            let history = try await cli(harness, ["schema", "history", "--container", name, "--environment", "production", "--json"])
            let entries = (try? JSONParser.parse(history.text))?["history"]?.arrayValue ?? []
            #expect(entries.count == 1, "\(history.text)")
            #expect(entries.first?["kind"] == "deploy")
            #expect(entries.first?["plan"]?.stringValue?.contains("added type: Note") == true)

            // reset: development ← production, development data gone
            let reset = try await cli(harness, ["schema", "reset", "--container", name, "--yes"])
            #expect(reset.status == 0, "\(reset.text)")
            #expect(try await cli(harness, ["schema", "export", "--container", name, "--environment", "development"]).text == prodExport.text)
            let gone = try await dev.post("public", "records/lookup", ["records": [["recordName": "n1"]]])
            #expect(gone.json.record(0)?.errorCode == "NOT_FOUND")
            let devHistory = try await cli(harness, ["schema", "history", "--container", name, "--environment", "development"])
            #expect(devHistory.text.contains("reset"))
        }
    }

    /// Adding QUERYABLE to a field of a type with 100,000 production records builds its index with
    /// visible progress; before, queries on it are BAD_REQUEST naming the missing index.
    @Test func addingAnIndexBackfillsProductionRecords() async throws {
        // Most of its records are written straight into the table, past the usage meters.
        try await Harness.run(live: true, verifyUsage: false) { harness in
            let name = "iCloud.com.example.Backfill\(UInt32.random(in: 0...UInt32.max))"
            let dev = try await harness.container(name, environment: .development).signedUp()
            let prodToken = try await harness.admin(.post, "containers/\(name)/tokens", json: ["environment": "production"])
            let prod = try await Session(harness: harness, container: name, environment: .production, apiToken: prodToken.json["apiToken"]?.stringValue ?? "").signedUp()
            let folder = NSTemporaryDirectory() + "stratus-backfill-\(UInt32.random(in: 0...UInt32.max))"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: folder) }
            _ = dev
            try "DEFINE SCHEMA\n RECORD TYPE Item (\"___recordID\" REFERENCE QUERYABLE, sku STRING, qty INT64 SORTABLE, GRANT CREATE, WRITE TO \"_icloud\", GRANT READ TO \"_world\");\n"
                .write(toFile: folder + "/v1.ckdb", atomically: true, encoding: .utf8)
            #expect(try await cli(harness, ["schema", "import", "--container", name, "--file", folder + "/v1.ckdb", "--yes"]).status == 0)
            #expect(try await cli(harness, ["schema", "deploy", "--container", name, "--yes"]).status == 0)
            let first = try await prod.modify("public", [op("create", "item-0", type: "Item", fields: ["sku": ["value": "sku-0"], "qty": ["value": 0]])])
            #expect(first.json.record(0)?["recordChangeTag"] != nil, "\(first.json)")
            // 99,999 more production records, written straight into the same zone
            try await harness.database.withConnection { connection in
                try await connection.query("""
                    INSERT INTO records (container_id, zone_id, record_name, record_type, change_xid, change_seq, fields, created_at, created_by, modified_at, modified_by, size)
                    SELECT r.container_id, r.zone_id, 'item-' || g, 'Item', pg_current_xact_id()::text::bigint, nextval('change_seq'),
                           '{"qty":{"type":"INT64","value":' || g || '},"sku":{"type":"STRING","value":"sku-' || g || '"}}', 0, '', 0, '', 60
                    FROM records r, generate_series(1, 99999) g WHERE r.record_name = 'item-0' AND r.record_type = 'Item'
                    """, logger: TestCluster.logger)
            }
            let before = try await prod.post("public", "records/query", ["query": ["recordType": "Item", "filterBy": [["fieldName": "sku", "comparator": "EQUALS", "fieldValue": ["value": "sku-77777"]]]]])
            #expect(before.status == 400)
            #expect(before.json["reason"]?.stringValue?.contains("QUERYABLE") == true, "\(before.json)")

            try "DEFINE SCHEMA\n RECORD TYPE Item (\"___recordID\" REFERENCE QUERYABLE, sku STRING QUERYABLE, qty INT64 SORTABLE, GRANT CREATE, WRITE TO \"_icloud\", GRANT READ TO \"_world\");\n"
                .write(toFile: folder + "/v2.ckdb", atomically: true, encoding: .utf8)
            #expect(try await cli(harness, ["schema", "import", "--container", name, "--file", folder + "/v2.ckdb", "--yes"]).status == 0)
            let plan = try await cli(harness, ["schema", "diff", "--container", name])
            #expect(plan.text.contains("+ added index: Item.sku QUERYABLE (builds index entries for 100000 production records)"), "\(plan.text)")
            // Apply the schema and build only part of the index, as if the CLI had been interrupted…
            let applied = try await harness.admin(.post, "containers/\(name)/schema/deploy", json: ["by": "test"])
            #expect(applied.json["applied"] == true, "\(applied.json)")
            let partial = try await harness.admin(.post, "containers/\(name)/schema/indexes/build", json: ["batch": 20000])
            #expect(partial.json["builds"]?.arrayValue?.first?["built"] == 20000)
            #expect(partial.json["done"] == false)
            let whileBuilding = try await prod.post("public", "records/query", ["query": ["recordType": "Item", "filterBy": [["fieldName": "sku", "comparator": "EQUALS", "fieldValue": ["value": "sku-77777"]]]]])
            #expect(whileBuilding.status == 400)
            #expect(whileBuilding.json["reason"]?.stringValue?.contains("still being built") == true, "\(whileBuilding.json)")
            // A record the build has not reached yet, changed meanwhile (by another user than its
            // writer: the type grants WRITE to every signed-in user): the write indexes it under
            // the applied schema, and the build must replace that entry, not add a second one.
            let ahead = try await prod.post("public", "records/lookup", ["records": [["recordName": "item-99998"]]])
            let tag = try #require(ahead.json.record(0)?["recordChangeTag"]?.stringValue, "\(ahead.json)")
            let changed = try await prod.modify("public", [op("update", "item-99998", type: "Item", tag: tag, fields: ["sku": ["value": "sku-changed"]])])
            #expect(changed.status == 200 && changed.json.record(0)?["serverErrorCode"] == nil, "\(changed.json)")
            // …then `stratus schema deploy` resumes the build where it stopped.
            let deploy = try await cli(harness, ["schema", "deploy", "--container", name, "--yes", "--batch", "20000"])
            #expect(deploy.status == 0, "\(deploy.text)")
            #expect(deploy.text.contains("production already matches development"), "\(deploy.text)")
            #expect(deploy.text.contains("building index Item.sku ["), "progress is visible: \(deploy.text)")
            #expect(deploy.text.contains("100000/100000 records done"), "\(deploy.text)")
            let after = try await prod.post("public", "records/query", ["query": ["recordType": "Item", "filterBy": [["fieldName": "sku", "comparator": "EQUALS", "fieldValue": ["value": "sku-77777"]]]]])
            #expect(after.status == 200, "\(after.json)")
            #expect(after.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["item-77777"], "\(after.json)")
            let changedQuery = try await prod.post("public", "records/query", ["query": ["recordType": "Item", "filterBy": [["fieldName": "sku", "comparator": "EQUALS", "fieldValue": ["value": "sku-changed"]]]]])
            #expect(changedQuery.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["item-99998"], "\(changedQuery.json)")
            let entries = try await harness.database.withConnection { connection in
                try await connection.query("SELECT count(*) FROM index_entries WHERE record_type = 'Item' AND field = 'sku'", logger: TestCluster.logger)
                    .collect().first?.decode(Int64.self)
            }
            #expect(entries == 100_000, "one sku entry per record")
        }
    }
}
