import StratusCore
import Testing

@Suite struct JSONParserTests {
    @Test func parsesValues() throws {
        let value = try JSONParser.parse(#" {"a": [1, -2, 3.5, 1e3, "x\u00e9\n", true, false, null], "b": {}} "#)
        #expect(value == ["a": [1, -2, 3.5, 1000.0, "xé\n", true, false, nil], "b": [:]])
    }

    @Test func keepsIntegersExactAndDistinctFromDoubles() throws {
        #expect(try JSONParser.parse("9223372036854775807") == .int(Int64.max))
        #expect(try JSONParser.parse("-9223372036854775808") == .int(Int64.min))
        #expect(try JSONParser.parse("1.0") == .double(1.0))
        #expect(try JSONParser.parse("-0") == .double(-0.0))
        // Integers of up to 18 characters take a path that does not build text; longer ones do.
        #expect(try JSONParser.parse("999999999999999999") == .int(999_999_999_999_999_999))
        #expect(try JSONParser.parse("-99999999999999999") == .int(-99_999_999_999_999_999))
        #expect(try JSONParser.parse("1000000000000000000") == .int(1_000_000_000_000_000_000))
        #expect(try JSONParser.parse("[0,-1,10,-0]") == [0, -1, 10, .double(-0.0)])
    }

    /// Strings without escapes are taken straight from the input; with escapes, decoded. Both
    /// validate UTF-8 and reject raw control characters.
    @Test func readsStringsWithAndWithoutEscapes() throws {
        #expect(try JSONParser.parse(#"["", "plain", "日本🚀", "a\"b", "tab\tend", "x\u00e9"]"#) ==
                ["", "plain", "日本🚀", "a\"b", "tab\tend", "xé"])
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse([0x22, 0x61, 0x5C, 0x6E, 0xFF, 0x22]) }
    }

    @Test(arguments: [
        ("", "empty"),
        ("{\"a\":1,}", "trailing comma"),
        ("[1,]", "trailing comma"),
        ("{'a':1}", "double-quoted key"),
        ("{\"a\":NaN}", "NaN"),
        ("{\"a\":Infinity}", "NaN"),
        ("{\"a\":1} // c", "unexpected data"),
        ("/* c */ {}", "comments"),
        ("\u{FEFF}{}", "byte-order mark"),
        ("{}{}", "unexpected data"),
        ("{\"a\":1,\"a\":2}", "duplicate key"),
        ("9223372036854775808", "64-bit range"),
        ("1e400", "too large"),
        ("\"\\uD800\"", "surrogate"),
        ("\"\\uDC00x\"", "surrogate"),
        ("{\"a\" 1}", "':'"),
        ("[01]", "leading zeros"),
        ("\"abc", "unterminated"),
        ("\"a\u{01}b\"", "control characters"),
    ])
    func rejectsMalformedInput(text: String, fragment: String) {
        do {
            _ = try JSONParser.parse(text)
            Issue.record("accepted \(text.debugDescription)")
        } catch {
            #expect(error.description.contains(fragment), "\(error.description) should mention \(fragment)")
            #expect(error.line >= 1 && error.column >= 1)
        }
    }

    @Test func rejectsInvalidUTF8() {
        for bytes: [UInt8] in [[0x22, 0xC3, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22]] {
            #expect(throws: JSONParser.Failure.self) { try JSONParser.parse(bytes) }
        }
    }

    @Test func limitsNesting() throws {
        let ok = String(repeating: "[", count: JSONParser.maximumDepth) + String(repeating: "]", count: JSONParser.maximumDepth)
        _ = try JSONParser.parse(ok)
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect(throws: JSONParser.Failure.self) { try JSONParser.parse(deep) }
    }

    @Test func reportsLineAndColumn() {
        do {
            _ = try JSONParser.parse("{\n  \"a\": tru\n}")
            Issue.record("accepted")
        } catch {
            #expect(error.line == 2)
            #expect(error.column == 8)
        }
    }

    @Test func writerRoundTrips() throws {
        let value: JSON = ["s": "q\"\\\n\u{01}é", "i": .int(Int64.min), "d": 0.1, "w": 2.0, "l": [nil, true]]
        #expect(try JSONParser.parse(JSONWriter.bytes(value)) == value)
        #expect(JSONWriter.string(["b": 1, "a": 2]) == #"{"a":2,"b":1}"#)
        // escapes at the start, middle and end of runs of plain bytes
        #expect(JSONWriter.string(.string("\"ab\\c\td\u{1f}")) == #""\"ab\\c\td\u001f""#)
        #expect(JSONWriter.string(.string("plain é")) == #""plain é""#)
        #expect(JSONWriter.string(.string("")) == #""""#)
    }
}

@Suite struct SQLScriptTests {
    @Test func splitsAtTopLevelSemicolonsOnly() {
        let script = """
            -- a comment; with a semicolon
            CREATE TABLE a (x text DEFAULT 'a;b');
            /* block; /* nested; */ still comment */
            CREATE FUNCTION f() RETURNS int AS $$ SELECT 1; $$ LANGUAGE sql;
            CREATE FUNCTION g() RETURNS int AS $body$ SELECT ';'; $body$ LANGUAGE sql;
            SELECT "odd;name" FROM a;
            ;;
            """
        let statements = SQLScript.split(script)
        #expect(statements.count == 4)
        #expect(statements[0].hasSuffix("DEFAULT 'a;b')"))
        #expect(statements[1].contains("$$ SELECT 1; $$"))
        #expect(statements[2].contains("$body$ SELECT ';'; $body$"))
        #expect(statements[3] == "SELECT \"odd;name\" FROM a")
    }

    @Test func keepsDoubledQuotes() {
        #expect(SQLScript.split("SELECT 'it''s; fine'; SELECT 2") == ["SELECT 'it''s; fine'", "SELECT 2"])
    }
}

@Suite struct SettingTests {
    @Test func flagBeatsEnvironmentBeatsDefault() {
        let environment = ["STRATUS_PORT": "9000", "EMPTY": ""]
        #expect(Setting.resolve(flag: "7000", variable: "STRATUS_PORT", environment: environment, default: "8080") == "7000")
        #expect(Setting.resolve(flag: nil, variable: "STRATUS_PORT", environment: environment, default: "8080") == "9000")
        #expect(Setting.resolve(flag: nil, variable: "OTHER", environment: environment, default: "8080") == "8080")
        #expect(Setting.resolve(flag: nil, variable: "EMPTY", environment: environment, default: "8080") == "8080")
        #expect(Setting.resolve(flag: nil, variable: "OTHER", environment: environment, default: nil) == nil)
    }
}
