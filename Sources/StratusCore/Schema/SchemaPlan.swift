/// One difference between two schemas, classified for a deploy (development → production).
public struct SchemaChange: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case addedType = "added type"
        case addedField = "added field"
        case addedIndex = "added index"
        case removedIndex = "removed index"
        case changedGrant = "changed grant"
        case addedRole = "added role"
        case removedRole = "removed role"
        case removedType = "removed type"
        case removedField = "removed field"
        case changedFieldType = "changed field type"
    }

    public var kind: Kind
    public var recordType: String?
    public var field: String?
    /// What changes, in words (`title STRING QUERYABLE`, `Moderator: READ → READ, WRITE`).
    public var detail: String
    /// Index options an `addedIndex` adds (records to backfill).
    public var addedIndexes: [String]

    /// Production is additive only: removing a type or field, or changing a field's type, could lose data.
    public var isRefused: Bool {
        kind == .removedType || kind == .removedField || kind == .changedFieldType
    }

    public init(kind: Kind, recordType: String? = nil, field: String? = nil, detail: String, addedIndexes: [String] = []) {
        self.kind = kind
        self.recordType = recordType
        self.field = field
        self.detail = detail
        self.addedIndexes = addedIndexes
    }
}

/// What deploying one schema over another does.
public struct SchemaPlan: Sendable, Equatable {
    public var changes: [SchemaChange]

    public var refused: [SchemaChange] { changes.filter(\.isRefused) }
    public var isEmpty: Bool { changes.isEmpty }

    /// Fields whose production index entries must be built: (record type, field), for added indexes.
    public var backfills: [(recordType: String, field: String)] {
        changes.compactMap { change in
            guard change.kind == .addedIndex, let type = change.recordType, let field = change.field else { return nil }
            return (type, field)
        }
    }

    public static func == (a: SchemaPlan, b: SchemaPlan) -> Bool { a.changes == b.changes }

    /// The changes that turn `production` into `development`.
    public static func between(production: Schema, development: Schema) -> SchemaPlan {
        var changes: [SchemaChange] = []
        for role in development.roles.subtracting(production.roles).sorted() {
            changes.append(SchemaChange(kind: .addedRole, detail: role))
        }
        for role in production.roles.subtracting(development.roles).sorted() {
            changes.append(SchemaChange(kind: .removedRole, detail: role))
        }
        let typeNames = Set(production.recordTypes.keys).union(development.recordTypes.keys).sorted()
        for typeName in typeNames {
            let before = production.recordTypes[typeName]
            let after = development.recordTypes[typeName]
            guard let after else {
                changes.append(SchemaChange(kind: .removedType, recordType: typeName, detail: "\(typeName) (production is additive only: deleting a type would lose its records)"))
                continue
            }
            if before == nil {
                changes.append(SchemaChange(kind: .addedType, recordType: typeName, detail: typeName))
            }
            let old = before ?? [:]
            for fieldName in Set(old.keys).union(after.keys).sorted() {
                let was = old[fieldName]
                let now = after[fieldName]
                switch (was, now) {
                case (let was?, nil):
                    changes.append(SchemaChange(kind: .removedField, recordType: typeName, field: fieldName,
                                                detail: "\(typeName).\(fieldName) \(SchemaLanguage.typeText(was)) (production is additive only)"))
                case (nil, let now?):
                    changes.append(SchemaChange(kind: .addedField, recordType: typeName, field: fieldName,
                                                detail: "\(typeName).\(fieldName) \(describe(now))"))
                case (let was?, let now?):
                    if SchemaLanguage.typeText(was) != SchemaLanguage.typeText(now) {
                        changes.append(SchemaChange(kind: .changedFieldType, recordType: typeName, field: fieldName,
                                                    detail: "\(typeName).\(fieldName) \(SchemaLanguage.typeText(was)) → \(SchemaLanguage.typeText(now)) (a field's type never changes)"))
                        continue
                    }
                    let added = indexes(now).filter { !indexes(was).contains($0) }
                    let removed = indexes(was).filter { !indexes(now).contains($0) }
                    if !added.isEmpty {
                        changes.append(SchemaChange(kind: .addedIndex, recordType: typeName, field: fieldName,
                                                    detail: "\(typeName).\(fieldName) \(added.joined(separator: " "))", addedIndexes: added))
                    }
                    if !removed.isEmpty {
                        changes.append(SchemaChange(kind: .removedIndex, recordType: typeName, field: fieldName,
                                                    detail: "\(typeName).\(fieldName) \(removed.joined(separator: " "))"))
                    }
                case (nil, nil):
                    break
                }
            }
            let oldGrants = production.grants[typeName] ?? [:]
            let newGrants = development.grants[typeName] ?? [:]
            for role in Set(oldGrants.keys).union(newGrants.keys).sorted() where (oldGrants[role] ?? []) != (newGrants[role] ?? []) {
                let from = (oldGrants[role] ?? []).sorted().map(\.rawValue).joined(separator: ", ")
                let to = (newGrants[role] ?? []).sorted().map(\.rawValue).joined(separator: ", ")
                changes.append(SchemaChange(kind: .changedGrant, recordType: typeName,
                                            detail: "\(typeName): \(role) \(from.isEmpty ? "none" : from) → \(to.isEmpty ? "none" : to)"))
            }
        }
        return SchemaPlan(changes: changes)
    }

    static func indexes(_ field: FieldSchema) -> [String] {
        var out: [String] = []
        if field.queryable { out.append("QUERYABLE") }
        if field.sortable { out.append("SORTABLE") }
        if field.searchable { out.append("SEARCHABLE") }
        return out
    }

    static func describe(_ field: FieldSchema) -> String {
        ([SchemaLanguage.typeText(field)] + indexes(field)).joined(separator: " ")
    }

    /// The plan as the CLI prints it: one line per change, refused ones marked.
    public func text(counts: [String: Int64] = [:]) -> String {
        guard !changes.isEmpty else { return "  (no changes: production already matches development)" }
        return changes.map { change in
            let mark = change.isRefused ? "! REFUSED" : change.kind == .removedIndex || change.kind == .removedRole ? "-" : change.kind == .changedGrant ? "~" : "+"
            var line = "  \(mark) \(change.kind.rawValue): \(change.detail)"
            if change.kind == .addedIndex, let type = change.recordType, let count = counts[type] {
                line += " (builds index entries for \(count) production record\(count == 1 ? "" : "s"))"
            }
            return line
        }.joined(separator: "\n")
    }

    /// The plan as JSON, for the management API and `--json`.
    public func json(counts: [String: Int64] = [:]) -> JSON {
        .array(changes.map { change in
            var members: [String: JSON] = ["kind": .string(change.kind.rawValue), "detail": .string(change.detail), "refused": .bool(change.isRefused)]
            if let type = change.recordType { members["recordType"] = .string(type) }
            if let field = change.field { members["field"] = .string(field) }
            if change.kind == .addedIndex, let type = change.recordType, let count = counts[type] { members["backfillRecords"] = .int(count) }
            return .object(members)
        })
    }
}
