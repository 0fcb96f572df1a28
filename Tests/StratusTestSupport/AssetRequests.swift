import Foundation
import HTTPTypes
import NIOCore
import StratusCore
import Testing

/// Assets as a client moves them: `assets/upload`, the bytes POSTed to its URL, raw requests.
enum AssetRequests {
    /// A request with a raw body, answered with status, headers and raw bytes.
    static func raw(_ harness: Harness, _ method: HTTPRequest.Method, _ uri: String, body: [UInt8]? = nil,
                    headers: HTTPFields = [:]) async throws -> (status: Int, headers: HTTPFields, bytes: [UInt8]) {
        try await harness.client.execute(uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(bytes: $0) }) { response in
            (Int(response.status.code), response.headers, Array(response.body.readableBytesView))
        }
    }

    static func path(of url: String) throws -> String {
        let parsed = try #require(URL(string: url))
        return parsed.path
    }

    static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SplitMix64(seed: UInt64.random(in: 0...UInt64.max))
        return (0..<count).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
    }

    /// `assets/upload` for one field, then the bytes: the `singleFile` answer.
    static func upload(_ session: Session, _ bytes: [UInt8], database: String = "private", recordName: String = "n-1",
                       recordType: String = "Note", field: String = "attachment", contentType: String = "image/png") async throws -> JSON {
        let tokens = try await session.post(database, "assets/upload", ["zoneID": ["zoneName": "_defaultZone"],
            "tokens": [["recordName": .string(recordName), "recordType": .string(recordType), "fieldName": .string(field)]]])
        #expect(tokens.status == 200, "\(tokens.json)")
        let url = try #require(tokens.json["tokens"]?.arrayValue?.first?["url"]?.stringValue, "\(tokens.json)")
        #expect(tokens.json["tokens"]?.arrayValue?.first?["recordName"]?.stringValue == recordName)
        let sent = try await raw(session.harness, .post, try path(of: url), body: bytes, headers: [.contentType: contentType])
        #expect(sent.status == 200, "\(String(decoding: sent.bytes, as: UTF8.self))")
        let answer = try JSONParser.parse(sent.bytes)
        return try #require(answer["singleFile"], "\(answer)")
    }
}
