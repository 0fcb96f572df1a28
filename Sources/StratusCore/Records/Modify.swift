/// The seven `records/modify` operation types.
public enum OperationType: String, Sendable, CaseIterable {
    case create, update, forceUpdate, replace, forceReplace, delete, forceDelete

    public var needsChangeTag: Bool { self == .update || self == .replace || self == .delete }
    public var isDelete: Bool { self == .delete || self == .forceDelete }
    public var replacesFields: Bool { self == .replace || self == .forceReplace }
}

/// One decoded `records/modify` operation.
public struct ModifyOperation: Sendable {
    public var type: OperationType
    public var recordName: String
    public var recordType: String?
    public var changeTag: String?
    /// The field-value dictionaries as sent; typed by ``ModifyPlanner`` once the record's type is known.
    public var rawFields: [String: JSON]
    /// New values; `nil` removes the field. Filled by ``ModifyPlanner``.
    public var fields: [String: FieldValue?]
    public var desiredKeys: Set<String>?
    /// What the operation does to the record's parent.
    public var parent: ParentChange
    /// `createShortGUID`: give the record a short GUID if it has none.
    public var createShortGUID: Bool
    /// The share keys of a `cloudkit.share` record.
    public var share: ShareSpec?

    /// A `parent` key: absent (keep the record's parent), `null` (no parent), or a record name.
    public enum ParentChange: Sendable, Equatable {
        case keep, clear, set(String)
    }

    public init(type: OperationType, recordName: String, recordType: String? = nil, changeTag: String? = nil,
                rawFields: [String: JSON] = [:], fields: [String: FieldValue?] = [:], desiredKeys: Set<String>? = nil,
                parent: ParentChange = .keep, createShortGUID: Bool = false, share: ShareSpec? = nil) {
        self.type = type
        self.parent = parent
        self.createShortGUID = createShortGUID
        self.share = share
        self.recordName = recordName
        self.recordType = recordType
        self.changeTag = changeTag
        self.rawFields = rawFields
        self.fields = fields
        self.desiredKeys = desiredKeys
    }
}

/// A decoded `records/modify` request. Operations that could not be decoded keep their slot
/// as a per-item error, so the response still has one entry per operation.
public struct ModifyRequest: Sendable {
    public static let maximumOperations = 200

    public var operations: [Result<ModifyOperation, StratusError>]
    /// The record name of each slot (known even for most failed decodes).
    public var recordNames: [String?]
    public var atomic: Bool
    public var desiredKeys: Set<String>?
    public var numbersAsStrings: Bool
    /// Checks the receipt of each asset saved (set by the server for the database written);
    /// without it, no new asset may be attached.
    public var receipts: ReceiptCheck?

    /// Checks an asset's receipt for a field of a record type: `nil` when the asset may be saved
    /// there, else why not.
    public typealias ReceiptCheck = @Sendable (_ asset: AssetValue, _ recordType: String, _ field: String) -> StratusError?

    /// The keys to return for operation `index`: its own `desiredKeys`, else the request's.
    public func desiredKeys(ofOperation index: Int) -> Set<String>? {
        if case .success(let operation) = operations[index], let own = operation.desiredKeys { return own }
        return desiredKeys
    }
    /// Decodes the structure of a `records/modify` body. Field values stay raw until
    /// ``ModifyPlanner/plan(_:current:schema:allowSchemaChanges:caller:now:access:)`` knows each record's type.
    ///
    /// - Parameters:
    ///   - body: the request JSON.
    ///   - newRecordName: makes a name for records created without one.
    public static func decode(_ body: JSON, newRecordName: () -> String) throws(StratusError) -> ModifyRequest {
        guard let members = body.objectValue else { throw .badRequest("the body must be a JSON object, not \(body.kindName)") }
        guard let opsJSON = members["operations"] else { throw .badRequest("missing required key 'operations'") }
        guard let ops = opsJSON.arrayValue else { throw .badRequest("'operations' must be an array") }
        guard !ops.isEmpty else { throw .badRequest("'operations' is empty") }
        guard ops.count <= maximumOperations else {
            throw .badRequest("\(ops.count) operations in one request; at most \(maximumOperations) are allowed")
        }
        let atomic = try Wire.bool(members["atomic"], key: "atomic") ?? true
        let numbersAsStrings = try Wire.bool(members["numbersAsStrings"], key: "numbersAsStrings") ?? false
        let desiredKeys = try Wire.stringSet(members["desiredKeys"], key: "desiredKeys")

        var results: [Result<ModifyOperation, StratusError>] = []
        var names: [String?] = []
        var seen: Set<String> = []
        for (index, opJSON) in ops.enumerated() {
            guard let op = opJSON.objectValue else { throw .badRequest("operations[\(index)] must be an object") }
            guard let typeText = op["operationType"]?.stringValue else {
                throw .badRequest("operations[\(index)] needs a string 'operationType'")
            }
            guard let type = OperationType(rawValue: typeText) else {
                throw .badRequest("operations[\(index)] has unknown operationType '\(Names.printable(typeText))'; use one of \(OperationType.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            guard let record = op["record"]?.objectValue else {
                throw .badRequest("operations[\(index)] needs a 'record' object")
            }
            var recordName: String
            if let nameJSON = record["recordName"], nameJSON != .null {
                guard let name = nameJSON.stringValue else {
                    throw .badRequest("operations[\(index)].record.recordName must be a string, not \(nameJSON.kindName)")
                }
                recordName = name
            } else if type == .create || type == .forceUpdate || type == .forceReplace {
                recordName = newRecordName()
            } else {
                throw .badRequest("operations[\(index)] (\(type.rawValue)) needs record.recordName")
            }
            try Names.validateRecordName(recordName)
            guard seen.insert(recordName).inserted else {
                throw .badRequest("record '\(Names.printable(recordName))' appears in more than one operation; send one operation per record")
            }
            names.append(recordName)
            let opDesired = try Wire.stringSet(op["desiredKeys"], key: "operations[\(index)].desiredKeys")
            do throws(StratusError) {
                let decoded = try decodeOperation(type: type, recordName: recordName, record: record, desiredKeys: opDesired)
                results.append(.success(decoded))
            } catch {
                results.append(.failure(error))
            }
        }
        return ModifyRequest(operations: results, recordNames: names, atomic: atomic, desiredKeys: desiredKeys,
                             numbersAsStrings: numbersAsStrings)
    }

    static func decodeOperation(type: OperationType, recordName: String, record: [String: JSON],
                                desiredKeys: Set<String>?) throws(StratusError) -> ModifyOperation {
        var recordType: String?
        if let typeJSON = record["recordType"], typeJSON != .null {
            guard let text = typeJSON.stringValue else { throw .badRequest("recordType must be a string") }
            if text != Record.shareType { try Names.validateRecordType(text) }
            recordType = text
        }
        var changeTag: String?
        if let tagJSON = record["recordChangeTag"], tagJSON != .null {
            guard let text = tagJSON.stringValue else { throw .badRequest("recordChangeTag must be a string") }
            changeTag = text
        }
        if type.needsChangeTag, changeTag == nil {
            throw .badRequest("\(type.rawValue) of '\(Names.printable(recordName))' needs its recordChangeTag; use force\(type.rawValue.prefix(1).uppercased() + type.rawValue.dropFirst()) to skip the check")
        }
        if type == .create, recordType == nil {
            throw .badRequest("create of '\(Names.printable(recordName))' needs a recordType")
        }
        var rawFields: [String: JSON] = [:]
        if !type.isDelete, let fieldsJSON = record["fields"], fieldsJSON != .null {
            guard let members = fieldsJSON.objectValue else {
                throw .badRequest("record.fields must be an object mapping field names to {\"value\": …}, not \(fieldsJSON.kindName)")
            }
            guard members.count <= FieldLimits.maximumFieldCount else {
                throw .badRequest("a record may have at most \(FieldLimits.maximumFieldCount) fields")
            }
            for name in members.keys where !ShareSpec.isShareField(name) { try Names.validateFieldName(name) }
            rawFields = members
        }
        var parent = ModifyOperation.ParentChange.keep
        if let parentJSON = record["parent"], !type.isDelete {
            if parentJSON == .null {
                parent = .clear
            } else {
                guard let name = parentJSON["recordName"]?.stringValue else {
                    throw .badRequest("parent of '\(Names.printable(recordName))' must be {\"recordName\": …} or null")
                }
                try Names.validateRecordName(name)
                guard name != recordName else { throw .badRequest("record '\(Names.printable(recordName))' cannot be its own parent") }
                parent = .set(name)
            }
        }
        let createShortGUID = try Wire.bool(record["createShortGUID"], key: "createShortGUID") ?? false
        let share = type.isDelete ? nil : try ShareSpec.decode(record, recordName: recordName)
        return ModifyOperation(type: type, recordName: recordName, recordType: recordType, changeTag: changeTag,
                               rawFields: rawFields, desiredKeys: desiredKeys, parent: parent, createShortGUID: createShortGUID,
                               share: share)
    }
}

/// What one operation does to the store, decided by ``ModifyPlanner``.
public enum PlannedWrite: Sendable {
    /// Write this state (insert, revive a tombstone, or update).
    case save(Record, isNew: Bool)
    /// Turn the live record into a tombstone.
    case delete(recordName: String, recordType: String)
    /// Nothing to do (a `forceDelete` of a missing record); answered as deleted.
    case alreadyAbsent(recordName: String)
}

/// Decides the outcome of each modify operation from the current records. Pure: the store locks
/// and loads the current rows, asks the planner, then writes what it returns.
public enum ModifyPlanner {
    /// The plan of a whole request.
    public struct BatchPlan: Sendable {
        /// One outcome per operation slot, in request order.
        public var outcomes: [Result<PlannedWrite, StratusError>]
        /// The operations with typed fields (for `desiredKeys`), in request order; `nil` where decoding failed.
        public var operations: [ModifyOperation?]
        /// Schema the successful operations add just-in-time, in first-seen order.
        public var schemaAdditions: [SchemaAddition]
        /// The schema including those additions.
        public var schema: Schema
    }

    /// Plans every operation of a request: types each operation's fields against the schema
    /// (extending it in development), then decides each outcome from the current records.
    ///
    /// - Parameters:
    ///   - request: the decoded request.
    ///   - current: current rows (live or tombstones) by record name.
    ///   - schema: the container-environment schema.
    ///   - allowSchemaChanges: whether unknown types and fields are added (development) or refused (production).
    ///   - caller: the writer's user record name.
    ///   - now: milliseconds since the epoch.
    ///   - render: renders the server record carried by CONFLICT and EXISTS.
    ///   - access: the caller's security roles in the public database; `nil` elsewhere (a private
    ///     database is its owner's alone).
    public static func plan(_ request: ModifyRequest, current: [String: Record], schema: Schema, allowSchemaChanges: Bool,
                            caller: UserID, now: Int64, access: RecordAccess? = nil) -> BatchPlan {
        var pending = schema
        var additions: [SchemaAddition] = []
        var outcomes: [Result<PlannedWrite, StratusError>] = []
        var operations: [ModifyOperation?] = []
        for slot in request.operations {
            guard case .success(var op) = slot else {
                if case .failure(let error) = slot { outcomes.append(.failure(error)) }
                operations.append(nil)
                continue
            }
            let existing = current[op.recordName]
            let live = existing.flatMap { $0.deleted ? nil : $0 }
            var trial = pending
            var trialAdditions: [SchemaAddition] = []
            do throws(StratusError) {
                if !op.type.isDelete {
                    let recordType = op.recordType ?? live?.recordType
                    try typeFields(&op, recordType: recordType, schema: &trial, additions: &trialAdditions,
                                   allowSchemaChanges: allowSchemaChanges)
                    try checkAssets(&op, recordType: recordType, live: live, receipts: request.receipts)
                }
                if access != nil, (op.recordType ?? live?.recordType) == Record.shareType {
                    throw .badRequest("shares live in a custom zone of the owner's private database, not in the public database")
                }
                if let access, let denial = denial(of: op, live: live, access: access, schema: trial) {
                    throw denial
                }
                var outcome = plan(op, current: existing, caller: caller, now: now)
                if let access, let live, case .failure(let error) = outcome, error.serverRecord != nil,
                   !access.allows(.read, on: live.recordType, creator: live.createdBy, in: trial) {
                    // EXISTS or CONFLICT carry the stored record: not to a caller who may not read it.
                    outcome = .failure(StratusError(error.code, error.reason))
                }
                if case .success = outcome {
                    pending = trial
                    additions += trialAdditions
                }
                outcomes.append(outcome)
                operations.append(op)
            } catch {
                outcomes.append(.failure(error))
                operations.append(nil)
            }
        }
        return BatchPlan(outcomes: outcomes, operations: operations, schemaAdditions: additions, schema: pending)
    }

    /// The refusal of `op` by the caller's security roles, or `nil` when they allow it (or when
    /// there is nothing to allow: a change or delete of a missing record, answered NOT_FOUND).
    /// Creating needs CREATE on the type; changing or deleting an existing record needs WRITE,
    /// which `_creator` holds only on the records its user created.
    static func denial(of op: ModifyOperation, live: Record?, access: RecordAccess, schema: Schema) -> StratusError? {
        if let live, op.type != .create {
            guard access.allows(.write, on: live.recordType, creator: live.createdBy, in: schema) else {
                return RecordAccess.denial(.write, on: live.recordType, recordName: op.recordName, in: schema)
            }
            return nil
        }
        let creates = op.type == .create || op.type == .forceUpdate || op.type == .forceReplace
        guard creates, let recordType = op.recordType ?? live?.recordType else { return nil }
        guard access.allows(.create, on: recordType, creator: nil, in: schema) else {
            return RecordAccess.denial(.create, on: recordType, recordName: op.recordName, in: schema)
        }
        return nil
    }

    /// Lets an operation save only assets it may: one with a receipt the server accepts for this
    /// record type and field, or one the record already holds (a client saving back what it read,
    /// which carries no receipt). Any other checksum could name another user's bytes.
    static func checkAssets(_ op: inout ModifyOperation, recordType: String?, live: Record?,
                            receipts: ModifyRequest.ReceiptCheck?) throws(StratusError) {
        guard op.fields.values.contains(where: { !($0?.assets.isEmpty ?? true) }) else { return }
        let held = Set(live?.fields.values.flatMap(\.assets).map(\.fileChecksum) ?? [])
        for (name, value) in op.fields {
            guard let value, !value.assets.isEmpty else { continue }
            func checked(_ value: FieldValue) throws(StratusError) -> FieldValue {
                switch value {
                case .asset(var asset):
                    if let receipt = asset.receipt {
                        guard let receipts, let recordType else {
                            throw .badRequest("field '\(name)': this database does not take asset receipts")
                        }
                        _ = receipt
                        if let refusal = receipts(asset, recordType, name) { throw refusal }
                        asset.receipt = nil
                        asset.verified = true
                    } else if !held.contains(asset.fileChecksum) {
                        throw .badRequest("field '\(name)': an asset is saved with the 'receipt' its upload (assets/upload) or assets/rereference returned; this record does not hold the asset \(asset.fileChecksum)")
                    }
                    return .asset(asset)
                case .list(let element, let elements):
                    var out: [FieldValue] = []
                    out.reserveCapacity(elements.count)
                    for element in elements { out.append(try checked(element)) }
                    return .list(element, out)
                default:
                    return value
                }
            }
            op.fields[name] = .some(try checked(value))
        }
    }

    /// Types the raw fields of `op` for `recordType`, extending `schema` when allowed.
    static func typeFields(_ op: inout ModifyOperation, recordType: String?, schema: inout Schema,
                           additions: inout [SchemaAddition], allowSchemaChanges: Bool) throws(StratusError) {
        guard let recordType else {
            // No type known: the planner answers NOT_FOUND or asks for a recordType.
            return
        }
        if recordType == Record.shareType {
            // A share's fields are the system's, in every environment: nothing joins the schema.
            var typed: [String: FieldValue?] = [:]
            for (name, valueJSON) in op.rawFields {
                guard let known = ShareSpec.fields[name] else {
                    throw .badRequest("a cloudkit.share record has no field '\(Names.printable(name))'; its fields are \(ShareSpec.fields.keys.sorted().joined(separator: ", "))")
                }
                typed[name] = .some(try FieldValue.decode(valueJSON, field: name, knownType: known))
            }
            op.fields = typed
            return
        }
        if op.share != nil {
            throw .badRequest("forRecord, publicPermission and participants belong to cloudkit.share records, not to a '\(recordType)'")
        }
        if let name = op.rawFields.keys.first(where: ShareSpec.isShareField) {
            throw .badRequest("field '\(name)' belongs to cloudkit.share records; a '\(recordType)' cannot have it")
        }
        if schema.recordTypes[recordType] == nil {
            guard allowSchemaChanges else {
                throw .badRequest("unknown record type '\(recordType)' in the production schema; create it in development and deploy the schema")
            }
            schema.recordTypes[recordType] = [:]
            schema.grants[recordType] = SystemRole.defaultGrants(for: recordType)
            additions.append(SchemaAddition(recordType: recordType, field: nil, type: nil))
        }
        var typed: [String: FieldValue?] = [:]
        var encodedSize = 0
        for (name, valueJSON) in op.rawFields {
            let known = schema.field(name, of: recordType)?.type
            let value = try FieldValue.decode(valueJSON, field: name, knownType: known)
            if let value, known == nil {
                guard allowSchemaChanges else {
                    throw .badRequest("record type '\(recordType)' has no field '\(name)' in the production schema; add it in development and deploy the schema")
                }
                schema.recordTypes[recordType]![name] = FieldSchema.justInTime(value.type)
                additions.append(SchemaAddition(recordType: recordType, field: name, type: value.type))
            }
            if let value { encodedSize += value.wireByteCount + name.utf8.count }
            typed[name] = .some(value)
        }
        guard encodedSize <= FieldLimits.maximumRecordBytes else {
            throw .badRequest("record '\(Names.printable(op.recordName))' is \(encodedSize) bytes; a record may hold at most \(FieldLimits.maximumRecordBytes) bytes of fields")
        }
        op.fields = typed
    }

    /// Plans one operation.
    ///
    /// - Parameters:
    ///   - op: the operation.
    ///   - current: the record's current row (`nil` or a tombstone when it does not exist).
    ///   - caller: the user record name of the writer.
    ///   - now: milliseconds since the epoch.
    public static func plan(_ op: ModifyOperation, current: Record?, caller: UserID, now: Int64) -> Result<PlannedWrite, StratusError> {
        let live = current.flatMap { $0.deleted ? nil : $0 }
        if let live, let recordType = op.recordType, recordType != live.recordType, op.type != .create {
            return .failure(.badRequest("record '\(Names.printable(op.recordName))' is a '\(live.recordType)'; its recordType cannot change to '\(recordType)'"))
        }
        if op.type.needsChangeTag, let live, op.changeTag != live.changeTag {
            return .failure(StratusError(.conflict, "record '\(Names.printable(op.recordName))' was changed by someone else (server tag \(live.changeTag), yours \(op.changeTag ?? "none")); fetch it, merge and retry",
                                         serverRecord: live))
        }
        switch op.type {
        case .create:
            if let live {
                return .failure(StratusError(.exists, "record '\(Names.printable(op.recordName))' already exists", serverRecord: live))
            }
            return .success(.save(newRecord(op, caller: caller, now: now, base: current), isNew: current == nil))
        case .update, .replace:
            guard var record = live else {
                return .failure(StratusError(.notFound, "record '\(Names.printable(op.recordName))' does not exist"))
            }
            apply(op, to: &record, caller: caller, now: now)
            return .success(.save(record, isNew: false))
        case .forceUpdate, .forceReplace:
            guard var record = live else {
                guard op.recordType != nil else {
                    return .failure(.badRequest("\(op.type.rawValue) of missing record '\(Names.printable(op.recordName))' needs a recordType to create it"))
                }
                return .success(.save(newRecord(op, caller: caller, now: now, base: current), isNew: current == nil))
            }
            apply(op, to: &record, caller: caller, now: now)
            return .success(.save(record, isNew: false))
        case .delete:
            guard let live else {
                return .failure(StratusError(.notFound, "record '\(Names.printable(op.recordName))' does not exist"))
            }
            return .success(.delete(recordName: live.recordName, recordType: live.recordType))
        case .forceDelete:
            guard let live else { return .success(.alreadyAbsent(recordName: op.recordName)) }
            return .success(.delete(recordName: live.recordName, recordType: live.recordType))
        }
    }

    static func newRecord(_ op: ModifyOperation, caller: UserID, now: Int64, base: Record?) -> Record {
        var fields: [String: FieldValue] = [:]
        for (name, value) in op.fields { if let value { fields[name] = value } }
        var record = Record(recordName: op.recordName, recordType: op.recordType ?? "", changeSeq: 0, fields: fields,
                            createdAt: now, createdBy: caller, modifiedAt: now, modifiedBy: caller)
        if case .set(let parent) = op.parent { record.parent = parent }
        return record
    }

    static func apply(_ op: ModifyOperation, to record: inout Record, caller: UserID, now: Int64) {
        switch op.parent {
        case .keep: break
        case .clear: record.parent = nil
        case .set(let parent): record.parent = parent
        }
        if op.type.replacesFields { record.fields = [:] }
        for (name, value) in op.fields { record.fields[name] = value }
        record.modifiedAt = now
        record.modifiedBy = caller
    }
}

/// Small helpers for reading request JSON with precise errors. A member's name is built only for
/// an error (`records[\(index)].desiredKeys` would otherwise be a new string per record read).
public enum Wire {
    /// An optional boolean member.
    public static func bool(_ json: JSON?, key: @autoclosure () -> String) throws(StratusError) -> Bool? {
        guard let json, json != .null else { return nil }
        guard case .bool(let flag) = json else { throw .badRequest("'\(key())' must be true or false, not \(json.kindName)") }
        return flag
    }

    /// An optional integer member.
    public static func int(_ json: JSON?, key: @autoclosure () -> String) throws(StratusError) -> Int64? {
        guard let json, json != .null else { return nil }
        guard case .int(let number) = json else { throw .badRequest("'\(key())' must be a whole number, not \(json.kindName)") }
        return number
    }

    /// An optional string member.
    public static func string(_ json: JSON?, key: @autoclosure () -> String) throws(StratusError) -> String? {
        guard let json, json != .null else { return nil }
        guard let text = json.stringValue else { throw .badRequest("'\(key())' must be a string, not \(json.kindName)") }
        return text
    }

    /// An optional array-of-strings member, as a set.
    public static func stringSet(_ json: JSON?, key: @autoclosure () -> String) throws(StratusError) -> Set<String>? {
        guard let json, json != .null else { return nil }
        guard let elements = json.arrayValue else { throw .badRequest("'\(key())' must be an array of strings") }
        var out: Set<String> = []
        for element in elements {
            guard let text = element.stringValue else { throw .badRequest("'\(key())' must be an array of strings") }
            out.insert(text)
        }
        return out
    }

    /// The `resultsLimit` member: 1…`maximum`, default `maximum`. Larger values are capped.
    public static func resultsLimit(_ json: JSON?, maximum: Int) throws(StratusError) -> Int {
        guard let value = try int(json, key: "resultsLimit") else { return maximum }
        guard value >= 1 else { throw .badRequest("resultsLimit must be at least 1") }
        return Int(min(value, Int64(maximum)))
    }
}
