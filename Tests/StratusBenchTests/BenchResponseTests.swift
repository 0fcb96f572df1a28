@testable import stratus_bench
import Testing

/// The load generator's HTTP reading: it must find where each response ends (or it would count a
/// half-read response, or hang), and every error code in a body (or it would report errors as
/// successes). Runs without a server: the bytes are written here.
@Suite struct BenchResponseTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func aContentLengthResponseEndsAfterItsBody() throws {
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-LENGTH: 11\r\n\r\n"
        let all = Self.bytes(head + #"{"a":"bcd"}"# + "HTTP/1.1 404")
        let response = try #require(BenchLoop.parse(all))
        #expect(response.status == 200)
        #expect(!response.chunked)
        #expect(Array(all[response.body]) == Self.bytes(#"{"a":"bcd"}"#))
        #expect(response.total == head.utf8.count + 11)
    }

    @Test func anIncompleteResponseIsNotParsed() {
        let full = Self.bytes("HTTP/1.1 400 Bad Request\r\nContent-Length: 21\r\n\r\n{\"serverErrorCode\":1}")
        for cut in [0, 10, 30, full.count - 1] {
            #expect(BenchLoop.parse(Array(full[0..<cut])) == nil, "cut at \(cut)")
        }
        #expect(BenchLoop.parse(full)?.status == 400)
    }

    @Test(arguments: ["chunked", "Chunked", "CHUNKED", "gzip, chunked"])
    func chunkedBodiesAreReadInAnyLetterCase(_ encoding: String) throws {
        let chunked = "5\r\nhello\r\nB\r\n, 12345678!\r\n0\r\n\r\n"
        let all = Self.bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: \(encoding)\r\n\r\n" + chunked)
        let response = try #require(BenchLoop.parse(all))
        #expect(response.chunked)
        #expect(response.total == all.count)
        #expect(BenchLoop.dechunk(all, in: response.body) == Self.bytes("hello, 12345678!"))
        // Without its last chunk the response is not complete yet.
        #expect(BenchLoop.parse(Array(all.dropLast(5))) == nil)
    }

    @Test func findLocatesANeedleAnywhere() {
        let needle = Self.bytes("serverErrorCode")
        for prefix in 0..<20 {
            for suffix in [0, 1, 7] {
                let haystack = [UInt8](repeating: UInt8(ascii: "e"), count: prefix) + needle + [UInt8](repeating: UInt8(ascii: "E"), count: suffix)
                #expect(BenchLoop.find(needle, in: haystack, from: 0) == prefix)
                #expect(BenchLoop.find(needle, in: haystack, from: prefix + 1) == nil)
            }
        }
        // Near misses and a needle longer than the haystack.
        #expect(BenchLoop.find(needle, in: Self.bytes("serverErrorCod serverErrorcode"), from: 0) == nil)
        #expect(BenchLoop.find(needle, in: Self.bytes("Error"), from: 0) == nil)
        // In a slice, offsets count from the slice's start.
        let text = Self.bytes("xx\r\nab\r\n")
        #expect(BenchLoop.find([13, 10], in: text[4...], from: 0) == 2)
    }

    /// The pollers time a query notification by its record's name, found without parsing the payload.
    @Test func aPollerFindsWhenANotifiedRecordWasSent() {
        let payload = Self.bytes(#"{"aps":{},"ck":{"ce":1,"cid":"iCloud.x","nid":"n","qry":{"dbs":2,"fo":1,"rid":"w3-17-t1764000000123456","sid":"s","zid":"_defaultZone"}}}"#)
        #expect(BenchPollers.sentMark(payload) == 1_764_000_000_123_456)
        #expect(BenchPollers.sentMark(payload[...]) == 1_764_000_000_123_456)
        // A database notification names no record; a record named otherwise is not timed.
        #expect(BenchPollers.sentMark(Self.bytes(#"{"ck":{"met":{"sid":"db","dbs":2}}}"#)) == nil)
        #expect(BenchPollers.sentMark(Self.bytes(#"{"ck":{"qry":{"rid":"seed-1"}}}"#)) == nil)
    }
}
