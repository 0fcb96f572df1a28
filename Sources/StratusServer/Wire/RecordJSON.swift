import Foundation
import StratusCore

/// How a record is shaped in a response.
struct RecordRendering: Sendable {
    /// Only these fields, when set (CKWS `desiredKeys`).
    var desiredKeys: Set<String>?
    /// Numbers as JSON strings (CKWS `numbersAsStrings`).
    var numbersAsStrings: Bool
    /// The zone to name in each record, when the response carries it.
    var zoneID: JSON?
    /// Each asset's `downloadURL`, for responses that read records (none: assets render without one).
    var assetURL: (@Sendable (AssetValue) -> String)?

    init(desiredKeys: Set<String>? = nil, numbersAsStrings: Bool = false, zoneID: JSON? = nil,
                assetURL: (@Sendable (AssetValue) -> String)? = nil) {
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
        self.zoneID = zoneID
        self.assetURL = assetURL
    }
}

extension Record {
    /// The CKWS record dictionary.
    func wireJSON(_ rendering: RecordRendering = RecordRendering()) -> JSON {
        if deleted {
            var tombstone: [String: JSON] = ["recordName": .string(recordName), "deleted": .bool(true)]
            if !recordType.isEmpty { tombstone["recordType"] = .string(recordType) }
            if let zoneID = rendering.zoneID { tombstone["zoneID"] = zoneID }
            return .object(tombstone)
        }
        if let encodedFields, rendering.desiredKeys == nil, !rendering.numbersAsStrings, shareKeys == nil,
           rendering.assetURL == nil || !Record.mentionsAssets(encodedFields) {
            return .raw(wireBytes(fields: encodedFields, zoneID: rendering.zoneID))
        }
        let typed = encodedFields.flatMap { try? Record.decodeFields($0) } ?? fields
        var fieldMembers: [String: JSON] = [:]
        for (name, value) in typed where rendering.desiredKeys?.contains(name) ?? true {
            if let assetURL = rendering.assetURL {
                fieldMembers[name] = value.wireJSON(numbersAsStrings: rendering.numbersAsStrings, assetURL: assetURL)
            } else {
                fieldMembers[name] = value.wireJSON(numbersAsStrings: rendering.numbersAsStrings)
            }
        }
        let fieldsJSON = JSON.object(fieldMembers)
        var members: [String: JSON] = [
            "recordName": .string(recordName),
            "recordType": .string(recordType),
            "recordChangeTag": .string(changeTag),
            "fields": fieldsJSON,
            "created": .object(["timestamp": .int(createdAt), "userRecordName": .string(createdBy.rawValue), "deviceID": "1"]),
            "modified": .object(["timestamp": .int(modifiedAt), "userRecordName": .string(modifiedBy.rawValue), "deviceID": "1"]),
            "deleted": .bool(false),
        ]
        if let zoneID = rendering.zoneID { members["zoneID"] = zoneID }
        if let parent { members["parent"] = ["recordName": .string(parent)] }
        if let shareName { members["share"] = ["recordName": .string(shareName)] }
        if let shortGUID { members["shortGUID"] = .string(shortGUID) }
        for (key, value) in shareKeys ?? [:] { members[key] = value }
        return .object(members)
    }

    /// Whether stored field JSON may hold an asset (its type name appears): only such records are
    /// decoded to give their assets download URLs.
    static func mentionsAssets(_ fields: [UInt8]) -> Bool {
        // Every record of a read response is checked: jump from one "A" to the next with memchr
        // (vectorised) rather than comparing at every byte.
        let needle = assetTypeBytes
        return fields.withUnsafeBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress, buffer.count >= needle.count else { return false }
            var offset = 0
            while offset <= buffer.count - needle.count,
                  let hit = memchr(base + offset, Int32(needle[0]), buffer.count - needle.count + 1 - offset) {
                let index = base.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                if memcmp(base + index, needle, needle.count) == 0 { return true }
                offset = index + 1
            }
            return false
        }
    }

    private static let assetTypeBytes = Array("ASSETID".utf8)

    /// The bytes `JSONWriter` would write for the record dictionary above (keys in sorted order),
    /// written directly around the stored field JSON: the read paths (lookup, query, changes)
    /// render up to 200 records per response, and building a dictionary per record cost more
    /// than the rest of the request.
    func wireBytes(fields: [UInt8], zoneID: JSON?) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(fields.count + 256 + recordName.utf8.count + createdBy.rawValue.utf8.count + modifiedBy.rawValue.utf8.count)
        func stamp(_ timestamp: Int64, _ user: UserID) {
            out.append(contentsOf: WireText.stampTimestamp)
            JSONWriter.writeInteger(timestamp, into: &out)
            out.append(contentsOf: WireText.stampUser)
            JSONWriter.writeString(user.rawValue, into: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: WireText.created)
        stamp(createdAt, createdBy)
        out.append(contentsOf: WireText.fields)
        out.append(contentsOf: fields)
        out.append(contentsOf: WireText.modified)
        stamp(modifiedAt, modifiedBy)
        if let parent {
            out.append(contentsOf: WireText.parent)
            JSONWriter.writeString(parent, into: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: WireText.changeTag)
        JSONWriter.writeInteger(changeSeq, radix: 36, into: &out)  // the tag needs no escaping
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: WireText.recordName)
        JSONWriter.writeString(recordName, into: &out)
        out.append(contentsOf: WireText.recordType)
        JSONWriter.writeString(recordType, into: &out)
        if let shareName {
            out.append(contentsOf: WireText.share)
            JSONWriter.writeString(shareName, into: &out)
            out.append(UInt8(ascii: "}"))
        }
        if let shortGUID {
            out.append(contentsOf: WireText.shortGUID)
            JSONWriter.writeString(shortGUID, into: &out)
        }
        if let zoneID {
            out.append(contentsOf: WireText.zoneID)
            JSONWriter.write(zoneID, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// The fixed parts of a record's wire dictionary, as bytes (appending a string literal's UTF-8
/// view goes through a slower generic path).
private enum WireText {
    static let created = Array(#"{"created":"#.utf8)
    static let stampTimestamp = Array(#"{"deviceID":"1","timestamp":"#.utf8)
    static let stampUser = Array(#","userRecordName":"#.utf8)
    static let fields = Array(#","deleted":false,"fields":"#.utf8)
    static let modified = Array(#","modified":"#.utf8)
    static let changeTag = Array(#","recordChangeTag":""#.utf8)
    static let recordName = Array(#","recordName":"#.utf8)
    static let recordType = Array(#","recordType":"#.utf8)
    static let zoneID = Array(#","zoneID":"#.utf8)
    static let parent = Array(#","parent":{"recordName":"#.utf8)
    static let share = Array(#","share":{"recordName":"#.utf8)
    static let shortGUID = Array(#","shortGUID":"#.utf8)
}
