import Foundation
import StratusCore
@testable import StratusServer
import Testing

/// How a notification becomes a push within the provider's size (the end-to-end checks against
/// the APNs and Web Push stand-ins are in Deploy/push/e2e.py).
@Suite struct PushMessageTests {
    static func notification(alert: String? = nil, fields: [String: JSON] = [:], zone: Bool = false) -> JSON {
        var aps: [String: JSON] = [:]
        if let alert { aps["alert"] = ["body": .string(alert)] }
        let ck: JSON = zone
            ? ["nid": "8c0e7f0e-2d55-4a8e-9d34-1f3b8e6b0a11", "fet": ["sid": "notes", "zid": "Notes"]]
            : ["nid": "8c0e7f0e-2d55-4a8e-9d34-1f3b8e6b0a11", "qry": ["sid": "q", "rid": "r", "af": .object(fields)]]
        return ["aps": .object(aps), "ck": ck]
    }

    @Test func aNotificationWithoutAnAlertIsASilentPushAndAZoneOneCollapses() throws {
        let message = try #require(PushMessage.make(Self.notification(zone: true), limit: PushMessage.apnsLimit))
        let body = try JSONParser.parse(Array(message.body.utf8))
        #expect(body["aps"] == ["content-available": 1])
        #expect(!message.alert)
        #expect(message.collapseID == "notes")
        // Web Push sends the notification as it is.
        let web = try #require(PushMessage.make(Self.notification(zone: true), limit: 3993, addingContentAvailable: false))
        #expect(try JSONParser.parse(Array(web.body.utf8))["aps"] == [:])
    }

    @Test func desiredKeysAreCutLargestFirstThenTheAlertBodyIsShortened() throws {
        let fields: [String: JSON] = ["small": "a", "medium": .string(String(repeating: "m", count: 1500)), "large": .string(String(repeating: "l", count: 3000))]
        let message = try #require(PushMessage.make(Self.notification(alert: "hello", fields: fields), limit: 4096))
        let af = try JSONParser.parse(Array(message.body.utf8))["ck"]?["qry"]?["af"]
        #expect(message.body.utf8.count <= 4096)
        #expect(af?["large"] == nil && af?["medium"] != nil && af?["small"] == "a", "\(String(describing: af))")
        #expect(message.alert)

        let long = String(repeating: "é\"", count: 2000)
        let cut = try #require(PushMessage.make(Self.notification(alert: long, fields: ["x": .string(String(repeating: "x", count: 500))]), limit: 4096))
        let body = try JSONParser.parse(Array(cut.body.utf8))
        #expect(cut.body.utf8.count <= 4096, "\(cut.body.utf8.count)")
        #expect(body["ck"]?["qry"]?["af"] == nil)
        let shortened = try #require(body["aps"]?["alert"]?["body"]?.stringValue)
        #expect(shortened.hasSuffix("…") && long.hasPrefix(String(shortened.dropLast())) && shortened.count > 100)
    }
}
