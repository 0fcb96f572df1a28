import Crypto
import Foundation
@testable import StratusTestSupport
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NIOCore
import PostgresNIO
@testable import StratusCore
@testable import StratusStore
import Synchronization
import Testing

/// Assets through a real `stratus serve` (its own HTTP server and process): uploads and downloads
/// stream (the server's memory stays flat), concurrent uploads land whole, and uploads cut off at
/// random points leave nothing behind.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct AssetStreamingTests {
    static let adminToken = "asset-streaming-admin"

    /// The resident memory of a process, in bytes (`VmRSS`).
    static func residentBytes(_ pid: pid_t) -> Int64 {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = Int64(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
        return kilobytes * 1024
    }

    /// Runs `work` while sampling `pid`'s resident memory every 10 ms; returns the work's result and the peak.
    static func peakMemory<T: Sendable>(of pid: pid_t, during work: () async throws -> T) async throws -> (T, Int64) {
        let peak = Atomic<Int64>(residentBytes(pid))
        let done = Atomic<Bool>(false)
        let sampler = Task.detached {
            while !done.load(ordering: .relaxed) {
                peak.max(residentBytes(pid), ordering: .relaxed)
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
        defer { done.store(true, ordering: .relaxed) }
        let result = try await work()
        done.store(true, ordering: .relaxed)
        await sampler.value
        return (result, peak.load(ordering: .relaxed))
    }

    static func uploadURLs(_ server: String, _ tenant: (token: String, user: String), count: Int) async throws -> [String] {
        let tokens = (0..<count).map { index in #"{"recordType":"Note","fieldName":"file","recordName":"n\#(index)"}"# }.joined(separator: ",")
        let answer = try await Programs.post(server + "/database/1/iCloud.com.example.Assets/development/private/assets/upload?ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)",
                                                  #"{"tokens":[\#(tokens)]}"#)
        #expect(answer.0 == 200, "\(answer.1)")
        return answer.1["tokens"]?.arrayValue?.compactMap { $0["url"]?.stringValue } ?? []
    }

    static func send(_ url: String, _ bytes: Data) async throws -> (Int, JSON) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = "POST"
        request.setValue("application/octet-stream", forHTTPHeaderField: "Content-Type")
        request.timeoutInterval = 120
        let (data, response) = try await URLSession.shared.upload(for: request, from: bytes)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONParser.parse(Array(data))) ?? .null)
    }

    /// Bytes that do not repeat (SplitMix64 from a random seed: the system generator costs a
    /// system call per 8 bytes, seconds of CPU for the 140 MB these tests send).
    static func randomData(_ count: Int) -> Data {
        var generator = SplitMix64(seed: UInt64.random(in: 0...UInt64.max))
        var data = Data(count: count)
        data.withUnsafeMutableBytes { buffer in
            var index = 0
            while index + 8 <= count {
                buffer.storeBytes(of: generator.next() as UInt64, toByteOffset: index, as: UInt64.self)
                index += 8
            }
            while index < count { buffer[index] = UInt8(truncatingIfNeeded: generator.next()); index += 1 }
        }
        return data
    }

    static func checksum(_ data: Data) -> String { Data(SHA256.hash(data: data)).base64EncodedString() }

    /// A 40 MB upload and its download each stream: the server's resident memory grows by at most
    /// 16 MB over what it held before (the figures are printed).
    @Test func fortyMegabytesStreamUpAndDownInBoundedMemory() async throws {
        try await withServeProcesses(1, adminToken: Self.adminToken, name: "asset-rss", arguments: { _ in [] }) { servers in
            let server = servers[0]
            let tenant = try await serveTenant(server.url, adminToken: Self.adminToken, container: "iCloud.com.example.Assets")
            let urls = try await Self.uploadURLs(server.url, tenant, count: 2)
            // A small round first: what the server allocates once (buffers, connections) is in the baseline.
            let warm = try await Self.send(urls[0], Self.randomData(1_000_000))
            #expect(warm.0 == 200, "\(warm.1)")
            let data = Self.randomData(40 * 1024 * 1024)
            try await Task.sleep(for: .milliseconds(300))
            let before = Self.residentBytes(server.pid)
            let (sent, uploadPeak) = try await Self.peakMemory(of: server.pid) { try await Self.send(urls[1], data) }
            #expect(sent.0 == 200 && sent.1["singleFile"]?["fileChecksum"]?.stringValue == Self.checksum(data), "\(sent.1)")
            let file = try #require(sent.1["singleFile"])
            let save = try await Programs.post(server.url + "/database/1/iCloud.com.example.Assets/development/private/records/modify?ckAPIToken=\(tenant.token)&ckWebAuthToken=\(tenant.user)",
                                                    JSONWriter.string(["operations": [["operationType": "create", "record": ["recordName": "n1", "recordType": "Note",
                                                                                                                           "fields": ["file": ["value": file]]]]]]))
            let downloadURL = try #require(save.1["records"]?.arrayValue?.first?["fields"]?["file"]?["value"]?["downloadURL"]?.stringValue, "\(save.1)")
            // HEAD: the length, no body.
            var head = URLRequest(url: URL(string: downloadURL)!)
            head.httpMethod = "HEAD"
            let (headBody, headResponse) = try await URLSession.shared.data(for: head)
            let headLength = (headResponse as? HTTPURLResponse)?.value(forHTTPHeaderField: "Content-Length")
            #expect((headResponse as? HTTPURLResponse)?.statusCode == 200 && headBody.isEmpty && headLength == String(data.count), "HEAD: \(headResponse)")
            try await Task.sleep(for: .milliseconds(300))
            let beforeDownload = Self.residentBytes(server.pid)
            let (downloaded, downloadPeak) = try await Self.peakMemory(of: server.pid) {
                try await URLSession.shared.data(from: URL(string: downloadURL)!)
            }
            #expect((downloaded.1 as? HTTPURLResponse)?.statusCode == 200)
            #expect(downloaded.0.count == data.count && Self.checksum(downloaded.0) == Self.checksum(data), "the 40 MB download differs from the upload")
            let mb = { (bytes: Int64) in String(format: "%.1f MB", Double(bytes) / 1_048_576) }
            print("asset streaming: 40 MB upload: server RSS \(mb(before)) → peak \(mb(uploadPeak)) (+\(mb(uploadPeak - before))); "
                  + "40 MB download: \(mb(beforeDownload)) → peak \(mb(downloadPeak)) (+\(mb(downloadPeak - beforeDownload)))")
            #expect(uploadPeak - before <= 16 * 1_048_576, "the upload grew the server by \(mb(uploadPeak - before))")
            #expect(downloadPeak - beforeDownload <= 16 * 1_048_576, "the download grew the server by \(mb(downloadPeak - beforeDownload))")
        }
    }

    /// Twenty 5 MB uploads at once all land whole, each under its own checksum.
    @Test func twentyConcurrentUploadsCompleteCorrectly() async throws {
        try await withServeProcesses(1, adminToken: Self.adminToken, name: "asset-concurrent", arguments: { _ in [] }) { servers in
            let server = servers[0]
            let tenant = try await serveTenant(server.url, adminToken: Self.adminToken, container: "iCloud.com.example.Assets")
            let urls = try await Self.uploadURLs(server.url, tenant, count: 20)
            #expect(urls.count == 20)
            let files = (0..<20).map { _ in Self.randomData(5 * 1024 * 1024) }
            let answers = try await withThrowingTaskGroup(of: (Int, Int, JSON).self) { group in
                for (index, url) in urls.enumerated() {
                    let file = files[index]
                    group.addTask { let (status, json) = try await Self.send(url, file); return (index, status, json) }
                }
                var out: [(Int, Int, JSON)] = []
                for try await answer in group { out.append(answer) }
                return out
            }
            #expect(answers.count == 20)
            for (index, status, json) in answers {
                #expect(status == 200 && json["singleFile"]?["fileChecksum"]?.stringValue == Self.checksum(files[index])
                        && json["singleFile"]?["size"] == .int(5 * 1024 * 1024), "upload \(index): \(status) \(json)")
            }
            let staged = (try? FileManager.default.contentsOfDirectory(atPath: server.folder + "/assets/staging")) ?? []
            #expect(staged.isEmpty, "staged uploads left: \(staged)")
        }
    }

    /// Fifty uploads cut off at random points (the client closes mid-body) store nothing: no
    /// asset, no staged file, no counted byte; the server then takes a whole upload as before.
    @Test func interruptedUploadsLeaveNothingBehind() async throws {
        try await withServeProcesses(1, adminToken: Self.adminToken, name: "asset-cut", arguments: { _ in [] }) { servers in
            let server = servers[0]
            let tenant = try await serveTenant(server.url, adminToken: Self.adminToken, container: "iCloud.com.example.Assets")
            let urls = try await Self.uploadURLs(server.url, tenant, count: 51)
            let port = Int(URL(string: server.url)!.port!)
            let length = 2 * 1024 * 1024
            let body = [UInt8](Self.randomData(length))
            var cutPoints: [Int] = []
            for round in 0..<50 {
                let path = URL(string: urls[round])!.path
                let cut = Int.random(in: 0..<length)
                cutPoints.append(cut)
                let connection = try await RawConnection(port: port)
                try await connection.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\nContent-Length: \(length)\r\n\r\n")
                if cut > 0 { try await connection.send(bytes: Array(body[0..<cut])) }
                try await connection.close()
            }
            // The server notices each cut as it reads; give the last a moment.
            let staging = server.folder + "/assets/staging"
            var staged: [String] = []
            for _ in 0..<100 {
                staged = (try? FileManager.default.contentsOfDirectory(atPath: staging)) ?? []
                if staged.isEmpty { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(staged.isEmpty, "staged files left by cut uploads: \(staged)")
            let stored = (try? FileManager.default.subpathsOfDirectory(atPath: server.folder + "/assets"))?.filter { !$0.hasPrefix("staging") && $0.split(separator: "/").count == 3 } ?? []
            #expect(stored.isEmpty, "asset files left by cut uploads: \(stored)")
            let verify = try await Programs.get(server.url + "/health")
            #expect(verify?.0 == 200)
            // A whole upload still works after them.
            let whole = Self.randomData(300_000)
            let sent = try await Self.send(urls[50], whole)
            #expect(sent.0 == 200 && sent.1["singleFile"]?["fileChecksum"]?.stringValue == Self.checksum(whole), "\(sent.1)")
            // The service's own count: the one whole asset, and usage counters that match the data.
            let usage = try await Programs.getJSON(server.url + "/management/1/containers/iCloud.com.example.Assets/usage", headers: ["Authorization": "Bearer \(Self.adminToken)"])
            #expect(usage["storedAssets"] == ["count": 1, "bytes": 300_000], "\(usage)")
            let verified = try await Programs.getJSON(server.url + "/management/1/usage/verify", headers: ["Authorization": "Bearer \(Self.adminToken)"])
            #expect(verified["differences"]?.arrayValue?.isEmpty == true, "\(verified)")
            print("interrupted uploads: 50 cut at \(cutPoints.min() ?? 0)–\(cutPoints.max() ?? 0) of \(length) bytes; 0 staged files, 0 asset files left")
        }
    }
}
