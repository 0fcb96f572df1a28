import Crypto
import Foundation
import HTTPTypes
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// Server-to-server keys (issue 23 §6) through the management API and signed data requests on
/// real PostgreSQL, and swift-crypto's ECDSA verification against Project Wycheproof's vectors.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct ServerKeyTests {
    /// Adds a key for `container`/`environment` and returns its signer.
    static func addKey(_ harness: Harness, container: String, environment: ContainerEnvironment = .development) async throws -> Signer {
        var signer = Signer()
        let added = try await harness.admin(.post, "containers/\(container)/keys",
                                            json: ["environment": .string(environment.rawValue), "publicKey": .string(signer.publicKeyPEM), "name": "backend"])
        #expect(added.status == 201, "\(added.json)")
        signer.keyID = try #require(added.json["keyID"]?.stringValue)
        return signer
    }

    /// Sends a signed request; `path` is the request target (path and query).
    static func send(_ harness: Harness, _ path: String, method: HTTPRequest.Method = .post, body: String = "", headers: HTTPFields) async throws -> (status: Int, json: JSON) {
        try await harness.send(method, path, body: method == .get ? nil : body, headers: headers)
    }

    static let createBody = #"{"operations":[{"operationType":"create","record":{"recordName":"from-server","recordType":"Sealed","fields":{"title":{"value":"hi"}}}}]}"#

    @Test func signedRequestsActOnThePublicDatabaseWithAdministratorPrivileges() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            // A type no role may use: a server key is not restricted by security roles.
            let schema = "DEFINE SCHEMA\n  RECORD TYPE Sealed (title STRING QUERYABLE);\n"
            #expect(try await harness.admin(.post, "containers/\(anonymous.container)/schema/import", json: ["schema": .string(schema)]).status == 200)
            let signer = try await Self.addKey(harness, container: anonymous.container)
            // Requests signed within one second with the same body and path are one request
            // (a replay): the variants below get dates of their own.
            let start = Date()
            #expect(signer.keyID.count == 64 && signer.keyID.allSatisfy(\.isHexDigit), "\(signer.keyID)")
            let base = "/database/1/\(anonymous.container)/development/public"

            let created = try await Self.send(harness, "\(base)/records/modify", body: Self.createBody,
                                              headers: signer.headers(signedPath: "\(base)/records/modify", body: Self.createBody))
            #expect(created.status == 200 && created.json.record(0)?["recordChangeTag"] != nil, "\(created.json)")
            #expect(created.json.record(0)?["created"]?["userRecordName"]?.stringValue == "_key_" + signer.keyID, "\(created.json)")
            let lookup = #"{"records":[{"recordName":"from-server"}]}"#
            let read = try await Self.send(harness, "\(base)/records/lookup", body: lookup, headers: signer.headers(signedPath: "\(base)/records/lookup", body: lookup))
            #expect(read.json.record(0)?["fields"]?["title"]?["value"] == "hi", "\(read.json)")
            // The same record is closed to users (the type has no grants).
            #expect(try await anonymous.signedUp().post("public", "records/lookup", ["records": [["recordName": "from-server"]]]).json.record(0)?.errorCode == "ACCESS_DENIED")

            // A GET signs the empty body's hash; the path may be signed with its query string or without.
            let list = try await Self.send(harness, "\(base)/zones/list", method: .get, headers: signer.headers(signedPath: "\(base)/zones/list", body: ""))
            #expect(list.status == 200 && list.json["zones"]?.arrayValue?.count == 1, "\(list.json)")
            #expect(RequestSignature.bodyHash(Data()) == "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=")
            let target = "\(base)/records/lookup?ckjsVersion=2.6.4"
            // Dated before the test began: a request signed "now" earlier in the test carries the same
            // path and body, and on a slow run its date could be one of these (a replay).
            for signedPath in [target, "\(base)/records/lookup"] {
                let answer = try await Self.send(harness, target, body: lookup, headers: signer.headers(signedPath: signedPath, body: lookup, date: start.addingTimeInterval(signedPath == target ? -5 : -6)))
                #expect(answer.status == 200 && answer.json.record(0)?["fields"] != nil, "\(signedPath): \(answer.json)")
            }

            // A key acts on the public database only.
            let privatePath = "/database/1/\(anonymous.container)/development/private/records/lookup"
            let refused = try await Self.send(harness, privatePath, body: lookup, headers: signer.headers(signedPath: privatePath, body: lookup))
            #expect(refused.status == 403 && refused.json.errorCode == "ACCESS_DENIED", "\(refused.json)")

            // Listed, then revoked: refused at once. The audit log has both.
            let keys = try await harness.admin(.get, "containers/\(anonymous.container)/keys")
            #expect(keys.json["keys"]?.arrayValue?.first?["keyID"]?.stringValue == signer.keyID, "\(keys.json)")
            let revoked = try await harness.admin(.post, "containers/\(anonymous.container)/keys/\(signer.keyID.prefix(12))/revoke")
            #expect(revoked.status == 200 && revoked.json["key"]?["revokedAt"] != .null, "\(revoked.json)")
            let after = try await Self.send(harness, "\(base)/records/lookup", body: lookup, headers: signer.headers(signedPath: "\(base)/records/lookup", body: lookup))
            #expect(after.status == 401 && after.json["reason"]?.stringValue?.contains("revoked") == true, "\(after.json)")
            let audit = try await harness.admin(.get, "containers/\(anonymous.container)/audit")
            let actions = audit.json["entries"]?.arrayValue?.compactMap { $0["action"]?.stringValue } ?? []
            #expect(actions.contains("key.add") && actions.contains("key.revoke"), "\(audit.json)")
        }
    }

    /// CloudKit JS and MistKit date their signatures to the second, so a client that polls, retries
    /// or looks up in parallel sends equal requests in one second, each signed anew: all are
    /// accepted. A signature received before is refused, also with its `s` replaced by `n − s`
    /// (the other valid form of the same signature).
    @Test(arguments: ["CloudKit JS", "MistKit"])
    func requestsAlikeInOneSecondAreNewAndAResentSignatureIsAReplay(client: String) async throws {
        try await Harness.run { harness in
            let session = try await harness.container()
            let signer = try await Self.addKey(harness, container: session.container)
            let path = "/database/1/\(session.container)/development/public/records/lookup"
            let body = #"{"records":[{"recordName":"nothing"}]}"#
            // CloudKit JS: `new Date().toISOString()` with its milliseconds cut off; MistKit:
            // ISO8601DateFormatter with internet date-time. Both give one-second dates.
            let dateText: String
            if client == "CloudKit JS" {
                let iso = ISO8601DateFormatter()
                iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                dateText = iso.string(from: Date()).replacingOccurrences(of: #"\.\d+Z$"#, with: "Z", options: .regularExpression)
            } else {
                dateText = Signer.dateText(Date())
            }
            var sent: [HTTPFields] = []
            for attempt in 0..<3 {
                let headers = signer.headers(signedPath: path, body: body, dateText: dateText)
                sent.append(headers)
                let answer = try await Self.send(harness, path, body: body, headers: headers)
                #expect(answer.status == 200, "\(client), request \(attempt + 1) with the date \(dateText): \(answer.status) \(answer.json)")
            }
            // Two at once, as parallel lookups go.
            async let first = Self.send(harness, path, body: body, headers: signer.headers(signedPath: path, body: body, dateText: dateText))
            async let second = Self.send(harness, path, body: body, headers: signer.headers(signedPath: path, body: body, dateText: dateText))
            let statuses = try await [first.status, second.status]
            #expect(statuses == [200, 200], "\(client): parallel requests alike")

            let resent = try await Self.send(harness, path, body: body, headers: sent[0])
            #expect(resent.status == 401 && resent.json["reason"]?.stringValue?.contains("replay") == true, "\(client): \(resent.json)")
            // The same signature with s flipped to n - s is valid for the same message, and the same request.
            var flipped = sent[1]
            let text = try #require(flipped[RequestSignature.signatureHeader])
            let der = try #require(Data(base64Encoded: text))
            let raw = Array(try P256.Signing.ECDSASignature(derRepresentation: der).rawRepresentation)
            let other = try P256.Signing.ECDSASignature(rawRepresentation: raw[0..<32] + RequestSignature.subtract(RequestSignature.order, Array(raw[32..<64])))
            flipped[RequestSignature.signatureHeader] = other.derRepresentation.base64EncodedString()
            let malleated = try await Self.send(harness, path, body: body, headers: flipped)
            #expect(malleated.status == 401 && malleated.json["reason"]?.stringValue?.contains("replay") == true,
                    "\(client): the signature with n - s: \(malleated.status) \(malleated.json)")
        }
    }

    /// Every way a signature can be wrong is 401 `AUTHENTICATION_FAILED` with a reason naming it.
    @Test func badSignaturesAreRefusedWithAReason() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let signer = try await Self.addKey(harness, container: anonymous.container)
            let base = "/database/1/\(anonymous.container)/development/public"
            let path = "\(base)/records/lookup"
            let body = #"{"records":[{"recordName":"x"}]}"#
            let now = Date()

            // Replay: the very same signed request twice.
            let once = signer.headers(signedPath: path, body: body, date: now)
            #expect(try await Self.send(harness, path, body: body, headers: once).status == 200)
            let replay = try await Self.send(harness, path, body: body, headers: once)
            #expect(replay.status == 401 && replay.json["reason"]?.stringValue?.contains("replay") == true, "\(replay.json)")

            var otherKey = Signer(keyID: signer.keyID)
            otherKey = Signer(keyID: signer.keyID, privateKey: .init())
            // Dates near the allowed skew are signed just before each is sent: signed all at once,
            // a slow run (the full suite on two cores) moved them across the limit.
            for (name, offset, reason) in [("date 9:55 behind", -595.0, ""), ("date 9:55 ahead", 595, ""),
                                           ("date 10:05 behind", -605, "within 10 minutes"), ("date 10:05 ahead", 605, "within 10 minutes")] {
                let answer = try await Self.send(harness, path, body: body,
                                                 headers: signer.headers(signedPath: path, body: body, date: Date().addingTimeInterval(offset)))
                if reason.isEmpty {
                    #expect(answer.status == 200, "\(name): \(answer.json)")
                } else {
                    #expect(answer.status == 401 && answer.json.errorCode == "AUTHENTICATION_FAILED" && answer.json["reason"]?.stringValue?.contains(reason) == true,
                            "\(name): \(answer.json)")
                }
            }
            var cases: [(name: String, target: String, body: String, headers: HTTPFields, reason: String)] = [
                ("body altered", path, #"{"records":[{"recordName":"y"}]}"#, signer.headers(signedPath: path, body: body), "does not match"),
                ("path altered", "\(base)/records/query", body, signer.headers(signedPath: path, body: body), "does not match"),
                ("query altered", path + "?a=2", body, signer.headers(signedPath: path + "?a=1", body: body), "does not match"),
                ("wrong key", path, body, otherKey.headers(signedPath: path, body: body), "does not match"),
                ("fractional seconds", path, body, signer.headers(signedPath: path, body: body, dateText: "2026-11-24T10:00:00.000Z"), "without fractional seconds"),
                ("offset instead of Z", path, body, signer.headers(signedPath: path, body: body, dateText: "2026-11-24T10:00:00+00:00"), "ISO 8601"),
                ("HTTP date", path, body, signer.headers(signedPath: path, body: body, dateText: "Tue, 24 Nov 2026 10:00:00 GMT"), "ISO 8601"),
                ("impossible date", path, body, signer.headers(signedPath: path, body: body, dateText: "2026-02-30T10:00:00Z"), "ISO 8601"),
            ]
            func edited(_ change: (inout HTTPFields) -> Void) -> HTTPFields {
                var headers = signer.headers(signedPath: path, body: body)
                change(&headers)
                return headers
            }
            cases += [
                ("no date", path, body, edited { $0[RequestSignature.dateHeader] = nil }, "ISO8601Date header"),
                ("no key ID", path, body, edited { $0[RequestSignature.keyIDHeader] = nil }, "KeyID header"),
                ("key ID not hex", path, body, edited { $0[RequestSignature.keyIDHeader] = String(repeating: "z", count: 64) }, "64 hexadecimal digits"),
                ("truncated key ID", path, body, edited { $0[RequestSignature.keyIDHeader] = String(signer.keyID.dropLast()) }, "64 hexadecimal digits"),
                ("unknown key", path, body, edited { $0[RequestSignature.keyIDHeader] = String(repeating: "ab", count: 32) }, "unknown server-to-server key"),
                ("signature not base64", path, body, edited { $0[RequestSignature.signatureHeader] = "!!not base64!!" }, "base64 DER"),
                ("signature not DER", path, body, edited { $0[RequestSignature.signatureHeader] = Data("hello".utf8).base64EncodedString() }, "base64 DER"),
                ("truncated signature", path, body, edited { $0[RequestSignature.signatureHeader] = String($0[RequestSignature.signatureHeader]!.dropLast(8)) }, "base64 DER"),
                ("version 2 only", path, body, edited {
                    $0[HTTPField.Name("X-Apple-CloudKit-Request-SignatureV2")!] = $0[RequestSignature.signatureHeader]
                    $0[RequestSignature.signatureHeader] = nil
                }, "unsupported signature version"),
                ("with an API token too", path + "?ckAPIToken=\(anonymous.apiToken)", body, signer.headers(signedPath: path + "?ckAPIToken=\(anonymous.apiToken)", body: body), "not both"),
            ]
            for item in cases {
                let answer = try await Self.send(harness, item.target, body: item.body, headers: item.headers)
                if item.reason.isEmpty {
                    #expect(answer.status == 200, "\(item.name): \(answer.json)")
                } else {
                    #expect(answer.status == 401 && answer.json.errorCode == "AUTHENTICATION_FAILED", "\(item.name): \(answer.json)")
                    #expect(answer.json["reason"]?.stringValue?.contains(item.reason) == true, "\(item.name): \(answer.json)")
                }
            }
            print("server-to-server signature cases: \(cases.count + 6)")

            // Another container's key, and this container's production key, open nothing here.
            let other = try await harness.container()
            let foreign = try await Self.addKey(harness, container: other.container)
            let production = try await Self.addKey(harness, container: anonymous.container, environment: .production)
            for (name, key) in [("other container", foreign), ("production key", production)] {
                let answer = try await Self.send(harness, path, body: body, headers: key.headers(signedPath: path, body: body))
                #expect(answer.status == 401 && answer.json["reason"]?.stringValue?.contains("another container or environment") == true, "\(name): \(answer.json)")
            }
        }
    }

    /// The window's edges, on the check itself (a request's own travel time would blur them).
    @Test func theDateWindowIsTenMinutesEitherWayInclusive() throws {
        let signer = Signer(keyID: String(repeating: "ab", count: 32))
        let headers = signer.headers(signedPath: "/database/1/c/development/public/zones/list", body: "", dateText: "2026-11-24T10:00:00Z")
        let signature = try RequestSignature(headers: headers)
        let date = Double(signature.date)
        #expect(signature.date == Int64(ISO8601DateFormatter().date(from: "2026-11-24T10:00:00Z")!.timeIntervalSince1970))
        for offset in [-600.0, 0, 600] { #expect(throws: Never.self) { try signature.checkDate(now: date + offset) } }
        for offset in [-600.5, 600.5, 86_400] { #expect(throws: StratusError.self) { try signature.checkDate(now: date + offset) } }
    }

    @Test func keysAreCheckedWhenAdded() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let privateKey = P256.Signing.PrivateKey()
            let other = P384.Signing.PrivateKey()
            for (name, pem, words) in [("private key", privateKey.pemRepresentation, "private key"),
                                       ("P-384 key", other.publicKey.pemRepresentation, "P-256"),
                                       ("garbage", "hello", "P-256")] {
                let answer = try await harness.admin(.post, "containers/\(anonymous.container)/keys", json: ["environment": "development", "publicKey": .string(pem)])
                #expect(answer.status == 400 && answer.json["reason"]?.stringValue?.contains(words) == true, "\(name): \(answer.json)")
            }
            let unknown = try await harness.admin(.post, "containers/\(anonymous.container)/keys/0123456789abcdef/revoke")
            #expect(unknown.status == 404, "\(unknown.json)")
            let short = try await harness.admin(.post, "containers/\(anonymous.container)/keys/0123/revoke")
            #expect(short.status == 400, "\(short.json)")
        }
    }

    @Test func aRevokedKeyIsRefusedByEveryServerProcess() async throws {
        try await Harness.run { harness in
            let anonymous = try await harness.container()
            let signer = try await Self.addKey(harness, container: anonymous.container)
            let path = "/database/1/\(anonymous.container)/development/public/zones/list"
            try await harness.otherProcess { other in
                var date = Date()
                func attempt() async throws -> Int {
                    date.addTimeInterval(1)  // a new date each time: not a replay
                    return try await Self.send(other, path, method: .get, headers: signer.headers(signedPath: path, body: "", date: date)).status
                }
                #expect(try await attempt() == 200)
                #expect(try await harness.admin(.post, "containers/\(anonymous.container)/keys/\(signer.keyID)/revoke").status == 200)
                let start = ContinuousClock.now
                var status = 200
                while status == 200, ContinuousClock.now - start < .seconds(5) {
                    status = try await attempt()
                    if status == 200 { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(status == 401, "the other process still accepted the revoked key after 5 s")
                print("a revoked key reached the other server process after \(ContinuousClock.now - start)")
            }
        }
    }

    /// Project Wycheproof's ECDSA P-256 / SHA-256 vectors through the verification signed
    /// requests use: every valid signature verifies, every invalid one (BER encodings, out-of-range
    /// r and s, edge-case keys…) is refused.
    @Test func wycheproofECDSAP256SHA256Vectors() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Data/wycheproof/ecdsa_secp256r1_sha256_test.json")
        let json = try JSONParser.parse(Array(try Data(contentsOf: file)))
        var total = 0
        var mismatches: [String] = []
        for group in json["testGroups"]?.arrayValue ?? [] {
            let keyHex = try #require(group["publicKey"]?["uncompressed"]?.stringValue)
            let key = try P256.Signing.PublicKey(x963Representation: Self.bytes(hex: keyHex))
            for test in group["tests"]?.arrayValue ?? [] {
                total += 1
                let id = test["tcId"].map { JSONWriter.string($0) } ?? "?"
                let message = Data(Self.bytes(hex: test["msg"]?.stringValue ?? ""))
                let expected = test["result"]?.stringValue == "valid"
                let signature = try? P256.Signing.ECDSASignature(derRepresentation: Self.bytes(hex: test["sig"]?.stringValue ?? ""))
                let verified = signature.map { RequestSignature.verify($0, message: message, key: key) } ?? false
                if verified != expected { mismatches.append("tcId \(id) (\(test["comment"]?.stringValue ?? "")): expected \(expected ? "valid" : "invalid")") }
            }
        }
        print("Wycheproof ECDSA P-256/SHA-256: \(total) vectors, \(mismatches.count) mismatches")
        #expect(json["numberOfTests"] == .int(Int64(total)), "vectors read: \(total)")
        #expect(total > 400)
        #expect(mismatches.isEmpty, "\(mismatches.prefix(20))")
    }

    static func bytes(hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex, let next = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) {
            bytes.append(UInt8(hex[index..<next], radix: 16) ?? 0)
            index = next
        }
        return bytes
    }
}
