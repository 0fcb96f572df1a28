import NIOCore
import NIOPosix
@testable import StratusStore
@testable import StratusTestSupport
import Testing

/// `PerEventLoop` gives work on each event loop that loop's value: the connection pools and the
/// query sharings rely on it to keep a request's database work on its own thread.
@Suite struct PerEventLoopTests {
    @Test func eachLoopGetsItsOwnValueAndOtherCallersTheFirst() async throws {
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        let perLoop = PerEventLoop { _, index, count in
            #expect(count == loops.count)
            return index
        }
        #expect(perLoop.values == Array(loops.indices))
        for (index, loop) in loops.enumerated() {
            #expect(try await loop.submit { perLoop.current }.get() == index, "loop \(index)")
        }
        #expect(perLoop.current == 0, "off every loop: the first value")
        let mapped = perLoop.map { "sharing" }
        #expect(mapped.values.count == loops.count)
    }

    @Test func aSingleValueServesEveryLoop() async throws {
        let single = PerEventLoop(single: 7)
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            #expect(try await loop.submit { single.current }.get() == 7)
        }
        #expect(single.map { 1 }.values == [1])
    }
}
