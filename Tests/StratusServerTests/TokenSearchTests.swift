import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Full-text token search (issue 22 §2): `CONTAINS_ALL_TOKENS` / `CONTAINS_ANY_TOKENS` on
/// SEARCHABLE strings, case- and diacritic-insensitive, split on whitespace and punctuation,
/// checked against an oracle that knows each record's words by construction (it never
/// tokenizes), over a generated corpus with accents, case, punctuation and repeated words.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct TokenSearchTests {
    /// Words as the oracle knows them, each with spellings the corpus and the queries use.
    static let vocabulary: [(word: String, spellings: [String])] = [
        ("creme", ["crème", "Crème", "CREME", "creme"]), ("cafe", ["café", "CAFÉ", "Cafe"]), ("naive", ["naïve", "NAIVE", "Naive"]),
        ("resume", ["résumé", "Resume", "RÉSUMÉ"]), ("zoe", ["Zoë", "zoe", "ZOË"]), ("arger", ["Ärger", "ärger", "ARGER"]),
        ("hello", ["hello", "Hello", "HELLO"]), ("world", ["world", "World"]), ("swift", ["swift", "Swift", "SWIFT"]),
        ("notes", ["notes", "Notes"]), ("garcon", ["garçon", "Garcon"]), ("uber", ["über", "Uber", "ÜBER"]),
        ("2026", ["2026"]), ("x11", ["x11", "X11"]), ("ocean", ["ocean", "Ocean", "OCÉAN"]), ("nino", ["niño", "NIÑO", "nino"]),
        ("deja", ["déjà", "Deja"]), ("vu", ["vu", "VU"]), ("tokyo", ["Tōkyō", "tokyo"]), ("plan", ["plan", "Plan", "PLAN"]),
    ]
    static let separators = [" ", ", ", ". ", "! ", " - ", "\n", "/", " (", ") ", "; ", "…", "—", "\t", " & "]

    struct Generator {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Int((state >> 33) % UInt64(bound))
        }
    }

    @Test func tokenSearchMatchesAnOracleOverAGeneratedCorpus() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            var random = Generator(state: 2026)
            var words: [String: Set<String>] = [:]
            var operations: [JSON] = []
            for index in 0..<300 {
                var text = ""
                var known: Set<String> = []
                for position in 0..<(1 + random.next(8)) {
                    let entry = Self.vocabulary[random.next(Self.vocabulary.count)]
                    known.insert(entry.word)
                    if position > 0 { text += Self.separators[random.next(Self.separators.count)] }
                    text += entry.spellings[random.next(entry.spellings.count)]
                    if random.next(5) == 0 { text += " " + entry.spellings[random.next(entry.spellings.count)] }  // repeated
                }
                let name = "doc-\(index)"
                words[name] = known
                operations.append(op("create", name, type: "Doc", fields: ["body": ["value": .string(text)]]))
            }
            for start in stride(from: 0, to: operations.count, by: 200) {
                let saved = try await session.modify("private", Array(operations[start..<min(start + 200, operations.count)]))
                try #require(saved.json["records"]?.arrayValue?.allSatisfy { $0.errorCode == nil } == true, "\(saved.json)")
            }
            // A string made just-in-time is SEARCHABLE.
            let schema = try await harness.admin(.get, "containers/\(session.container)/schema?environment=development")
            #expect(schema.json["schema"]?.stringValue?.contains("body STRING QUERYABLE SORTABLE SEARCHABLE") == true, "\(schema.json)")

            func search(_ comparator: String, _ text: String) async throws -> Set<String>? {
                var found: Set<String> = []
                var marker: JSON?
                repeat {
                    var body: [String: JSON] = ["query": ["recordType": "Doc", "filterBy": [["fieldName": "body", "comparator": .string(comparator),
                                                                                              "fieldValue": ["value": .string(text)]]]], "resultsLimit": 50]
                    if let marker { body["continuationMarker"] = marker }
                    let page = try await session.post("private", "records/query", .object(body))
                    guard page.status == 200 else { Issue.record("\(comparator) '\(text)': \(page.json)"); return nil }
                    for record in page.json["records"]?.arrayValue ?? [] {
                        let name = record["recordName"]?.stringValue ?? ""
                        #expect(found.insert(name).inserted, "\(name) came twice for \(comparator) '\(text)'")
                    }
                    marker = page.json["continuationMarker"]
                } while marker != nil
                return found
            }
            var cases = 0
            var mismatches: [String] = []
            for round in 0..<80 {
                let all = round % 2 == 0
                var chosen: [(word: String, spellings: [String])] = []
                for _ in 0..<(1 + random.next(3)) { chosen.append(Self.vocabulary[random.next(Self.vocabulary.count)]) }
                let wanted = Set(chosen.map(\.word))
                let text = chosen.map { $0.spellings[random.next($0.spellings.count)] }.joined(separator: Self.separators[random.next(Self.separators.count)])
                let expected = Set(words.filter { all ? wanted.isSubset(of: $0.value) : !wanted.isDisjoint(with: $0.value) }.keys)
                let comparator = all ? "CONTAINS_ALL_TOKENS" : "CONTAINS_ANY_TOKENS"
                let found = try await search(comparator, text)
                cases += 1
                if found != expected {
                    mismatches.append("\(comparator) '\(text)': missing \(expected.subtracting(found ?? []).sorted().prefix(5)), extra \((found ?? []).subtracting(expected).sorted().prefix(5))")
                }
            }
            print("token search: 300 records, \(cases) queries against the oracle, \(mismatches.count) mismatches")
            #expect(mismatches.isEmpty, "\(mismatches.prefix(10).joined(separator: "\n"))")

            // Words combine with other filters, and other sessions' private records are not searched.
            let other = try await Session(harness: harness, container: session.container, environment: .development, apiToken: session.apiToken).signedUp()
            #expect(try await other.modify("private", [op("create", "theirs", type: "Doc", fields: ["body": ["value": "hello world"]])]).json.record(0)?.errorCode == nil)
            let mine = try await search("CONTAINS_ALL_TOKENS", "HELLO, World!")
            #expect(mine?.contains("theirs") == false)
        }
    }

    @Test func badTokenQueriesSayWhatToChange() async throws {
        try await Harness.run { harness in
            let session = try await harness.container().signedUp()
            let schema = "DEFINE SCHEMA\n  RECORD TYPE Doc (body STRING QUERYABLE, tags LIST<STRING> SEARCHABLE, count INT64 QUERYABLE, GRANT READ, CREATE, WRITE TO \"_icloud\");\n"
            #expect(try await harness.admin(.post, "containers/\(session.container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let cases: [(String, JSON, String)] = [
                ("body", ["value": "hello"], "mark it SEARCHABLE"),
                ("count", ["value": 3], "SEARCHABLE STRING field"),
                ("tags", ["value": "  ,.;  "], "no words to search for"),
                ("tags", ["value": .string((0..<21).map { "w\($0)" }.joined(separator: " "))], "at most 20"),
                ("tags", ["value": 7], "'value' is a string"),
            ]
            for (field, value, words) in cases {
                let answer = try await session.post("private", "records/query", ["query": ["recordType": "Doc",
                    "filterBy": [["fieldName": .string(field), "comparator": "CONTAINS_ANY_TOKENS", "fieldValue": value]]]])
                #expect(answer.status == 400 && answer.json["reason"]?.stringValue?.contains(words) == true, "\(field) \(value): \(answer.json)")
            }
            // A SEARCHABLE list of strings: any member's words.
            #expect(try await session.modify("private", [op("create", "t1", type: "Doc", fields: ["tags": ["value": ["Crème brûlée", "dessert"]]])]).json.record(0)?.errorCode == nil)
            let found = try await session.post("private", "records/query", ["query": ["recordType": "Doc",
                "filterBy": [["fieldName": "tags", "comparator": "CONTAINS_ALL_TOKENS", "fieldValue": ["value": "creme DESSERT"]]]]])
            #expect(found.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["t1"], "\(found.json)")
        }
    }

    /// A deploy that adds SEARCHABLE builds the token index over production's existing records.
    @Test func deployBuildsTheTokenIndexForExistingRecords() async throws {
        try await Harness.run { harness in
            let plain = "DEFINE SCHEMA\n  RECORD TYPE Doc (body STRING QUERYABLE, GRANT READ, CREATE, WRITE TO \"_icloud\");\n"
            let production = try await harness.production(plain, prefix: "Search")
            let name = production.container
            #expect(try await production.modify("public", [op("create", "old", type: "Doc", fields: ["body": ["value": "Déjà vu, again"]])]).json.record(0)?.errorCode == nil)
            let query: JSON = ["query": ["recordType": "Doc", "filterBy": [["fieldName": "body", "comparator": "CONTAINS_ALL_TOKENS", "fieldValue": ["value": "deja VU"]]]]]
            let before = try await production.post("public", "records/query", query)
            #expect(before.status == 400 && before.json["reason"]?.stringValue?.contains("then deploy the schema") == true, "\(before.json)")
            let searchable = plain.replacingOccurrences(of: "body STRING QUERYABLE", with: "body STRING QUERYABLE SEARCHABLE")
            try await harness.deploy(searchable, to: name)
            try await harness.buildIndexes(name)
            let after = try await production.post("public", "records/query", query)
            #expect(after.json["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } == ["old"], "\(after.json)")
        }
    }
}
