import Foundation

/// The scalar types of CloudKit fields.
public enum ScalarType: String, Sendable, CaseIterable, Hashable {
    case string = "STRING"
    case int64 = "INT64"
    case double = "DOUBLE"
    case timestamp = "TIMESTAMP"
    case bytes = "BYTES"
    case reference = "REFERENCE"
    case location = "LOCATION"
    case asset = "ASSETID"
}

/// A field's type: a scalar type or a list of one.
public struct FieldType: Sendable, Hashable, CustomStringConvertible {
    public var scalar: ScalarType
    public var isList: Bool

    public init(_ scalar: ScalarType, list: Bool = false) {
        self.scalar = scalar
        self.isList = list
    }

    /// The wire `type` spelling: `STRING`, `INT64_LIST`, `ASSETID`…
    public var wireName: String { isList ? scalar.rawValue + "_LIST" : scalar.rawValue }

    public var description: String { wireName }

    /// Parses a wire `type`. Accepts the spellings of the CKWS ref and the aliases other clients use:
    /// `ASSET` for `ASSETID`, `INT`, `DATETIME`, `BYTE`. `LIST` and `UNKNOWN_LIST` return `nil` scalar
    /// information and are handled by the caller.
    public init?(wireName: String) {
        var name = wireName
        var list = false
        if name.hasSuffix("_LIST") {
            list = true
            name.removeLast(5)
        }
        let scalar: ScalarType?
        switch name {
        case "ASSET": scalar = .asset
        case "INT": scalar = .int64
        case "DATETIME": scalar = .timestamp
        case "BYTE": scalar = .bytes
        default: scalar = ScalarType(rawValue: name)
        }
        guard let scalar else { return nil }
        self.init(scalar, list: list)
    }
}

/// A reference to another record (same zone).
public struct Reference: Sendable, Hashable {
    public enum Action: String, Sendable, Hashable {
        case none = "NONE"
        case deleteSelf = "DELETE_SELF"
        case validate = "VALIDATE"
    }

    public var recordName: String
    public var zoneName: String?
    public var ownerRecordName: String?
    public var action: Action

    public init(recordName: String, zoneName: String? = nil, ownerRecordName: String? = nil, action: Action = .none) {
        self.recordName = recordName
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
        self.action = action
    }
}

/// An asset a record holds (CKWS asset dictionary): which bytes, by checksum and size. The bytes
/// live in the server's asset store; a record stores only this.
public struct AssetValue: Sendable, Hashable {
    /// Standard base64 of the bytes' SHA-256 (44 characters): CKWS `fileChecksum`.
    public var fileChecksum: String
    public var size: Int64
    /// The receipt `assets/upload` or `assets/rereference` gave, on a value being saved (never stored).
    public var receipt: String?
    /// The receipt was checked (`ModifyRequest.receipts`): the value may be saved in this field.
    public var verified: Bool

    public init(fileChecksum: String, size: Int64, receipt: String? = nil, verified: Bool = false) {
        self.fileChecksum = fileChecksum
        self.size = size
        self.receipt = receipt
        self.verified = verified
    }

    /// The 32 bytes of the SHA-256 `fileChecksum` names, or `nil` when it names none.
    public static func digest(of checksum: String) -> [UInt8]? {
        guard checksum.utf8.count == 44, let data = Data(base64Encoded: checksum), data.count == 32 else { return nil }
        return Array(data)
    }
}

/// A typed field value, exactly as CloudKit Web Services carries it.
public indirect enum FieldValue: Sendable, Equatable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since 1970-01-01 UTC.
    case timestamp(Int64)
    /// Canonical base64 of the bytes.
    case bytes(String)
    case reference(Reference)
    /// The location dictionary with its numeric members (`latitude`, `longitude`, …).
    case location([String: Double])
    case asset(AssetValue)
    case list(ScalarType, [FieldValue])

    /// The value's type.
    public var type: FieldType {
        switch self {
        case .string: return FieldType(.string)
        case .int64: return FieldType(.int64)
        case .double: return FieldType(.double)
        case .timestamp: return FieldType(.timestamp)
        case .bytes: return FieldType(.bytes)
        case .reference: return FieldType(.reference)
        case .location: return FieldType(.location)
        case .asset: return FieldType(.asset)
        case .list(let element, _): return FieldType(element, list: true)
        }
    }

    /// The assets the value holds (an asset, or the elements of an asset list).
    public var assets: [AssetValue] {
        switch self {
        case .asset(let asset): return [asset]
        case .list(.asset, let elements): return elements.flatMap(\.assets)
        default: return []
        }
    }
}

/// Limits on field values.
public enum FieldLimits {
    /// Largest encoded record (fields only, without assets), like CloudKit's 1 MB.
    public static let maximumRecordBytes = 1_000_000
    /// Most elements in one list field.
    public static let maximumListCount = 10_000
    /// Most fields in one record.
    public static let maximumFieldCount = 1_000
}

extension FieldValue {
    static let locationKeys: Set<String> = ["latitude", "longitude", "horizontalAccuracy", "verticalAccuracy", "altitude", "speed", "course", "timestamp"]

    /// Decodes a CKWS field-value dictionary `{"value": …, "type"?: …}`.
    ///
    /// - Parameters:
    ///   - json: the dictionary.
    ///   - field: the field's name, for error messages.
    ///   - knownType: the field's type in the schema, used when `type` is absent and checked when present.
    /// - Returns: the value, or `nil` when `value` is `null` (the field is being removed).
    public static func decode(_ json: JSON, field: String, knownType: FieldType?) throws(StratusError) -> FieldValue? {
        guard let members = json.objectValue else {
            throw .badRequest("field '\(field)' must be a field-value dictionary {\"value\": …, \"type\": …}, not \(json.kindName)")
        }
        guard let value = members["value"] else {
            throw .badRequest("field '\(field)' has no 'value'")
        }
        if case .null = value { return nil }
        var declared: FieldType?
        var genericList = false
        if let typeJSON = members["type"], typeJSON != .null {
            guard let name = typeJSON.stringValue else { throw .badRequest("the type of field '\(field)' must be a string") }
            if name == "LIST" || name == "UNKNOWN_LIST" {
                genericList = true
            } else {
                guard let parsed = FieldType(wireName: name) else {
                    throw .badRequest("field '\(field)' has unknown type '\(Names.printable(name))'")
                }
                declared = parsed
            }
        }
        if let declared, let knownType, declared != knownType {
            throw .badRequest("field '\(field)' is \(knownType.wireName) in the schema, but the value is \(declared.wireName)")
        }
        let type: FieldType
        if let resolved = declared ?? knownType {
            type = resolved
        } else {
            type = try inferType(value, field: field, listHint: genericList)
        }
        if genericList, !type.isList {
            throw .badRequest("field '\(field)' is \(type.wireName) in the schema, but the value is a list")
        }
        return try decode(value, as: type, field: field)
    }

    /// Infers a type from a JSON value's shape (number → INT64 or DOUBLE, string → STRING,
    /// object with `latitude` → LOCATION, object with `recordName` → REFERENCE, array → list of the first element's type).
    static func inferType(_ value: JSON, field: String, listHint: Bool) throws(StratusError) -> FieldType {
        switch value {
        case .array(let elements):
            guard let first = elements.first else {
                throw .badRequest("field '\(field)' is an empty list of unknown type; give its type, e.g. \"STRING_LIST\"")
            }
            let element = try inferType(first, field: field, listHint: false)
            if element.isList { throw .badRequest("field '\(field)' is a list of lists, which CloudKit does not support") }
            return FieldType(element.scalar, list: true)
        default:
            if listHint { throw .badRequest("field '\(field)' is typed LIST but its value is not an array") }
            switch value {
            case .int: return FieldType(.int64)
            case .double: return FieldType(.double)
            case .string: return FieldType(.string)
            case .bool: throw .badRequest("field '\(field)' is a boolean; CloudKit has no boolean type, use INT64 0 or 1")
            case .object(let members):
                if members["latitude"] != nil { return FieldType(.location) }
                if members["fileChecksum"] != nil || members["receipt"] != nil { return FieldType(.asset) }
                if members["recordName"] != nil { return FieldType(.reference) }
                throw .badRequest("field '\(field)' has an object value of unknown kind; give its type")
            default:
                throw .badRequest("field '\(field)' has a value of unknown type; give its type")
            }
        }
    }

    /// Decodes `value` as `type`.
    public static func decode(_ value: JSON, as type: FieldType, field: String) throws(StratusError) -> FieldValue {
        if type.isList {
            guard let elements = value.arrayValue else {
                throw .badRequest("field '\(field)' is \(type.wireName), so its value must be an array, not \(value.kindName)")
            }
            guard elements.count <= FieldLimits.maximumListCount else {
                throw .badRequest("field '\(field)' has \(elements.count) elements; at most \(FieldLimits.maximumListCount) are allowed")
            }
            var decoded: [FieldValue] = []
            decoded.reserveCapacity(elements.count)
            for element in elements {
                decoded.append(try decodeScalar(element, as: type.scalar, field: field))
            }
            return .list(type.scalar, decoded)
        }
        return try decodeScalar(value, as: type.scalar, field: field)
    }

    static func decodeScalar(_ value: JSON, as scalar: ScalarType, field: String) throws(StratusError) -> FieldValue {
        func mismatch() -> StratusError {
            .badRequest("field '\(field)' is \(scalar.rawValue), but the value is \(value.kindName)")
        }
        switch scalar {
        case .string:
            guard case .string(let text) = value else { throw mismatch() }
            if text.containsNUL { throw .badRequest("field '\(field)' contains a NUL character (U+0000), which Stratus does not store") }
            return .string(text)
        case .int64:
            return .int64(try integer(value, field: field, scalar: scalar))
        case .timestamp:
            return .timestamp(try integer(value, field: field, scalar: scalar))
        case .double:
            switch value {
            case .double(let number): return .double(number)
            case .int(let number): return .double(Double(number))
            case .string(let text):
                guard let number = Double(text), number.isFinite else { throw mismatch() }
                return .double(number)
            default: throw mismatch()
            }
        case .bytes:
            guard case .string(let text) = value else { throw mismatch() }
            guard let data = Data(base64Encoded: text) else {
                throw .badRequest("field '\(field)' is BYTES but its value is not valid base64")
            }
            return .bytes(data.base64EncodedString())
        case .reference:
            return .reference(try decodeReference(value, field: field, requireAction: false))
        case .location:
            guard let members = value.objectValue else { throw mismatch() }
            var location: [String: Double] = [:]
            for (key, member) in members {
                guard locationKeys.contains(key) else { continue }
                switch member {
                case .int(let number): location[key] = Double(number)
                case .double(let number): location[key] = number
                case .null: continue
                default: throw .badRequest("field '\(field)': location member '\(key)' must be a number")
                }
            }
            guard let latitude = location["latitude"], let longitude = location["longitude"] else {
                throw .badRequest("field '\(field)' is a LOCATION and needs numeric 'latitude' and 'longitude'")
            }
            guard (-90...90).contains(latitude), (-180...180).contains(longitude) else {
                throw .badRequest("field '\(field)': latitude must be within ±90 and longitude within ±180")
            }
            return .location(location)
        case .asset:
            guard let members = value.objectValue else {
                throw .badRequest("field '\(field)' is an ASSETID and needs the dictionary assets/upload's upload returned ({\"fileChecksum\", \"size\", \"receipt\"}), not \(value.kindName)")
            }
            guard let checksum = members["fileChecksum"]?.stringValue, AssetValue.digest(of: checksum) != nil else {
                throw .badRequest("field '\(field)': an asset needs the 'fileChecksum' its upload returned (base64 of a SHA-256)")
            }
            guard case .int(let size) = members["size"] ?? .null, size >= 0 else {
                throw .badRequest("field '\(field)': an asset needs the 'size' its upload returned, a whole number of bytes")
            }
            var receipt: String?
            if let receiptJSON = members["receipt"], receiptJSON != .null {
                guard let text = receiptJSON.stringValue, !text.isEmpty, text.utf8.count <= 4096 else {
                    throw .badRequest("field '\(field)': an asset's 'receipt' must be the string its upload returned")
                }
                receipt = text
            }
            return .asset(AssetValue(fileChecksum: checksum, size: size, receipt: receipt))
        }
    }

    static func integer(_ value: JSON, field: String, scalar: ScalarType) throws(StratusError) -> Int64 {
        switch value {
        case .int(let number): return number
        case .double(let number):
            guard number == number.rounded(), abs(number) <= 9_007_199_254_740_992 else {
                throw .badRequest("field '\(field)' is \(scalar.rawValue) and needs a whole number, not \(number)")
            }
            return Int64(number)
        case .string(let text):
            guard let number = Int64(text) else {
                throw .badRequest("field '\(field)' is \(scalar.rawValue) and needs a whole number in the signed 64-bit range")
            }
            return number
        default:
            throw .badRequest("field '\(field)' is \(scalar.rawValue), but the value is \(value.kindName)")
        }
    }

    /// Decodes a reference dictionary `{recordName, zoneID?, action?}`.
    public static func decodeReference(_ value: JSON, field: String, requireAction: Bool) throws(StratusError) -> Reference {
        guard let members = value.objectValue else {
            throw .badRequest("field '\(field)' is a REFERENCE and needs a dictionary {\"recordName\": …}, not \(value.kindName)")
        }
        guard let name = members["recordName"]?.stringValue else {
            throw .badRequest("field '\(field)': a reference needs a string 'recordName'")
        }
        try Names.validateRecordName(name)
        var action = Reference.Action.none
        if let actionJSON = members["action"], actionJSON != .null {
            guard let text = actionJSON.stringValue, let parsed = Reference.Action(rawValue: text) else {
                throw .badRequest("field '\(field)': reference action must be NONE, DELETE_SELF or VALIDATE")
            }
            action = parsed
        }
        var zoneName: String?
        var owner: String?
        if let zone = members["zoneID"], zone != .null {
            guard let zoneName_ = zone["zoneName"]?.stringValue else {
                throw .badRequest("field '\(field)': a reference's zoneID needs a string 'zoneName'")
            }
            zoneName = zoneName_
            owner = zone["ownerRecordName"]?.stringValue
        }
        return Reference(recordName: name, zoneName: zoneName, ownerRecordName: owner, action: action)
    }

    /// The length of `JSONWriter.bytes(wireJSON())`, counted without storing it (the record size
    /// limit is checked on every field written, and a 100-record batch spent a sixth of its time
    /// encoding fields only to count them).
    public var wireByteCount: Int {
        var counter = JSONByteCount()
        writeWire(into: &counter)
        return counter.count
    }

    /// Appends the bytes `JSONWriter` writes for `wireJSON()`, without building it: stored
    /// records are encoded this way on every write.
    public func writeWire<Out: JSONOutput>(into out: inout Out) {
        out.append(contentsOf: #"{"type":"#.utf8)
        JSONWriter.writeString(type.wireName, into: &out)
        out.append(contentsOf: #","value":"#.utf8)
        switch self {
        case .string(let text), .bytes(let text): JSONWriter.writeString(text, into: &out)
        case .int64(let number), .timestamp(let number): out.append(contentsOf: String(number).utf8)
        case .double(let number): JSONWriter.writeDouble(number, into: &out)
        default: JSONWriter.write(valueJSON(), into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// The wire encoding `{"type": …, "value": …}`.
    public func wireJSON(numbersAsStrings: Bool = false) -> JSON {
        .object(["type": .string(type.wireName), "value": valueJSON(numbersAsStrings: numbersAsStrings)])
    }

    /// The wire encoding of the bare value.
    public func valueJSON(numbersAsStrings: Bool = false) -> JSON {
        switch self {
        case .string(let text): return .string(text)
        case .int64(let number), .timestamp(let number):
            return numbersAsStrings ? .string(String(number)) : .int(number)
        case .double(let number):
            if numbersAsStrings {
                var out: [UInt8] = []
                JSONWriter.writeDouble(number, into: &out)
                return .string(String(decoding: out, as: UTF8.self))
            }
            return .double(number)
        case .bytes(let base64): return .string(base64)
        case .reference(let reference):
            var members: [String: JSON] = ["recordName": .string(reference.recordName), "action": .string(reference.action.rawValue)]
            if let zoneName = reference.zoneName {
                var zone: [String: JSON] = ["zoneName": .string(zoneName)]
                if let owner = reference.ownerRecordName { zone["ownerRecordName"] = .string(owner) }
                members["zoneID"] = .object(zone)
            }
            return .object(members)
        case .location(let location):
            var members: [String: JSON] = [:]
            for (key, number) in location {
                members[key] = key == "timestamp" && number == number.rounded() ? .int(Int64(number)) : .double(number)
            }
            return .object(members)
        case .asset(let asset):
            return .object(["fileChecksum": .string(asset.fileChecksum), "size": .int(asset.size)])
        case .list(_, let elements):
            return .array(elements.map { $0.valueJSON(numbersAsStrings: numbersAsStrings) })
        }
    }

    /// The wire encoding with each asset's `downloadURL` (`assetURL`), as records are read.
    public func wireJSON(numbersAsStrings: Bool, assetURL: (AssetValue) -> String) -> JSON {
        guard !assets.isEmpty else { return wireJSON(numbersAsStrings: numbersAsStrings) }
        func withURL(_ value: FieldValue) -> JSON {
            switch value {
            case .asset(let asset):
                return .object(["fileChecksum": .string(asset.fileChecksum), "size": .int(asset.size), "downloadURL": .string(assetURL(asset))])
            case .list(_, let elements):
                return .array(elements.map(withURL))
            default:
                return value.valueJSON(numbersAsStrings: numbersAsStrings)
            }
        }
        return .object(["type": .string(type.wireName), "value": withURL(self)])
    }
}
