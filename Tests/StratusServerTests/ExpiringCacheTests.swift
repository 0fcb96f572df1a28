@testable import StratusServer
@testable import StratusTestSupport
import Testing

/// The bounded caches the authenticator keeps tokens and containers in.
@Suite struct ExpiringCacheTests {
    let now = ContinuousClock.now

    @Test func expiredEntriesAreNotServed() {
        var cache = ExpiringCache<String, Int>(capacity: 4)
        cache.set(1, for: "live", expires: now + .seconds(60), now: now)
        cache.set(2, for: "stale", expires: now - .seconds(1), now: now)
        #expect(cache.value(for: "live", now: now) == 1)
        #expect(cache.value(for: "stale", now: now) == nil)
        #expect(cache.value(for: "live", now: now + .seconds(61)) == nil)
    }

    /// A full cache makes room from its expired entries first, so no live entry is lost.
    @Test func aFullCacheDropsExpiredEntriesFirst() {
        var cache = ExpiringCache<String, Int>(capacity: 4)
        cache.set(1, for: "a", expires: now + .seconds(60), now: now)
        cache.set(2, for: "b", expires: now + .seconds(60), now: now)
        cache.set(3, for: "old1", expires: now + .seconds(1), now: now)
        cache.set(4, for: "old2", expires: now + .seconds(1), now: now)
        let later = now + .seconds(2)
        cache.set(5, for: "c", expires: later + .seconds(60), now: later)
        #expect(cache.count == 3)
        #expect([cache.value(for: "a", now: later), cache.value(for: "b", now: later), cache.value(for: "c", now: later)] == [1, 2, 5])
    }

    /// With only live entries, a full cache keeps about half of them (the old bound emptied the
    /// whole token cache, so 10,001 tenants calling in turn never hit it) and never grows past
    /// its capacity, however many new keys arrive.
    @Test func aFullCacheKeepsHalfAndStaysBounded() {
        var cache = ExpiringCache<Int, Int>(capacity: 100)
        for key in 0..<100 { cache.set(key, for: key, expires: now + .seconds(60), now: now) }
        cache.set(100, for: 100, expires: now + .seconds(60), now: now)
        #expect(cache.count == 51)
        #expect(cache.value(for: 100, now: now) == 100)
        #expect((0..<100).filter { cache.value(for: $0, now: now) == $0 }.count == 50)
        for key in 101..<10_000 {
            cache.set(key, for: key, expires: now + .seconds(60), now: now)
            #expect(cache.count <= 100)
        }
        // Updating a key that is present never evicts.
        let before = cache.count
        cache.set(0, for: 9_999, expires: now + .seconds(60), now: now)
        #expect(cache.count == before)
        #expect(cache.value(for: 9_999, now: now) == 0)
    }

    /// When only a few entries have expired, a full cache still frees a quarter of itself or
    /// more, so the next new keys do not each pay for rebuilding it.
    @Test func aFullCacheFreesAtLeastAQuarter() {
        var cache = ExpiringCache<Int, Int>(capacity: 100)
        cache.set(0, for: 0, expires: now + .seconds(1), now: now)
        for key in 1..<100 { cache.set(key, for: key, expires: now + .seconds(60), now: now) }
        let later = now + .seconds(2)
        cache.set(100, for: 100, expires: later + .seconds(60), now: later)
        #expect(cache.count <= 76)
        #expect(cache.value(for: 100, now: later) == 100)
        // The next quarter of new keys go in without another rebuild: each adds exactly one entry.
        var inserted = 0
        while cache.count < 100, inserted < 100 {
            let before = cache.count
            cache.set(inserted, for: 1_000 + inserted, expires: later + .seconds(60), now: later)
            #expect(cache.count == before + 1)
            inserted += 1
        }
        #expect(inserted >= 24)
    }

    @Test func removeAllWhere() {
        var cache = ExpiringCache<String, Int?>(capacity: 8)
        cache.set(7, for: "seven", expires: now + .seconds(60), now: now)
        cache.set(8, for: "eight", expires: now + .seconds(60), now: now)
        cache.set(nil, for: "unknown", expires: now + .seconds(60), now: now)
        cache.removeAll { $0 == 7 }
        #expect(cache.value(for: "seven", now: now) == nil)
        #expect(cache.value(for: "eight", now: now) == .some(8))
        #expect(cache.value(for: "unknown", now: now) == .some(nil))
    }
}
