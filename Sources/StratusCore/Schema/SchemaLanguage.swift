/// CloudKit's text schema language (`.ckdb`, what `cktool export-schema` writes): a parser with
/// line-and-column errors, and a printer whose output parses back to the same schema.
///
/// ```
/// DEFINE SCHEMA
///     CREATE ROLE Moderator;
///     RECORD TYPE Post (
///         "___recordID" REFERENCE QUERYABLE,
///         title STRING QUERYABLE SORTABLE SEARCHABLE,
///         tags LIST<STRING> QUERYABLE,
///         GRANT WRITE TO "_creator",
///         GRANT READ, CREATE, WRITE TO Moderator
///     );
/// ```
///
/// Keywords are case-insensitive. Identifiers that are keywords or start with `_` are
/// double-quoted. Comments (`//`, `--`, `/* */`) are accepted and not kept. The printer orders
/// system fields first, then fields by name, then grants (`_creator`, `_icloud`, `_world`, then
/// custom roles by name), so equal schemas print identically.
public enum SchemaLanguage {
    /// A syntax or meaning error at a 1-based line and column.
    public struct Failure: Error, Equatable, CustomStringConvertible {
        public var message: String
        public var line: Int
        public var column: Int
        public var description: String { "line \(line), column \(column): \(message)" }
    }

    /// The implicit system fields and their fixed types.
    public static let systemFields: [(name: String, type: ScalarType)] = [
        ("___createTime", .timestamp), ("___createdBy", .reference), ("___etag", .string),
        ("___modTime", .timestamp), ("___modifiedBy", .reference), ("___recordID", .reference),
    ]

    static let keywords: Set<String> = [
        "define", "schema", "create", "role", "record", "type", "grant", "to", "read", "write", "list", "encrypted",
        "number", "preferred", "as", "queryable", "sortable", "searchable", "asset", "bytes", "double", "int64",
        "location", "reference", "string", "timestamp",
    ]

    // MARK: Lexer

    struct Token: Equatable {
        enum Kind: Equatable {
            case word(String)
            case quoted(String)
            case symbol(Character)
            case end
        }
        var kind: Kind
        var line: Int
        var column: Int

        var display: String {
            switch kind {
            case .word(let word): return "'\(word)'"
            case .quoted(let name): return "\"\(name)\""
            case .symbol(let symbol): return "'\(symbol)'"
            case .end: return "the end of the file"
            }
        }
    }

    static func tokenize(_ text: String) throws(Failure) -> [Token] {
        let chars = Array(text.unicodeScalars)
        var tokens: [Token] = []
        var i = 0
        var line = 1
        var column = 1
        func advance() {
            if chars[i] == "\n" {
                line += 1
                column = 1
            } else {
                column += 1
            }
            i += 1
        }
        while i < chars.count {
            let c = chars[i]
            let next: Unicode.Scalar? = i + 1 < chars.count ? chars[i + 1] : nil
            if c.properties.isWhitespace { advance(); continue }
            if (c == "/" && next == "/") || (c == "-" && next == "-") {
                while i < chars.count && chars[i] != "\n" { advance() }
                continue
            }
            if c == "/" && next == "*" {
                let (startLine, startColumn) = (line, column)
                advance(); advance()
                while i < chars.count && !(chars[i] == "*" && i + 1 < chars.count && chars[i + 1] == "/") { advance() }
                guard i < chars.count else { throw Failure(message: "unterminated /* comment", line: startLine, column: startColumn) }
                advance(); advance()
                continue
            }
            let (startLine, startColumn) = (line, column)
            if c == "\"" {
                advance()
                var name = ""
                while i < chars.count && chars[i] != "\"" {
                    if chars[i] == "\n" { throw Failure(message: "unterminated quoted name", line: startLine, column: startColumn) }
                    name.unicodeScalars.append(chars[i])
                    advance()
                }
                guard i < chars.count else { throw Failure(message: "unterminated quoted name", line: startLine, column: startColumn) }
                advance()
                tokens.append(Token(kind: .quoted(name), line: startLine, column: startColumn))
                continue
            }
            if Names.isASCIIAlphanumeric(c) || c == "_" {
                var word = ""
                while i < chars.count && (Names.isASCIIAlphanumeric(chars[i]) || chars[i] == "_") {
                    word.unicodeScalars.append(chars[i])
                    advance()
                }
                tokens.append(Token(kind: .word(word), line: startLine, column: startColumn))
                continue
            }
            if "(),;<>".unicodeScalars.contains(c) {
                tokens.append(Token(kind: .symbol(Character(c)), line: startLine, column: startColumn))
                advance()
                continue
            }
            throw Failure(message: "unexpected character '\(Character(c))'", line: startLine, column: startColumn)
        }
        tokens.append(Token(kind: .end, line: line, column: column))
        return tokens
    }

    // MARK: Parser

    struct Parser {
        var tokens: [Token]
        var index = 0

        var current: Token { tokens[index] }

        func failure(_ message: String, at token: Token? = nil) -> Failure {
            let token = token ?? current
            return Failure(message: message, line: token.line, column: token.column)
        }

        func isKeyword(_ keyword: String) -> Bool {
            if case .word(let word) = current.kind { return word.lowercased() == keyword }
            return false
        }

        mutating func expectKeyword(_ keyword: String) throws(Failure) {
            guard isKeyword(keyword) else { throw failure("expected \(keyword.uppercased()) but found \(current.display)") }
            index += 1
        }

        mutating func accept(_ symbol: Character) -> Bool {
            if case .symbol(let found) = current.kind, found == symbol {
                index += 1
                return true
            }
            return false
        }

        mutating func expect(_ symbol: Character, _ what: String) throws(Failure) {
            guard accept(symbol) else { throw failure("expected \(what) but found \(current.display)") }
        }

        /// A name: a bare identifier that is not a keyword, or a double-quoted one.
        mutating func name(_ what: String) throws(Failure) -> (String, Token) {
            let token = current
            switch token.kind {
            case .quoted(let name):
                guard !name.isEmpty else { throw failure("empty quoted \(what)") }
                index += 1
                return (name, token)
            case .word(let word):
                if SchemaLanguage.keywords.contains(word.lowercased()) {
                    throw failure("'\(word)' is a keyword; write it in double quotes to use it as a \(what)")
                }
                guard let first = word.unicodeScalars.first, Names.isASCIILetter(first) else {
                    throw failure("a \(what) must start with a letter (or be double-quoted)")
                }
                index += 1
                return (word, token)
            default:
                throw failure("expected a \(what) but found \(token.display)")
            }
        }

        mutating func primitive() throws(Failure) -> (ScalarType, encrypted: Bool, number: NumberDeclaration?) {
            let token = current
            guard case .word(let word) = token.kind else { throw failure("expected a field type but found \(token.display)") }
            index += 1
            switch word.lowercased() {
            case "asset": return (.asset, false, nil)
            case "bytes": return (.bytes, false, nil)
            case "double": return (.double, false, nil)
            case "int64": return (.int64, false, nil)
            case "location": return (.location, false, nil)
            case "reference": return (.reference, false, nil)
            case "string": return (.string, false, nil)
            case "timestamp": return (.timestamp, false, nil)
            case "encrypted":
                let (inner, _, number) = try primitive()
                guard number == nil, [.bytes, .string, .double, .int64, .location, .timestamp].contains(inner) else {
                    throw failure("ENCRYPTED applies to BYTES, STRING, DOUBLE, INT64, LOCATION or TIMESTAMP", at: token)
                }
                return (inner, true, nil)
            case "number":
                if isKeyword("preferred") {
                    index += 1
                    try expectKeyword("as")
                    let preferredToken = current
                    guard case .word(let preferred) = current.kind, ["int64", "double"].contains(preferred.lowercased()) else {
                        throw failure("NUMBER PREFERRED AS takes INT64 or DOUBLE", at: preferredToken)
                    }
                    index += 1
                    return (preferred.lowercased() == "double" ? .double : .int64, false, .preferred)
                }
                return (.int64, false, .number)
            default:
                throw failure("unknown field type '\(word)'; use ASSET, BYTES, DOUBLE, INT64, LOCATION, REFERENCE, STRING, TIMESTAMP, LIST<…>, ENCRYPTED … or NUMBER", at: token)
            }
        }

        mutating func fieldType() throws(Failure) -> FieldSchema {
            if isKeyword("list") {
                index += 1
                try expect("<", "'<' after LIST")
                let (scalar, encrypted, number) = try primitive()
                try expect(">", "'>' to close LIST<")
                return FieldSchema(type: FieldType(scalar, list: true), encrypted: encrypted, number: number)
            }
            let (scalar, encrypted, number) = try primitive()
            return FieldSchema(type: FieldType(scalar), encrypted: encrypted, number: number)
        }

        mutating func parse() throws(Failure) -> Schema {
            try expectKeyword("define")
            try expectKeyword("schema")
            var schema = Schema()
            var pendingGrants: [(Token, String)] = []
            while true {
                if case .end = current.kind { break }
                if isKeyword("create") {
                    index += 1
                    try expectKeyword("role")
                    let (role, token) = try name("role name")
                    guard !role.hasPrefix("_") else { throw failure("custom role names cannot start with '_' (reserved for _world, _icloud, _creator)", at: token) }
                    guard Names.isIdentifier(role) else { throw failure("invalid role name '\(Names.printable(role))': use a letter followed by letters, digits or '_'", at: token) }
                    guard schema.roles.insert(role).inserted else { throw failure("role \(role) is created twice", at: token) }
                } else if isKeyword("record") {
                    index += 1
                    try expectKeyword("type")
                    let (typeName, typeToken) = try name("record type name")
                    guard Names.isIdentifier(typeName) || typeName == "Users" else {
                        throw failure("invalid record type name '\(typeName)'", at: typeToken)
                    }
                    guard schema.recordTypes[typeName] == nil else { throw failure("record type \(typeName) is defined twice", at: typeToken) }
                    var fields: [String: FieldSchema] = [:]
                    var grants: [String: Set<Permission>] = [:]
                    try expect("(", "'(' after the record type name")
                    if accept(")") {
                        schema.recordTypes[typeName] = fields
                        try expect(";", "';' after the definition")
                        continue
                    }
                    repeat {
                        if isKeyword("grant") {
                            index += 1
                            var permissions: Set<Permission> = []
                            repeat {
                                let token = current
                                guard case .word(let word) = token.kind, let permission = Permission(rawValue: word.uppercased()) else {
                                    throw failure("expected READ, CREATE or WRITE but found \(token.display)")
                                }
                                index += 1
                                permissions.insert(permission)
                            } while accept(",")
                            try expectKeyword("to")
                            let (role, roleToken) = try name("role name")
                            guard SystemRole.all.contains(role) || Names.isIdentifier(role) else {
                                throw failure("invalid role name '\(Names.printable(role))'", at: roleToken)
                            }
                            grants[role, default: []].formUnion(permissions)
                            pendingGrants.append((roleToken, role))
                        } else {
                            let (fieldName, fieldToken) = try name("field name")
                            var field = try fieldType()
                            if fieldName.hasPrefix("_") {
                                guard let system = SchemaLanguage.systemFields.first(where: { $0.name == fieldName }) else {
                                    throw failure("unknown system field \"\(fieldName)\"; system fields are \(SchemaLanguage.systemFields.map { "\"\($0.name)\"" }.joined(separator: ", "))", at: fieldToken)
                                }
                                guard field.type == FieldType(system.type), !field.encrypted, field.number == nil else {
                                    throw failure("system field \"\(fieldName)\" is \(system.type == .asset ? "ASSET" : system.type.rawValue); its type cannot change", at: fieldToken)
                                }
                            } else {
                                guard Names.isIdentifier(fieldName) else { throw failure("invalid field name '\(fieldName)'", at: fieldToken) }
                            }
                            guard fields[fieldName] == nil else { throw failure("field \(fieldName) is defined twice in \(typeName)", at: fieldToken) }
                            while true {
                                if isKeyword("queryable") { field.queryable = true } else if isKeyword("sortable") { field.sortable = true } else if isKeyword("searchable") {
                                    guard field.type.scalar == .string else { throw failure("only STRING fields can be SEARCHABLE") }
                                    field.searchable = true
                                } else { break }
                                index += 1
                            }
                            fields[fieldName] = field
                        }
                    } while accept(",")
                    try expect(")", "',' or ')' in the record type")
                    schema.recordTypes[typeName] = fields
                    schema.grants[typeName] = grants
                } else {
                    throw failure("expected CREATE ROLE or RECORD TYPE but found \(current.display)")
                }
                try expect(";", "';' after the definition")
            }
            for (token, role) in pendingGrants where !SystemRole.all.contains(role) && !schema.roles.contains(role) {
                throw failure("role \(role) is not defined; add CREATE ROLE \(role);", at: token)
            }
            return schema
        }
    }

    /// Parses a `.ckdb` schema.
    public static func parse(_ text: String) throws(Failure) -> Schema {
        var parser = Parser(tokens: try tokenize(text))
        return try parser.parse()
    }

    // MARK: Printer

    static func quoted(_ name: String) -> String {
        if Names.isIdentifier(name), !keywords.contains(name.lowercased()) { return name }
        return "\"\(name)\""
    }

    /// The field types a form may offer, as the language writes them.
    public static let fieldTypeNames: [String] = {
        let scalars = ["STRING", "INT64", "DOUBLE", "TIMESTAMP", "LOCATION", "REFERENCE", "ASSET", "BYTES"]
        return scalars + scalars.map { "LIST<\($0)>" }
    }()

    /// The field type one of `fieldTypeNames` names.
    public static func fieldType(named name: String) -> FieldType? {
        guard fieldTypeNames.contains(name) else { return nil }
        return (try? parse("DEFINE SCHEMA RECORD TYPE T (f \(name));"))?.recordTypes["T"]?["f"]?.type
    }

    /// A field's type as the language writes it (`STRING`, `LIST<INT64>`, `NUMBER`, …).
    public static func typeName(_ field: FieldSchema) -> String { typeText(field) }

    static func typeText(_ field: FieldSchema) -> String {
        var base: String
        switch field.number {
        case .number?: base = "NUMBER"
        case .preferred?: base = "NUMBER PREFERRED AS \(field.type.scalar == .double ? "DOUBLE" : "INT64")"
        case nil: base = field.type.scalar == .asset ? "ASSET" : field.type.scalar.rawValue
        }
        if field.encrypted { base = "ENCRYPTED " + base }
        return field.type.isList ? "LIST<\(base)>" : base
    }

    /// The canonical text of a schema.
    public static func print(_ schema: Schema) -> String {
        var out = "DEFINE SCHEMA\n"
        for role in schema.roles.sorted() { out += "\n    CREATE ROLE \(quoted(role));\n" }
        let systemOrder = systemFields.map(\.name)
        for typeName in schema.recordTypes.keys.sorted() {
            let fields = schema.recordTypes[typeName] ?? [:]
            var items: [String] = []
            let names = fields.keys.sorted { a, b in
                let x = systemOrder.firstIndex(of: a) ?? Int.max
                let y = systemOrder.firstIndex(of: b) ?? Int.max
                return x != y ? x < y : a < b
            }
            for name in names {
                let field = fields[name]!
                var line = "\(quoted(name)) \(typeText(field))"
                if field.queryable { line += " QUERYABLE" }
                if field.sortable { line += " SORTABLE" }
                if field.searchable { line += " SEARCHABLE" }
                items.append(line)
            }
            let grants = schema.grants[typeName] ?? [:]
            let roleOrder = SystemRole.all + grants.keys.filter { !SystemRole.all.contains($0) }.sorted()
            for role in roleOrder {
                guard let permissions = grants[role], !permissions.isEmpty else { continue }
                items.append("GRANT \(permissions.sorted().map(\.rawValue).joined(separator: ", ")) TO \(quoted(role))")
            }
            out += "\n    RECORD TYPE \(quoted(typeName)) (\n"
            out += items.map { "        " + $0 }.joined(separator: ",\n")
            out += "\n    );\n"
        }
        return out
    }
}
