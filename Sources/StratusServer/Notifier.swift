import Foundation
import Logging
import StratusCore
import StratusStore
import Synchronization

/// Turns committed record changes into notifications for the subscriptions that match them, and
/// wakes the web courier polls waiting for them.
///
/// A write's changes reach the notifier after its transaction commits (never for one rolled
/// back), in the process that made the write, before the write is answered. Each matching
/// subscription gives one notification, queued in `notifications` for every web courier token of
/// its subscriber, with a wake-up (`pg_notify`) to the polls of every server process. A subscriber
/// is notified only of records they could read at that moment: the owner in a private database,
/// the readers the security roles allow in the public one, the participants who see the record
/// through an accepted share in the shared one.
///
/// Each process keeps the subscriptions of the container-environments it writes to in memory,
/// dropped whenever any process changes them (`Invalidations`), so a write to a container with
/// no subscriptions costs one dictionary look-up.
public final class Notifier: RecordChangeObserver {
    struct Key: Hashable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
    }

    /// One container-environment's subscriptions, by what a change looks them up by.
    struct Entry: Sendable {
        var containerName: String
        /// Query subscriptions of the public database, by record type.
        var publicQueries: [String: [Watcher]] = [:]
        /// Private-database subscriptions, by subscriber.
        var privateByOwner: [UserID: [Watcher]] = [:]
        /// Shared-database subscriptions, by subscriber.
        var sharedByOwner: [UserID: [Watcher]] = [:]
        var isEmpty: Bool { publicQueries.isEmpty && privateByOwner.isEmpty && sharedByOwner.isEmpty }
    }

    struct Watcher: Sendable {
        var owner: UserID
        var scope: DatabaseScope
        var subscription: Subscription
    }

    /// Most notifications one write may queue; the rest are dropped (and logged).
    public static let maximumPerWrite = 10_000

    let records: RecordStore
    let authenticator: Authenticator
    /// Where queued notifications are counted, for `stratus usage`.
    let rateLimiter: RateLimiter
    /// Seals the zone sync tokens notifications carry.
    let sealer: TokenSealer
    let logger: Logger
    private let entries = Mutex<[Key: Entry]>([:])
    /// Polls waiting in this process, and what is known of their queues.
    let couriers = CourierWaiters()
    /// Each subscriber's web courier tokens (hashes), dropped when any process makes them a new one
    /// (`Invalidations.Event.courierTokens`).
    private let tokens = OwnerCache<String>()
    /// Rises with every invalidation of `entries`: a read that began before one is not kept (it
    /// may predate the change the invalidation announced), only used.
    private let entriesGeneration = Atomic<Int>(0)
    /// Each subscriber's push devices, dropped when any process registers one or ends the user's sessions.
    let devices = OwnerCache<PushDevice>()
    /// Sends the pushes queued here (and by every other process).
    let pushes: PushDispatcher?
    /// Notifications handed straight to a parked poll since start (the rest were queued).
    let handedOver = Atomic<Int>(0)
    /// Notifications written to the queue since start (`/metrics`).
    let queuedTotal = Atomic<Int>(0)
    /// Names this process in the wake-ups it sends, so it does not wake its own polls twice.
    let origin = String(UInt32.random(in: 0...UInt32.max), radix: 36)
    /// Owners with newly queued notifications, for the next batch of wake-ups to the other processes.
    private let wakeUps = Mutex<[Key: Set<UserID>]>([:])

    /// Wakes the polls of the other server processes for what this one queued, 5 ms after the
    /// first owner of a batch: one `pg_notify` per batch instead of one per write, since every
    /// transaction that notifies takes PostgreSQL's notification-queue lock at commit, one at a
    /// time, which held up creates while polls waited.
    func scheduleWakeUps(_ owners: Set<UserID>, key: Key) {
        let first = wakeUps.withLock { pending -> Bool in
            defer { pending[key, default: []].formUnion(owners) }
            return pending.isEmpty
        }
        guard first else { return }
        Task {
            try? await Task.sleep(for: .milliseconds(5))
            await self.flushWakeUps()
        }
    }

    func flushWakeUps() async {
        let batch = wakeUps.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
        guard !batch.isEmpty else { return }
        var events: [Invalidations.Event] = []
        for (key, owners) in batch {
            // Payloads stay well under PostgreSQL's 8,000 bytes: 100 user record names each.
            let list = Array(owners)
            for start in stride(from: 0, to: list.count, by: 100) {
                events.append(.courier(containerID: key.containerID, environment: key.environment, origin: origin,
                                       owners: Array(list[start..<min(list.count, start + 100)])))
            }
        }
        do {
            try await records.subscriptions.wakeCouriers(events)
        } catch {
            logger.warning("wake-ups for other server processes' polls were lost; they find their notifications within a poll's timeout",
                           metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
    }

    struct CourierKey: Hashable {
        var containerID: ContainerID
        var environment: ContainerEnvironment
        var owner: UserID
    }

    init(records: RecordStore, authenticator: Authenticator, rateLimiter: RateLimiter, sealer: TokenSealer, pushes: PushDispatcher? = nil,
         logger: Logger) {
        self.records = records
        self.pushes = pushes
        self.authenticator = authenticator
        self.rateLimiter = rateLimiter
        self.sealer = sealer
        self.logger = logger
        couriers.flushHeld.withLock { $0 = { [weak self] key, token, payloads in self?.queueHeld(key, token: token, payloads) } }
    }

    /// Queues notifications held for a token whose next poll did not come here in time
    /// (`CourierWaiters.held`), and wakes its polls in every process.
    /// Each keeps its coalescing key in the queue: a twin queued before or after it coalesces there.
    func queueHeld(_ key: CourierKey, token: String, _ notifications: [CourierWaiters.HeldNotification]) {
        let courierToken = CourierToken(containerID: key.containerID, environment: key.environment, owner: key.owner, tokenHash: token)
        Task {
            for held in notifications { await putBack(courierToken, seq: nil, payload: held.payload, coalesceKey: held.coalesceKey) }
            scheduleWakeUps([key.owner], key: Key(containerID: key.containerID, environment: key.environment))
        }
    }

    func invalidate(_ event: Invalidations.Event) {
        switch event {
        case .subscriptions(let containerID, let environment), .schema(let containerID, let environment, _):
            entriesGeneration.add(1, ordering: .sequentiallyConsistent)
            _ = entries.withLock { $0.removeValue(forKey: Key(containerID: containerID, environment: environment)) }
        case .courier(let containerID, let environment, let from, let owners):
            // This process woke its own polls when it queued.
            guard from != origin else { return }
            for owner in owners { couriers.wake(CourierKey(containerID: containerID, environment: environment, owner: owner)) }
        case .courierTokens(let containerID, let environment, let owner):
            // A courier token made, or a push device registered.
            tokens.forget(CourierKey(containerID: containerID, environment: environment, owner: owner))
            devices.forget(CourierKey(containerID: containerID, environment: environment, owner: owner))
        case .userSessions(let containerID, let user):
            // Signed out everywhere: their devices were forgotten.
            for environment in ContainerEnvironment.allCases {
                devices.forget(CourierKey(containerID: containerID, environment: environment, owner: user))
            }
        case .all:
            entriesGeneration.add(1, ordering: .sequentiallyConsistent)
            entries.withLock { $0.removeAll() }
            tokens.forgetAll()
            devices.forgetAll()
            couriers.wakeAll()
        default:
            break
        }
    }

    // MARK: Waiting polls

    /// Ends a poll's registration; a notification handed over as the poll ended goes back to the queue.
    func unregister(_ key: CourierKey, _ waiter: CourierWaiter) {
        couriers.remove(key, waiter)
        let left = waiter.takeAllHanded()
        if !left.isEmpty {
            let token = CourierToken(containerID: key.containerID, environment: key.environment, owner: key.owner, tokenHash: waiter.tokenHash)
            Task { for payload in left { await self.putBack(token, seq: nil, payload: payload) } }
        }
    }

    /// The web courier tokens of `owners` that have any, from memory or one statement for those not known.
    func tokenHashes(of owners: Set<UserID>, key: Key) async throws -> [UserID: [String]] {
        try await tokens.values(of: owners, containerID: key.containerID, environment: key.environment) { missing in
            try await records.subscriptions.courierTokenHashes(containerID: key.containerID, environment: key.environment, owners: missing)
        }
    }

    /// Puts back a notification whose answer could not be written, and wakes the token's polls.
    func putBack(_ token: CourierToken, seq: Int64?, payload: String, coalesceKey: String? = nil) async {
        try? await records.subscriptions.putBackNotification(token, seq: seq, payload: payload, coalesceKey: coalesceKey)
        couriers.wake(CourierKey(containerID: token.containerID, environment: token.environment, owner: token.owner))
    }

    // MARK: Matching

    /// The notifications a write's changes produce, queued for delivery.
    public func recordsChanged(_ changes: RecordChanges) async {
        do {
            let key = Key(containerID: changes.db.containerID, environment: changes.db.environment)
            let entry = try await entry(key)
            guard !entry.isEmpty else { return }
            var pending: [Made] = []
            // The writer's database's token, sealed once for all its notifications.
            var ownToken: String??
            func writersToken() -> String? {
                if let ownToken { return ownToken }
                let token = syncToken(changes, for: changes.db)
                ownToken = .some(token)
                return token
            }
            switch changes.db.scope {
            case .public:
                let schema = try await records.schemas.schema(containerID: key.containerID, environment: key.environment)
                for change in changes.changes {
                    for watcher in entry.publicQueries[change.record.recordType] ?? [] where fires(watcher.subscription, on: change, zone: changes.zone) {
                        var roles: Set<String> = []
                        if !schema.roles.isEmpty {
                            roles = try await authenticator.roles(of: watcher.owner, containerID: key.containerID, environment: key.environment)
                        }
                        guard RecordAccess(user: watcher.owner, roles: roles).allows(.read, on: change.record.recordType, creator: change.record.createdBy, in: schema) else { continue }
                        pending.append(notification(watcher, change, zone: changes.zone, zoneOwner: "_defaultOwner", entry: entry, key: key,
                                                    syncToken: writersToken()))
                    }
                }
            case .private, .shared:
                // The owner's own subscriptions.
                for watcher in entry.privateByOwner[changes.db.owner] ?? [] {
                    for change in changes.changes where fires(watcher.subscription, on: change, zone: changes.zone) {
                        pending.append(notification(watcher, change, zone: changes.zone, zoneOwner: changes.db.owner.rawValue, entry: entry, key: key,
                                                    syncToken: writersToken()))
                        if watcher.subscription.firesOnce { break }
                    }
                }
                // Participants' subscriptions in their shared databases: only those who take part in
                // a share of this zone are asked what they see (one statement finds them).
                let subscribers = entry.sharedByOwner.filter { participant, watchers in
                    participant != changes.db.owner && watchers.contains { $0.subscription.kind == .database
                        || ($0.subscription.zoneOwner == changes.db.owner && $0.subscription.zoneName == changes.zone) }
                }
                let participants = subscribers.isEmpty ? [] : try await records.subscriptions.zoneParticipants(changes.db, zone: changes.zone)
                for (participant, watchers) in subscribers where participants.contains(participant) {
                    let relevant = watchers.filter { $0.subscription.kind == .database
                        || ($0.subscription.zoneOwner == changes.db.owner && $0.subscription.zoneName == changes.zone) }
                    guard !relevant.isEmpty else { continue }
                    let visible = try await visibleChanges(changes, to: participant)
                    guard !visible.isEmpty else { continue }
                    let token = syncToken(changes, for: DatabaseRef(containerID: key.containerID, environment: key.environment, scope: .shared, owner: participant))
                    for watcher in relevant {
                        pending.append(notification(watcher, visible[0], zone: changes.zone, zoneOwner: changes.db.owner.rawValue, entry: entry, key: key,
                                                    syncToken: token))
                    }
                }
            }
            try await deliver(pending, key: key)
        } catch {
            logger.error("notifications for a committed write were lost", metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
    }

    /// A zone of a private database was deleted: its owner's subscriptions on that zone and on
    /// the database hear of it (participants lose the zone with its shares).
    public func zoneDeleted(_ db: DatabaseRef, zone: String) async {
        guard db.scope == .private else { return }
        do {
            let key = Key(containerID: db.containerID, environment: db.environment)
            let entry = try await entry(key)
            let watchers = (entry.privateByOwner[db.owner] ?? []).filter {
                $0.subscription.kind == .database || ($0.subscription.kind == .zone && $0.subscription.zoneName == zone)
            }
            try await deliver(watchers.map { notification($0, nil, zone: zone, zoneOwner: db.owner.rawValue, entry: entry, key: key, syncToken: nil) }, key: key)
        } catch {
            logger.error("notifications for a deleted zone were lost", metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
    }

    /// Queues notifications (at most `maximumPerWrite`, and what the container-environment's
    /// `notificationsPerSecond` leaves), wakes the polls waiting for them, counts them, and
    /// deletes the firesOnce subscriptions that fired.
    func deliver(_ made: [Made], key: Key) async throws {
        guard !made.isEmpty else { return }
        var pending = made
        if pending.count > Self.maximumPerWrite {
            logger.warning("a write matched more subscriptions than one write may notify; the rest were dropped",
                           metadata: ["stratus.matched": "\(pending.count)", "stratus.limit": "\(Self.maximumPerWrite)"])
            pending.removeLast(pending.count - Self.maximumPerWrite)
        }
        // The container-environment's notificationsPerSecond: past it, the rest are dropped (and
        // counted); clients find the changes in the change feed.
        let allowed = await rateLimiter.admitNotifications(pending.count, containerID: key.containerID, environment: key.environment)
        if allowed < pending.count {
            pending.removeLast(pending.count - allowed)
            guard !pending.isEmpty else { return }
        }
        // Each notification goes to every web courier token of its subscriber: straight to a poll of
        // the token parked in this process if there is one, or held in memory for the next poll of
        // a token polled here a moment ago (no statement at all: `CourierWaiters.held`), else to the queue.
        let hashes = try await tokenHashes(of: Set(pending.map(\.pending.owner)), key: key)
        var handed = 0
        var rows: [QueuedNotification] = []
        for item in pending {
            let courier = CourierKey(containerID: key.containerID, environment: key.environment, owner: item.pending.owner)
            for token in hashes[item.pending.owner] ?? [] {
                switch couriers.offer(item.pending.payload, to: courier, token: token, coalesceKey: item.pending.coalesceKey) {
                case true?:
                    handed += 1
                case nil:
                    break  // coalesced with one held for the token's next poll
                case false?:
                    rows.append(QueuedNotification(owner: item.pending.owner, tokenHash: token, payload: item.pending.payload,
                                                   coalesceKey: item.pending.coalesceKey))
                }
            }
        }
        if handed > 0 { handedOver.add(handed, ordering: .relaxed) }
        let queued = try await records.subscriptions.queueNotifications(containerID: key.containerID, environment: key.environment, rows)
        if !queued.isEmpty {
            queuedTotal.add(queued.values.reduce(0, +), ordering: .relaxed)
            // This process's polls at once; the other processes' with the next batch of wake-ups.
            let owners = Set(rows.map(\.owner))
            for owner in owners { couriers.wake(CourierKey(containerID: key.containerID, environment: key.environment, owner: owner)) }
            scheduleWakeUps(owners, key: key)
        }
        rateLimiter.noteNotifications(Int64(handed + queued.values.reduce(0, +)), containerID: key.containerID, environment: key.environment)
        do {
            try await queuePushes(pending, key: key)
        } catch {
            logger.error("pushes for a committed write were lost (its web courier notifications were queued)",
                         metadata: ["stratus.error": "\(String(reflecting: error))"])
        }
        try await retireFiredOnce(pending, key: key)
    }

    /// What a zone or database subscription, or a query subscription's filters and firesOn, say of one change.
    func fires(_ subscription: Subscription, on change: RecordChange, zone: String) -> Bool {
        switch subscription.kind {
        case .database:
            return true
        case .zone:
            return subscription.zoneName == zone
        case .query:
            guard let query = subscription.query, subscription.firesOn.contains(change.kind.firing) else { return false }
            if let watched = subscription.zoneName, watched != zone { return false }
            return query.matches(change.record)
        }
    }

    /// The changes a participant sees through the shares they accepted in the changed zone.
    func visibleChanges(_ changes: RecordChanges, to participant: UserID) async throws -> [RecordChange] {
        let db = changes.db
        guard let access = try await records.sharing.shareAccess(containerID: db.containerID, environment: db.environment, user: participant,
                                                         owner: db.owner, zone: changes.zone) else { return [] }
        if access.roots == nil { return changes.changes }
        var visible: [RecordChange] = []
        let saved = changes.changes.filter { $0.kind != .delete }.map(\.record.recordName)
        let seen = saved.isEmpty ? [:] : try await records.sharing.sharedLookup(containerID: db.containerID, environment: db.environment, user: participant,
                                                                         owner: db.owner, zone: changes.zone, names: saved)?.1 ?? [:]
        for change in changes.changes {
            if change.kind == .delete ? access.canSee(change.record.shareRoot) : seen[change.record.recordName] != nil { visible.append(change) }
        }
        return visible
    }

    struct Made {
        var pending: PendingNotification
        var watcher: Watcher
        /// The notification (`pending.payload` is its text).
        var json: JSON
    }

    /// A zone sync token (for `changes/zone` in `db`, the subscriber's view of the changed zone)
    /// positioned just before the write's first change: the feed read from it returns the change
    /// the notification is about and every later one.
    func syncToken(_ changes: RecordChanges, for db: DatabaseRef) -> String? {
        guard let start = changes.start else { return nil }
        return SyncTokens.token(db, zoneID: changes.zoneID, cursor: FeedCursor(position: start), sealer: sealer)
    }

    func notification(_ watcher: Watcher, _ change: RecordChange?, zone: String, zoneOwner: String, entry: Entry, key: Key,
                      syncToken: String?) -> Made {
        let payload = Self.payload(watcher.subscription, change: change, zone: zone, zoneOwner: zoneOwner, scope: watcher.scope,
                                   containerName: entry.containerName, environment: key.environment, syncToken: syncToken)
        // Zone and database notifications of one subscription coalesce while one waits.
        let coalesceKey = watcher.subscription.kind == .query ? nil : "\(watcher.scope.code):\(watcher.subscription.id)"
        return Made(pending: PendingNotification(owner: watcher.owner, payload: JSONWriter.string(payload), coalesceKey: coalesceKey), watcher: watcher,
                    json: payload)
    }

    /// The APNs-shaped payload CloudKit JS parses: `aps` from the subscription's notificationInfo,
    /// `ck` with the notification and container IDs and `qry` (query), `fet` (zone) or `met`
    /// (database) naming the subscription and what changed. Query and zone notifications add
    /// `stk` (Stratus's own key): a `changes/zone` sync token from just before the change.
    static func payload(_ subscription: Subscription, change: RecordChange?, zone: String, zoneOwner: String, scope: DatabaseScope,
                        containerName: String, environment: ContainerEnvironment, syncToken: String? = nil) -> JSON {
        var ck: [String: JSON] = ["nid": .string(RandomUUID.string()), "cid": .string(containerName), "ce": .int(environment == .production ? 2 : 1)]
        switch subscription.kind {
        case .query:
            var qry: [String: JSON] = ["sid": .string(subscription.id), "rid": .string(change?.record.recordName ?? ""), "zid": .string(zone),
                                       "zoid": .string(zoneOwner), "dbs": .int(Int64(scope.code)), "fo": .int(Int64(change?.kind.rawValue ?? 0))]
            if let syncToken { qry["stk"] = .string(syncToken) }
            if let keys = subscription.notificationInfo?["desiredKeys"]?.arrayValue, let record = change?.record, change?.kind != .delete {
                var fields: [String: JSON] = [:]
                for key in keys.compactMap(\.stringValue) { if let value = record.fields[key] { fields[key] = value.valueJSON() } }
                if !fields.isEmpty { qry["af"] = .object(fields) }
            }
            ck["qry"] = .object(qry)
        case .zone:
            var fet: [String: JSON] = ["sid": .string(subscription.id), "zid": .string(zone), "zoid": .string(zoneOwner), "dbs": .int(Int64(scope.code))]
            if let syncToken { fet["stk"] = .string(syncToken) }
            ck["fet"] = .object(fet)
        case .database:
            ck["met"] = ["sid": .string(subscription.id), "dbs": .int(Int64(scope.code))]
        }
        var aps: [String: JSON] = [:]
        if let info = subscription.notificationInfo?.objectValue {
            var alert: [String: JSON] = [:]
            for (from, to) in [("alertBody", "body"), ("alertLocalizationKey", "loc-key"), ("alertLocalizationArgs", "loc-args"),
                               ("alertActionLocalizationKey", "action-loc-key"), ("alertLaunchImage", "launch-image")] {
                if let value = info[from], value != .null { alert[to] = value }
            }
            if !alert.isEmpty { aps["alert"] = .object(alert) }
            if let sound = info["soundName"], sound != .null { aps["sound"] = sound }
            if info["shouldBadge"] == true { aps["badge"] = 1 }
            if info["shouldSendContentAvailable"] == true { aps["content-available"] = 1 }
            if let category = info["category"], category != .null { aps["category"] = category }
        }
        return ["aps": .object(aps), "ck": .object(ck)]
    }

    /// Deletes the firesOnce subscriptions that just fired.
    func retireFiredOnce(_ made: [Made], key: Key) async throws {
        var once: [DatabaseRef: Set<String>] = [:]
        for item in made where item.watcher.subscription.firesOnce {
            once[DatabaseRef(containerID: key.containerID, environment: key.environment, scope: item.watcher.scope, owner: item.watcher.owner),
                 default: []].insert(item.watcher.subscription.id)
        }
        for (db, ids) in once { try? await records.subscriptions.deleteSubscriptions(db, ids: Array(ids)) }
        if !once.isEmpty { invalidate(.subscriptions(containerID: key.containerID, environment: key.environment)) }
    }

    /// The subscriptions of a container-environment, loaded once and kept until they change.
    func entry(_ key: Key) async throws -> Entry {
        if let entry = entries.withLock({ $0[key] }) { return entry }
        let generation = entriesGeneration.load(ordering: .sequentiallyConsistent)
        let listings = try await records.subscriptions.allSubscriptions(containerID: key.containerID, environment: key.environment, owner: nil)
        var entry = Entry(containerName: try await records.subscriptions.containerName(key.containerID))
        let schema = listings.contains { $0.subscription.kind == .query }
            ? try await records.schemas.schema(containerID: key.containerID, environment: key.environment) : Schema()
        for listing in listings {
            var subscription = listing.subscription
            if subscription.kind == .query {
                // A query the schema no longer accepts matches nothing until it is fixed.
                guard let json = subscription.queryJSON, let query = try? Query.parse(json, schema: schema) else { continue }
                subscription.query = query
            }
            let watcher = Watcher(owner: listing.owner, scope: listing.scope, subscription: subscription)
            switch listing.scope {
            case .public: entry.publicQueries[subscription.recordType ?? "", default: []].append(watcher)
            case .private: entry.privateByOwner[listing.owner, default: []].append(watcher)
            case .shared: entry.sharedByOwner[listing.owner, default: []].append(watcher)
            }
        }
        entries.withLock { cached in
            if entriesGeneration.load(ordering: .sequentiallyConsistent) == generation { cached[key] = entry }
        }
        return entry
    }
}
