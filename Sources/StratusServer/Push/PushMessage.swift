import Crypto
import Foundation
import StratusCore

/// What a notification becomes on its way to a device: the same JSON the web courier answers
/// (`aps` and `ck`), cut to fit the provider's size limit.
struct PushMessage: Sendable {
    /// The body to send.
    var body: String
    /// APNs: shown to the person (alert, sound or badge; push type `alert`, priority 10) rather
    /// than a background push that wakes the app (`content-available`, push type `background`, priority 5).
    var alert: Bool
    /// APNs' `apns-collapse-id`: zone and database notifications of one subscription replace each
    /// other on the device, since the app fetches every change on the latest.
    var collapseID: String?

    /// APNs' limit on a notification's payload.
    static let apnsLimit = 4096

    /// The message for `notification` (the Notifier's JSON) within `limit` bytes; `nil` when even
    /// cut it does not fit (never for a notification Stratus makes: an alert body is at most 4 KB
    /// and is cut too).
    ///
    /// APNs needs something in `aps`: a notification whose subscription asked for no alert, sound,
    /// badge or content-available is sent as a background push (`content-available: 1`), which
    /// wakes the app to fetch its changes, the sync loop every subscriber of a zone wants.
    /// (Web Push has no such need: `addingContentAvailable` false sends the courier's JSON as it is.)
    static func make(_ notification: JSON, limit: Int, addingContentAvailable: Bool = true) -> PushMessage? {
        guard var members = notification.objectValue else { return nil }
        var aps = members["aps"]?.objectValue ?? [:]
        let alert = aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil
        if addingContentAvailable, !alert, aps["content-available"] == nil {
            aps["content-available"] = 1
            members["aps"] = .object(aps)
        }
        var collapseID: String?
        if let ck = members["ck"]?.objectValue, let sid = (ck["fet"] ?? ck["met"])?["sid"]?.stringValue {
            // APNs takes at most 64 bytes.
            collapseID = sid.utf8.count <= 64 ? sid : SHA256.hash(data: Array(sid.utf8)).map { String(format: "%02x", $0) }.joined()
        }
        guard let body = fit(members, limit: limit) else { return nil }
        return PushMessage(body: body, alert: alert, collapseID: collapseID)
    }

    /// The JSON text of `members` within `limit` bytes: the desired keys (`ck.qry.af`) cut first,
    /// largest first, then the alert's body shortened.
    static func fit(_ members: [String: JSON], limit: Int) -> String? {
        var members = members
        var text = JSONWriter.string(.object(members))
        if text.utf8.count <= limit { return text }
        if var ck = members["ck"]?.objectValue, var qry = ck["qry"]?.objectValue, var fields = qry["af"]?.objectValue {
            let bySize = fields.map { ($0.key, JSONWriter.bytes($0.value).count) }.sorted { $0.1 > $1.1 }
            for (key, _) in bySize {
                fields.removeValue(forKey: key)
                qry["af"] = fields.isEmpty ? nil : .object(fields)
                ck["qry"] = .object(qry)
                members["ck"] = .object(ck)
                text = JSONWriter.string(.object(members))
                if text.utf8.count <= limit { return text }
            }
        }
        if var aps = members["aps"]?.objectValue, var alert = aps["alert"]?.objectValue, let body = alert["body"]?.stringValue {
            let over = text.utf8.count - limit
            var cut = Substring(body)
            // Drop characters until the escaped body is short enough (escaping can make a character up to 6 bytes).
            while !cut.isEmpty, JSONWriter.bytes(.string(String(body[..<cut.endIndex]))).count > JSONWriter.bytes(.string(body)).count - over - 3 {
                cut = cut.dropLast(max(1, cut.count / 16))
            }
            alert["body"] = .string(String(cut) + "…")
            aps["alert"] = .object(alert)
            members["aps"] = .object(aps)
            text = JSONWriter.string(.object(members))
            if text.utf8.count <= limit { return text }
        }
        return nil
    }
}
