/// A bounded map whose entries expire. When it is full, an insert first drops the expired
/// entries and then, if that freed less than a quarter of it, an arbitrary half of the rest:
/// never everything at once, so a working set larger than the bound still mostly hits, and a
/// flood of new keys (say, made-up tokens) cannot grow it without limit. Each such rebuild
/// frees at least a quarter, so the O(n) rebuild runs at most once per `capacity / 4` new keys.
struct ExpiringCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private var entries: [Key: (value: Value, expires: ContinuousClock.Instant)] = [:]
    let capacity: Int

    init(capacity: Int) {
        precondition(capacity > 0)
        self.capacity = capacity
    }

    var count: Int { entries.count }

    /// The value stored for `key`, unless it has expired by `now`.
    func value(for key: Key, now: ContinuousClock.Instant) -> Value? {
        guard let entry = entries[key], entry.expires > now else { return nil }
        return entry.value
    }

    mutating func set(_ value: Value, for key: Key, expires: ContinuousClock.Instant, now: ContinuousClock.Instant) {
        if entries.count >= capacity, entries[key] == nil {
            entries = entries.filter { $0.value.expires > now }
            if entries.count > capacity * 3 / 4 {
                var kept = 0
                entries = entries.filter { _ in
                    kept += 1
                    return kept % 2 == 0
                }
            }
        }
        entries[key] = (value, expires)
    }

    mutating func remove(_ key: Key) {
        entries[key] = nil
    }

    mutating func removeAll(where shouldRemove: (Value) -> Bool) {
        entries = entries.filter { !shouldRemove($0.value.value) }
    }

    mutating func removeAllKeys(where shouldRemove: (Key) -> Bool) {
        entries = entries.filter { !shouldRemove($0.key) }
    }
}
