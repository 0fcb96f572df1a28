import Foundation
import StratusCore
@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// `--trusted-proxies`: behind a load balancer every connection comes from the balancer, so the
/// client's address is read from `X-Forwarded-For`, but only on connections from a listed proxy;
/// anyone else's header is ignored. Shown through the per-address sign-up limit and the
/// per-address connection limit, on a live server, clients bound to distinct loopback addresses.
@Suite(.timeLimit(.minutes(TestTime.minutes(10)))) struct TrustedProxyTests {
    static let proxy = "127.0.0.9"

    static func signUp(_ session: Session, port: Int, from address: String, forwardedFor: String?, email: String) async throws -> RawResponse {
        let body = JSONWriter.string(["emailAddress": .string(email), "password": "correct horse battery"])
        let connection = try await RawConnection(port: port, from: address)
        let forwarded = forwardedFor.map { "X-Forwarded-For: \($0)\r\n" } ?? ""
        try await connection.send("""
            POST /auth/1/\(session.container)/\(session.environment.rawValue)/signup?ckAPIToken=\(session.apiToken) HTTP/1.1\r
            Host: x\r\n\(forwarded)Content-Type: text/plain\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)
            """)
        let (responses, _) = try await connection.responses(count: 1)
        let response = try #require(responses.first, "no answer to a sign-up from \(address): \(connection.timeline)")
        TestSecrets.record(response.json["ckWebAuthToken"]?.stringValue)
        return response
    }

    @Test func aListedProxyNamesTheClientAndNoOneElseCan() async throws {
        try await Harness.run(live: true, poolSize: 8, server: {
            $0.trustedProxies = try! TrustedProxies(parsing: "\(Self.proxy), 10.0.0.0/8")
        }) { harness in
            let port = try #require(harness.client.port)
            let session = try await harness.container()
            try await SignupLimitTests.setLimits(harness, session.container, ["signupsPerAddressPerHour": 2])
            var number = 0
            func attempt(from address: String, forwardedFor: String?) async throws -> Int {
                number += 1
                return try await Self.signUp(session, port: port, from: address, forwardedFor: forwardedFor, email: "p\(number)@example.com").status
            }
            // Through the proxy: each client has its own two sign-ups. The header is read from
            // its right end, past listed proxies (10.1.2.3); what a client put further left is ignored.
            let first = [try await attempt(from: Self.proxy, forwardedFor: "198.51.100.1"),
                         try await attempt(from: Self.proxy, forwardedFor: "203.0.113.66, 198.51.100.1"),
                         try await attempt(from: Self.proxy, forwardedFor: "198.51.100.1, 10.1.2.3")]
            #expect(first == [200, 200, 429], "one client behind the proxy: \(first)")
            let second = [try await attempt(from: Self.proxy, forwardedFor: "198.51.100.2"),
                          try await attempt(from: Self.proxy, forwardedFor: "198.51.100.2")]
            #expect(second == [200, 200], "another client behind the proxy: \(second)")
            // A connection from an address not listed: its header changes nothing.
            let direct = [try await attempt(from: "127.0.0.10", forwardedFor: "198.51.100.3"),
                          try await attempt(from: "127.0.0.10", forwardedFor: "198.51.100.4"),
                          try await attempt(from: "127.0.0.10", forwardedFor: "198.51.100.5")]
            #expect(direct == [200, 200, 429], "a client forging the header: \(direct)")
            // The proxy's own address never used a sign-up of its own: without a header it has two.
            #expect(try await attempt(from: Self.proxy, forwardedFor: nil) == 200)
        }
    }

    @Test func aListedProxyIsNotHeldToOneClientsConnectionLimit() async throws {
        try await Harness.run(live: true, server: {
            $0.maximumConnectionsPerAddress = 2
            $0.trustedProxies = try! TrustedProxies(parsing: Self.proxy)
        }) { harness in
            let port = try #require(harness.client.port)
            let health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
            func hold(from address: String, count: Int) async throws -> [Int] {
                var statuses: [Int] = []
                var held: [RawConnection] = []
                for _ in 0..<count {
                    let connection = try await RawConnection(port: port, from: address)
                    try await connection.send(health)
                    statuses.append(RawConnection.parse(try await connection.text(until: { RawConnection.parse($0).count == 1 })).first?.status ?? 0)
                    held.append(connection)
                }
                for connection in held { try? await connection.shutdownOutput() }
                return statuses
            }
            #expect(try await hold(from: Self.proxy, count: 4) == [200, 200, 200, 200])
            #expect(try await hold(from: "127.0.0.11", count: 3) == [200, 200, 429])
        }
    }

    @Test func addressesAndBlocksParse() throws {
        let proxies = try TrustedProxies(parsing: " 10.0.0.0/8, 192.168.1.7 ,fd00::/8, ::1")
        #expect(proxies.contains("10.200.3.4") && proxies.contains("192.168.1.7") && !proxies.contains("192.168.1.8"))
        #expect(proxies.contains("fd12::1") && !proxies.contains("fe80::1") && proxies.contains("::1") && proxies.contains("[::1]"))
        #expect(proxies.contains("::ffff:10.1.1.1"), "an IPv4-mapped address is its IPv4 address")
        #expect(proxies.client(peer: "10.0.0.5", forwardedFor: ["1.2.3.4, 10.9.9.9"]) == "1.2.3.4")
        #expect(proxies.client(peer: "10.0.0.5", forwardedFor: ["garbage"]) == "10.0.0.5", "a header the proxy did not write names no one")
        #expect(proxies.client(peer: "8.8.8.8", forwardedFor: ["1.2.3.4"]) == "8.8.8.8")
        #expect(proxies.client(peer: "10.0.0.5", forwardedFor: []) == "10.0.0.5")
        for bad in ["10.0.0.0/33", "example.com", "1.2.3", "::1/129"] {
            #expect(throws: TrustedProxiesError.self, "\(bad)") { try TrustedProxies(parsing: bad) }
        }
        #expect(try TrustedProxies(parsing: "").isEmpty)
    }
}
