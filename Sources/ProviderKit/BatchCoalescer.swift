/// Group commit of sends a vendor can carry in one request (OPPO's `unicast_batch`, vivo's
/// `pushToList`), inside a provider: the dispatcher still makes one `send` call per delivery.
///
/// Per key (what one request may carry together: an app, or an app and one rendered payload) at
/// most one request is in flight. A call for a key with none in flight goes out at once, alone, so
/// one caller at a time sees exactly the single-send path. Calls arriving while a request for their
/// key is in flight wait; when it finishes, the waiters go together in the next request, up to
/// `maxBatch` items and `maxCost` (the items' summed `cost`), the rest in the one after. No timer or
/// deadline decides a batch: only what is waiting when the previous request ends.
///
/// Every caller gets its own item's result. A waiting caller that is cancelled, or waiting when
/// the coalescer is closed, gets `unsent(item, why)` at once; a closed coalescer sends nothing new.
/// Waiting callers are bounded by `maxWaiting` (the dispatcher's concurrency bounds them already):
/// a call beyond it goes alone instead of waiting, so memory stays bounded whatever the callers.
public actor BatchCoalescer<Key: Hashable & Sendable, Item: Sendable, Result: Sendable> {
    /// Sends `items` (all of one key) in one request; answers one result per item, in order.
    public typealias Send = @Sendable (_ key: Key, _ items: [Item]) async -> [Result]
    /// The result of an item that was not sent, or that the request's answer said nothing of.
    public typealias Unsent = @Sendable (_ item: Item, _ why: String) -> Result

    public nonisolated let maxBatch: Int
    public nonisolated let maxCost: Int
    public nonisolated let maxWaiting: Int
    private let cost: @Sendable (Item) -> Int
    private let sendBatch: Send
    private let unsent: Unsent

    private struct Waiter {
        let id: UInt64
        let item: Item
        let continuation: CheckedContinuation<Result, Never>
    }

    /// One key's requests: whether one is in flight, and who waits for the next.
    private struct Lane {
        var waiting: [Waiter] = []
    }

    private var lanes: [Key: Lane] = [:]
    private var drains: [Key: Task<Void, Never>] = [:]
    private var waitingCount = 0
    private var nextID: UInt64 = 0
    private var closed = false

    /// Requests made (of any size).
    public private(set) var requests = 0
    /// Items carried by requests of two or more.
    public private(set) var batchedItems = 0
    /// The most callers ever waiting at once.
    public private(set) var mostWaiting = 0
    /// Calls that went alone because `maxWaiting` callers were waiting already.
    public private(set) var overflowed = 0

    public init(
        maxBatch: Int, maxCost: Int = .max, maxWaiting: Int, cost: @escaping @Sendable (Item) -> Int = { _ in 1 },
        unsent: @escaping Unsent, send: @escaping Send
    ) {
        self.maxBatch = max(1, maxBatch)
        self.maxCost = max(1, maxCost)
        self.maxWaiting = max(0, maxWaiting)
        self.cost = cost
        self.unsent = unsent
        self.sendBatch = send
    }

    /// Callers waiting now.
    public var waiting: Int { waitingCount }

    /// Sends `item` with others of `key` when a request for `key` is in flight, else at once.
    public func submit(_ item: Item, key: Key) async -> Result {
        if closed { return unsent(item, "shutting down") }
        guard lanes[key] != nil else {
            // Nothing in flight for the key: this request goes now, alone.
            lanes[key] = Lane()
            let result = await send(key, [item])[0]
            startNext(key)
            return result
        }
        guard waitingCount < maxWaiting else {
            overflowed += 1
            return await send(key, [item])[0]
        }
        let id = nextID
        nextID &+= 1
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Result, Never>) in
                if Task.isCancelled || closed || lanes[key] == nil {
                    c.resume(returning: unsent(item, closed ? "shutting down" : "cancelled"))
                    return
                }
                lanes[key]?.waiting.append(Waiter(id: id, item: item, continuation: c))
                waitingCount += 1
                mostWaiting = max(mostWaiting, waitingCount)
            }
        } onCancel: {
            Task { await self.cancel(id, key: key) }
        }
    }

    /// Answers every waiting caller `unsent(…, "shutting down")`, stops the requests in flight
    /// (their callers get what the send answers when cancelled) and sends nothing new.
    public func close() async {
        closed = true
        for (key, lane) in lanes {
            for w in lane.waiting { w.continuation.resume(returning: unsent(w.item, "shutting down")) }
            waitingCount -= lane.waiting.count
            lanes[key]?.waiting = []
        }
        let running = Array(drains.values)
        for t in running { t.cancel() }
        for t in running { await t.value }
    }

    private func cancel(_ id: UInt64, key: Key) {
        guard let i = lanes[key]?.waiting.firstIndex(where: { $0.id == id }), let w = lanes[key]?.waiting.remove(at: i) else { return }
        waitingCount -= 1
        w.continuation.resume(returning: unsent(w.item, "cancelled"))
    }

    /// One request; exactly one result per item whatever the send answered.
    private func send(_ key: Key, _ items: [Item]) async -> [Result] {
        requests += 1
        if items.count > 1 { batchedItems += items.count }
        var results = await sendBatch(key, items)
        if results.count > items.count { results.removeLast(results.count - items.count) }
        while results.count < items.count { results.append(unsent(items[results.count], "the request's answer has no result for it")) }
        return results
    }

    /// The request for `key` ended: the waiters, if any, go in the next (in a task of the
    /// coalescer's, so the caller that just finished is not held up); else the key is idle.
    private func startNext(_ key: Key) {
        guard let lane = lanes[key], !lane.waiting.isEmpty, !closed else {
            lanes[key] = nil
            return
        }
        drains[key] = Task { await self.drain(key) }
    }

    private func drain(_ key: Key) async {
        while let lane = lanes[key], !lane.waiting.isEmpty {
            var taken = 0
            var total = 0
            for w in lane.waiting {
                let c = max(0, cost(w.item))
                if taken >= maxBatch || (taken > 0 && total > maxCost - c) { break }
                taken += 1
                total = min(maxCost, total + c)
            }
            let batch = Array(lane.waiting.prefix(taken))
            lanes[key]?.waiting.removeFirst(taken)
            waitingCount -= taken
            let results = await send(key, batch.map(\.item))
            for (w, r) in zip(batch, results) { w.continuation.resume(returning: r) }
        }
        lanes[key] = nil
        drains[key] = nil
    }
}
