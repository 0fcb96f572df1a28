import Foundation

/// A record as stored: system metadata plus typed fields.
public struct Record: Sendable, Equatable {
    public var recordName: String
    public var recordType: String
    /// The change sequence of the record's last write; its base-36 text is the `recordChangeTag`.
    public var changeSeq: Int64
    public var fields: [String: FieldValue]
    /// Milliseconds since the epoch.
    public var createdAt: Int64
    public var createdBy: UserID
    public var modifiedAt: Int64
    public var modifiedBy: UserID
    /// A tombstone left by a delete, kept for the change feeds.
    public var deleted: Bool
    /// The stored field JSON, when the record was read without decoding its fields (read paths):
    /// responses splice it in as is unless they must filter or restyle the fields.
    public var encodedFields: [UInt8]?
    /// The parent record's name (CKWS `parent`): the record belongs to its parent's share hierarchy.
    public var parent: String?
    /// On a shared root record, the name of its `cloudkit.share` record (CKWS `share`).
    public var shareName: String?
    /// The short GUID the record was given (`createShortGUID`, or sharing it); a share carries its root's.
    public var shortGUID: String?
    /// The keys a `cloudkit.share` record's dictionary adds (`participants`, `owner`,
    /// `publicPermission`, `currentUserParticipant`, `url`), filled in for the caller before rendering.
    public var shareKeys: [String: JSON]?
    /// The shared root whose hierarchy holds the record, as stored (never rendered): what a
    /// participant of a hierarchy share may see and write.
    public var shareRoot: String?
    /// The stored size of the field data in bytes (read on write paths, where quotas count it).
    public var storedSize: Int64?

    /// The record type of shares.
    public static let shareType = "cloudkit.share"

    public init(recordName: String, recordType: String, changeSeq: Int64 = 0, fields: [String: FieldValue] = [:],
                createdAt: Int64 = 0, createdBy: UserID = .nobody, modifiedAt: Int64 = 0, modifiedBy: UserID = .nobody, deleted: Bool = false,
                encodedFields: [UInt8]? = nil, parent: String? = nil, shareName: String? = nil, shortGUID: String? = nil) {
        self.encodedFields = encodedFields
        self.parent = parent
        self.shareName = shareName
        self.shortGUID = shortGUID
        self.recordName = recordName
        self.recordType = recordType
        self.changeSeq = changeSeq
        self.fields = fields
        self.createdAt = createdAt
        self.createdBy = createdBy
        self.modifiedAt = modifiedAt
        self.modifiedBy = modifiedBy
        self.deleted = deleted
    }

    /// The distinct assets the record holds (by checksum), in no particular order.
    public var assets: [AssetValue] {
        var seen: [String: AssetValue] = [:]
        for value in fields.values {
            for asset in value.assets where seen[asset.fileChecksum] == nil { seen[asset.fileChecksum] = asset }
        }
        return Array(seen.values)
    }

    /// The bytes of the record's assets, each distinct asset once: what its stored size (and so the
    /// quotas) adds to its field data.
    public var assetBytes: Int64 { assets.reduce(0) { $0 + $1.size } }

    /// The `recordChangeTag` clients see.
    public var changeTag: String { Record.changeTag(for: changeSeq) }

    /// The tag text of a change sequence.
    public static func changeTag(for seq: Int64) -> String { String(seq, radix: 36) }

    /// The change sequence a tag names, or `nil` if it is not one of ours.
    public static func changeSeq(fromTag tag: String) -> Int64? {
        guard !tag.isEmpty, tag.utf8.count <= 13 else { return nil }
        return Int64(tag, radix: 36)
    }

    /// The canonical JSON text of the fields, as stored and as sent on the wire: what `JSONWriter`
    /// writes for an object of each field's `wireJSON()` (keys sorted), written directly.
    public static func encodeFields(_ fields: [String: FieldValue]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(64 * fields.count)
        for (offset, field) in fields.sorted(by: { $0.key < $1.key }).enumerated() {
            if offset > 0 { out.append(UInt8(ascii: ",")) }
            JSONWriter.writeString(field.key, into: &out)
            out.append(UInt8(ascii: ":"))
            field.value.writeWire(into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Parses stored field JSON back into typed values.
    public static func decodeFields(_ bytes: [UInt8]) throws(StratusError) -> [String: FieldValue] {
        let json: JSON
        do {
            json = try JSONParser.parse(bytes)
        } catch {
            throw StratusError(.internalError, "a stored record could not be read", underlying: error)
        }
        var fields: [String: FieldValue] = [:]
        for (name, value) in json.objectValue ?? [:] {
            if let decoded = try FieldValue.decode(value, field: name, knownType: nil) { fields[name] = decoded }
        }
        return fields
    }
}
