/// A JSON value as Stratus reads and writes it on the wire.
///
/// Stratus parses request bodies with its own strict parser (``JSONParser``) rather than
/// Foundation's, so that every client mistake gets a precise message: duplicate keys,
/// nesting deeper than ``JSONParser/maximumDepth``, integers outside the 64-bit range,
/// invalid UTF-8 and unpaired surrogates are all rejected with a line and column.
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    /// An integer literal (no fraction, no exponent) that fits in 64 bits.
    case int(Int64)
    /// Any other finite number.
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])
    /// Already-encoded JSON bytes, written verbatim by ``JSONWriter`` (stored record fields, so a
    /// read does not decode and re-encode them). Never produced by the parser.
    case raw([UInt8])

    /// The value of `key` when this is an object.
    /// The value with every `raw` part parsed into values, for a reader that looks inside (the
    /// service writes records it read as raw bytes; the console reads their members).
    public var expanded: JSON {
        switch self {
        case .raw(let bytes): (try? JSONParser.parse(bytes)) ?? .null
        case .array(let elements): .array(elements.map(\.expanded))
        case .object(let members): .object(members.mapValues(\.expanded))
        default: self
        }
    }

    public subscript(key: String) -> JSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    /// The object's members, or `nil` when this is not an object.
    public var objectValue: [String: JSON]? {
        if case .object(let members) = self { return members }
        return nil
    }

    /// The array's elements, or `nil` when this is not an array.
    public var arrayValue: [JSON]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    /// The string, or `nil` when this is not a string.
    public var stringValue: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The integer, or `nil` when this is not an integer.
    public var intValue: Int64? {
        if case .int(let value) = self { return value }
        return nil
    }

    /// A short name of the value's JSON kind, for error messages.
    public var kindName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int, .double: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        case .raw: return "JSON"
        }
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        var members: [String: JSON] = [:]
        for (key, value) in elements { members[key] = value }
        self = .object(members)
    }
}
