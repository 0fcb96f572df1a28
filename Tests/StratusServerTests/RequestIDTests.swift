import Foundation
import StratusCore
@testable import StratusServer
import StratusStore
@testable import StratusTestSupport
import Testing

/// Request ids: every answer carries `X-Request-ID` (the client's when well formed, else a new
/// one), an error dictionary's `uuid` is that id, and the server's log lines for the request
/// carry it as `stratus.request_id` (`--log-format json`, one object per line).
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct RequestIDTests {
    static func exchange(_ port: Int, _ request: String) async throws -> RawResponse {
        let connection = try await RawConnection(port: port)
        try await connection.send(request)
        return try #require(try await connection.responses(count: 1).0.first, "no answer: \(connection.timeline)")
    }

    static func lookup(_ container: String, id: String?) -> String {
        let header = id.map { "X-Request-ID: \($0)\r\n" } ?? ""
        let body = #"{"records":[{"recordName":"r"}]}"#
        return "POST /database/1/\(container)/development/public/records/lookup?ckAPIToken=nope HTTP/1.1\r\nHost: x\r\n\(header)"
            + "Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
    }

    static func isUUID(_ text: String?) -> Bool { text.flatMap(UUID.init(uuidString:)) != nil }

    @Test func answersCarryTheRequestsIdAndErrorsAreNamedByIt() async throws {
        try await Harness.run(live: true) { harness in
            let port = try #require(harness.client.port)
            let session = try await harness.container()
            // No id sent: one is made, and the error's uuid is it.
            let made = try await Self.exchange(port, Self.lookup(session.container, id: nil))
            #expect(made.status >= 400 && made.json["serverErrorCode"] != nil, "\(made)")
            #expect(Self.isUUID(made.headers["x-request-id"]) && made.json["uuid"]?.stringValue == made.headers["x-request-id"], "\(made)")
            // A client's well-formed id comes back, in the header and as the error's uuid.
            let sent = "trace-4bf92f3577b34da6:a3ce929d0e0e4736@edge/1"
            let kept = try await Self.exchange(port, Self.lookup(session.container, id: sent))
            #expect(kept.headers["x-request-id"] == sent && kept.json["uuid"]?.stringValue == sent, "\(kept)")
            // Ill-formed ones are replaced.
            for bad in ["two words", String(repeating: "a", count: 129), "quote\"d", "semi;colon"] {
                let replaced = try await Self.exchange(port, Self.lookup(session.container, id: bad))
                #expect(Self.isUUID(replaced.headers["x-request-id"]) && replaced.json["uuid"]?.stringValue == replaced.headers["x-request-id"],
                        "\(bad): \(replaced)")
            }
            // A success carries one too, and two requests never share one.
            let first = try await Self.exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            let second = try await Self.exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(first.status == 200 && Self.isUUID(first.headers["x-request-id"]) && first.headers["x-request-id"] != second.headers["x-request-id"])
            // Errors made before a request is read whole carry theirs too (a body over the limit).
            let large = try await Self.exchange(port, "POST /database/1/\(session.container)/development/public/records/lookup HTTP/1.1\r\nHost: x\r\n"
                                                + "Content-Length: 999999999\r\n\r\n")
            #expect(large.status == 413 && Self.isUUID(large.headers["x-request-id"]) && large.json["uuid"]?.stringValue == large.headers["x-request-id"], "\(large)")
        }
    }

    @Test func theServersJSONLogLinesOfARequestCarryItsID() async throws {
        try await withServeProcesses(1, adminToken: "request-id-admin", name: "request-ids", arguments: { _ in
            ["--log-format", "json", "--log-level", "debug"]
        }) { servers in
            let server = try #require(servers.first)
            let port = try #require(URL(string: server.url)?.port)
            let sent = "log-check-\(UInt32.random(in: 0...UInt32.max))"
            let answer = try await Self.exchange(port, Self.lookup("iCloud.com.example.Nowhere", id: sent))
            #expect(answer.headers["x-request-id"] == sent && answer.json["uuid"]?.stringValue == sent, "\(answer)")
            // The line is written as the answer goes out: wait for it (bounded).
            var lines: [JSON] = []
            for _ in 0..<50 {
                let text = (try? String(contentsOfFile: server.folder + "/serve0.log", encoding: .utf8)) ?? ""
                let logged = text.split(separator: "\n").filter { $0.hasPrefix("{") }
                lines = logged.compactMap { try? JSONParser.parse(Array($0.utf8)) }
                #expect(lines.count == logged.count, "a log line is not JSON")
                if lines.contains(where: { $0["stratus.request_id"]?.stringValue == sent }) { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            let mine = lines.filter { $0["stratus.request_id"]?.stringValue == sent }
            #expect(mine.contains { $0["message"] == "answered" && $0["stratus.status"]?.stringValue == String(answer.status) && $0["stratus.path"]?.stringValue?.hasSuffix("records/lookup") == true },
                    "the request's lines: \(mine)")
            #expect(mine.allSatisfy { $0["time"] != nil && $0["level"] != nil && $0["label"] == "stratus" }, "\(mine)")
            // Lines outside any request carry no id.
            #expect(lines.contains { $0["message"]?.stringValue?.contains("migration") == true || $0["stratus.request_id"] == nil })
        }
    }
}
