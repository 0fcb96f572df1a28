import StratusCore
import Testing

@Suite struct SchemaLanguageTests {
    /// Written from the grammar in the CKWS ref §11.4 in the style `cktool export-schema` produces:
    /// comments, every field type, lists, ENCRYPTED, NUMBER, index options, grants, custom roles.
    static let exported = """
        // Exported schema of iCloud.com.example.Boards (development)
        DEFINE SCHEMA

            CREATE ROLE Moderator;
            create role Auditor;   -- keywords are case-insensitive

            RECORD TYPE Board (
                "___createTime"  TIMESTAMP QUERYABLE SORTABLE,
                "___modTime"     TIMESTAMP QUERYABLE SORTABLE,
                "___recordID"    REFERENCE QUERYABLE,
                "___createdBy"   REFERENCE QUERYABLE,
                title            STRING QUERYABLE SORTABLE SEARCHABLE,
                summary          STRING SEARCHABLE,
                isArchived       INT64 QUERYABLE,
                tags             LIST<STRING> QUERYABLE,
                cover            ASSET,
                place            LOCATION QUERYABLE,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ TO "_world",
                GRANT READ, CREATE, WRITE TO Moderator
            );

            /* posts belong to a board */
            RECORD TYPE Post (
                "___createTime"  TIMESTAMP QUERYABLE SORTABLE,
                "___recordID"    REFERENCE QUERYABLE,
                board            REFERENCE QUERYABLE,
                body             STRING SEARCHABLE,
                score            DOUBLE SORTABLE,
                postedAt         TIMESTAMP QUERYABLE SORTABLE,
                attachments      LIST<ASSET>,
                mentions         LIST<REFERENCE>,
                ratings          LIST<DOUBLE>,
                raw              BYTES,
                blobs            LIST<BYTES>,
                stops            LIST<LOCATION>,
                times            LIST<TIMESTAMP>,
                counts           LIST<INT64> QUERYABLE,
                secretNote       ENCRYPTED STRING,
                secretScore      ENCRYPTED DOUBLE,
                legacyCount      NUMBER PREFERRED AS INT64,
                legacyRatio      NUMBER PREFERRED AS DOUBLE,
                untyped          NUMBER,
                "grant"          STRING,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ TO "_world",
                GRANT WRITE TO Moderator,
                GRANT READ TO Auditor
            );

            RECORD TYPE Empty ();
        """

    @Test func parsesEverything() throws {
        let schema = try SchemaLanguage.parse(Self.exported)
        #expect(schema.roles == ["Moderator", "Auditor"])
        #expect(schema.recordTypes.keys.sorted() == ["Board", "Empty", "Post"])
        let board = schema.recordTypes["Board"]!
        #expect(board["title"] == FieldSchema(type: FieldType(.string), queryable: true, sortable: true, searchable: true))
        #expect(board["tags"]?.type == FieldType(.string, list: true))
        #expect(board["cover"]?.type == FieldType(.asset))
        #expect(board["___recordID"]?.queryable == true)
        let post = schema.recordTypes["Post"]!
        #expect(post["secretNote"] == FieldSchema(type: FieldType(.string), encrypted: true))
        #expect(post["legacyRatio"] == FieldSchema(type: FieldType(.double), number: .preferred))
        #expect(post["untyped"]?.number == .number)
        #expect(post["grant"]?.type == FieldType(.string))
        #expect(schema.grants["Board"]?["Moderator"] == [.read, .create, .write])
        #expect(schema.grants["Post"]?["_world"] == [.read])
        #expect(schema.grants["Post"]?["Auditor"] == [.read])
    }

    @Test func printParseRoundTrips() throws {
        let schema = try SchemaLanguage.parse(Self.exported)
        let printed = SchemaLanguage.print(schema)
        let reparsed = try SchemaLanguage.parse(printed)
        #expect(reparsed == schema)
        #expect(SchemaLanguage.print(reparsed) == printed, "export → import → export is identical")
        #expect(printed.contains("    RECORD TYPE Post (\n        \"___createTime\" TIMESTAMP QUERYABLE SORTABLE,"))
        #expect(printed.contains("GRANT READ, CREATE, WRITE TO Moderator"))
        #expect(printed.contains("\"grant\" STRING"))
    }

    @Test(arguments: [
        ("DEFINE SCHEMA RECORD TYPE A (x STRNG);", 1, 32, "unknown field type"),
        ("DEFINE SCHEMA\nRECORD TYPE A (\n  x STRING\n  y INT64\n);", 4, 3, "expected ',' or ')'"),
        ("DEFINE SCHEMA\nRECORD TYPE A (grant STRING);", 2, 22, "expected READ, CREATE or WRITE"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x STRING, GRANT READ TO Editors);", 2, 40, "not defined"),
        ("DEFINE SCHEMA\nRECORD TYPE A (\"___recordID\" STRING);", 2, 16, "cannot change"),
        ("DEFINE SCHEMA\nRECORD TYPE A (\"___secret\" STRING);", 2, 16, "unknown system field"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x INT64 SEARCHABLE);", 2, 24, "SEARCHABLE"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x STRING)", 2, 25, "';'"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x STRING, x INT64);", 2, 26, "twice"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x LIST<STRING);", 2, 29, "'>'"),
        ("SCHEMA", 1, 1, "expected DEFINE"),
        ("DEFINE SCHEMA\n/* never closed", 2, 1, "unterminated"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x STRING) ; RECORD TYPE A (y STRING);", 2, 40, "twice"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x ENCRYPTED REFERENCE);", 2, 18, "ENCRYPTED"),
        ("DEFINE SCHEMA\nCREATE ROLE \"_boss\";", 2, 13, "reserved"),
        ("DEFINE SCHEMA\nCREATE ROLE \"a\u{0}b\";", 2, 13, "invalid role name"),
        ("DEFINE SCHEMA\nRECORD TYPE A (x STRING, GRANT READ TO \"x y\");", 2, 40, "invalid role name"),
    ])
    func reportsErrorsWithLineAndColumn(text: String, line: Int, column: Int, fragment: String) {
        do {
            _ = try SchemaLanguage.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line && error.column == column, "\(error)")
            #expect(error.message.contains(fragment), "\(error)")
        }
    }
}
