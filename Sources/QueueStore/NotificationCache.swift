import PushDispatch

/// Renderings of notifications whose jobs this process left in the store, by notification row: a
/// lease of those jobs here then needs no read of the notification back from the store. Bounded by
/// a count and by the bytes of the stored bodies the renderings stand for (a notification's memory
/// grows with its tokens, so a count alone bounds nothing); beyond that a lease reads the
/// notification back from the store.
struct NotificationCache {
    struct Entry {
        var accepted: AcceptedNotification
        var at: Double
        /// Its stored body's size (the cache's budget: `maxBytes`).
        var bytes: Int
        /// Its jobs this process left in the store and has not leased back yet (nil: unknown, read
        /// back from the store for a lease). At 0 it is dropped: nothing here needs it any more.
        var leftInStore: Int?
    }

    /// `maxCachedNotifications`.
    var maxCount = 0
    /// `maxCachedNotificationBytes`.
    var maxBytes = 0
    private(set) var entries: [Int64: Entry] = [:]
    /// Sum of `entries[…].bytes`.
    private(set) var bytes = 0
    /// How many of `entries` were read back from the store (`leftInStore` nil): the ones a full
    /// cache can give up for a new notification.
    private(set) var readBack = 0

    subscript(row: Int64) -> Entry? { entries[row] }

    /// Keeps a rendering for jobs leased from the store later, within `maxCount` and `maxBytes`.
    /// When it does not fit, the renderings read back for earlier leases are dropped first (leases
    /// go in job order: their notifications are behind).
    mutating func add(_ row: Int64, _ entry: Entry) {
        guard entries[row] == nil, entry.bytes <= maxBytes else { return }
        func fits(_ c: NotificationCache) -> Bool {
            c.entries.count < maxCount && c.bytes + entry.bytes <= maxBytes
        }
        if !fits(self) {
            // Nothing to give up: no scan of the whole cache for each notification that does not fit.
            guard readBack > 0 else { return }
            keep { $0.leftInStore != nil }
            if !fits(self) { return }
        }
        entries[row] = entry
        bytes += entry.bytes
        if entry.leftInStore == nil { readBack += 1 }
    }

    /// Keeps only the renderings `keep` accepts (and their byte count with them).
    mutating func keep(where keep: (Entry) -> Bool) {
        entries = entries.filter { keep($0.value) }
        bytes = 0
        readBack = 0
        for c in entries.values {
            bytes += c.bytes
            if c.leftInStore == nil { readBack += 1 }
        }
    }

    /// One job of notification `row` leased back: its rendering is dropped once no job left here needs it.
    mutating func leasedBack(_ row: Int64) {
        guard let left = entries[row]?.leftInStore else { return }
        if left <= 1 {
            bytes -= entries.removeValue(forKey: row)?.bytes ?? 0
        } else {
            entries[row]!.leftInStore = left - 1
        }
    }
}
