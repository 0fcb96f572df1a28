import StratusCore
import Testing

@Suite struct SchemaPlanTests {
    func schema(_ text: String) throws -> Schema { try SchemaLanguage.parse("DEFINE SCHEMA\n" + text) }

    @Test func classifiesAdditiveChanges() throws {
        let production = try schema("""
            RECORD TYPE Note (title STRING QUERYABLE, body STRING SEARCHABLE, GRANT READ TO "_world");
            """)
        let development = try schema("""
            CREATE ROLE Editor;
            RECORD TYPE Note (title STRING QUERYABLE SORTABLE, body STRING, pinned INT64 QUERYABLE,
                              GRANT READ TO "_world", GRANT WRITE TO Editor);
            RECORD TYPE Tag (name STRING);
            """)
        let plan = SchemaPlan.between(production: production, development: development)
        #expect(plan.refused.isEmpty)
        let kinds = plan.changes.map { "\($0.kind.rawValue) \($0.detail)" }
        #expect(kinds.contains("added role Editor"))
        #expect(kinds.contains("added index Note.title SORTABLE"))
        #expect(kinds.contains("removed index Note.body SEARCHABLE"))
        #expect(kinds.contains("added field Note.pinned INT64 QUERYABLE"))
        #expect(kinds.contains("changed grant Note: Editor none → WRITE"))
        #expect(kinds.contains("added type Tag"))
        #expect(kinds.contains("added field Tag.name STRING"))
        #expect(plan.backfills.map { "\($0.recordType).\($0.field)" } == ["Note.title"])
        #expect(plan.text(counts: ["Note": 3]).contains("builds index entries for 3 production records"))
        #expect(SchemaPlan.between(production: development, development: development).isEmpty)
    }

    @Test func refusesDestructiveChanges() throws {
        let production = try schema("RECORD TYPE Note (title STRING, count INT64, old STRING); RECORD TYPE Gone (x STRING);")
        let development = try schema("RECORD TYPE Note (title STRING, count DOUBLE);")
        let plan = SchemaPlan.between(production: production, development: development)
        let refused = plan.refused.map { "\($0.kind.rawValue) \($0.recordType ?? "").\($0.field ?? "")" }
        #expect(refused.sorted() == ["changed field type Note.count", "removed field Note.old", "removed type Gone."])
        #expect(plan.text().contains("! REFUSED removed field: Note.old STRING"))
    }
}
