import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The proxies whose `X-Forwarded-For` the server believes (`stratus serve --trusted-proxies`).
///
/// By default none: a request's client address is the connection's, which no client can forge.
/// Behind a load balancer that address is the balancer's, and every per-address limit (sign-in
/// failures, sign-ups, connections) would count all clients as one. With the balancer's
/// addresses listed, a request that arrives from one of them is taken to come from the address
/// the balancer appended to `X-Forwarded-For`: the header is read from its right end, skipping
/// listed proxies, and the first address that is not one is the client (addresses further left
/// were written by the client and prove nothing). A listed proxy's connections are not counted
/// against the per-address connection limit.
public struct TrustedProxies: Sendable, Equatable {
    /// An address block: the address's bytes and the prefix length in bits.
    struct Block: Sendable, Equatable {
        let bytes: [UInt8]
        let bits: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var remaining = bits
            for (a, b) in zip(address, bytes) where remaining > 0 {
                let take = min(8, remaining)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - take))
                if a & mask != b & mask { return false }
                remaining -= take
            }
            return true
        }
    }

    let blocks: [Block]
    public static let none = TrustedProxies(blocks: [])
    public var isEmpty: Bool { blocks.isEmpty }

    init(blocks: [Block]) { self.blocks = blocks }

    /// Parses a comma-separated list of addresses and CIDR blocks (`10.0.0.0/8, 127.0.0.1, fd00::/8`).
    public init(parsing text: String) throws {
        var blocks: [Block] = []
        for item in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !item.isEmpty {
            let parts = item.split(separator: "/", maxSplits: 1).map(String.init)
            guard let bytes = Self.bytes(of: parts[0]) else {
                throw TrustedProxiesError("'\(item)' is not an IP address or CIDR block (such as 10.0.0.0/8 or fd00::/8)")
            }
            var bits = bytes.count * 8
            if parts.count == 2 {
                guard let prefix = Int(parts[1]), (0...bytes.count * 8).contains(prefix) else {
                    throw TrustedProxiesError("'\(item)': the prefix length must be 0–\(bytes.count * 8)")
                }
                bits = prefix
            }
            blocks.append(Block(bytes: bytes, bits: bits))
        }
        self.blocks = blocks
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 address (an IPv4-mapped IPv6 address as IPv4).
    static func bytes(of address: String) -> [UInt8]? {
        var text = address.trimmingCharacters(in: .whitespaces)
        if text.hasPrefix("["), text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            if bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xFF && bytes[11] == 0xFF { return Array(bytes[12...]) }
            return bytes
        }
        return nil
    }

    public func contains(_ address: String) -> Bool {
        guard !blocks.isEmpty, let bytes = Self.bytes(of: address) else { return false }
        return blocks.contains { $0.contains(bytes) }
    }

    /// The client of a request that arrived from `peer` with these `X-Forwarded-For` values.
    public func client(peer: String?, forwardedFor: [String]) -> String? {
        guard let peer, contains(peer) else { return peer }
        let chain = forwardedFor.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        for address in chain.reversed() {
            guard Self.bytes(of: address) != nil else { return peer }  // garbage: the proxy did not write it
            if !contains(address) { return address }
        }
        return chain.first.flatMap { Self.bytes(of: $0) != nil ? $0 : nil } ?? peer
    }
}

public struct TrustedProxiesError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
