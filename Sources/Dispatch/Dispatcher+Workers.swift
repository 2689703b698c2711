import Foundation
import NIOConcurrencyHelpers
import NIOCore
import PushgateCore

/// The workers: one pool per platform fed by the queue; each delivery rendered (when the queue
/// did not keep its rendering), sent, and stepped through `DeliveryLifecycle`.
extension Dispatcher {
    /// Runs the worker pools until `shutdown()`: one per platform any app serves, and one more when a
    /// reload adds a platform. Call once.
    public func run() async {
        await withDiscardingTaskGroup { group in
            for await platform in feedStream {
                group.addTask { await self.feed(platform: platform) }
            }
        }
    }

    /// The workers of one platform. With event loops (see `EventLoopTaskExecutor`): one feed loop per
    /// event loop, each with its share of `max_concurrent_pushes`, run with that loop as its task
    /// executor, so that the handoff from the queue, the send, the answer and the completion of a
    /// delivery all happen on one thread. Otherwise one feed loop on the global executor.
    private func feed(platform: Platform) async {
        // The platform's largest `max_concurrent_pushes` among the apps serving it when the loop starts.
        let concurrency = apps.withLockedValue { $0.values.compactMap { $0.slots[platform]?.concurrency }.max() } ?? 1
        let executors = self.executors
        if #available(macOS 15.0, iOS 18.0, *), !executors.isEmpty {
            let n = min(executors.count, concurrency)
            await withDiscardingTaskGroup { group in
                for i in 0..<n {
                    let share = concurrency / n + (i < concurrency % n ? 1 : 0)
                    group.addTask(executorPreference: executors[i]) { await self.feed(platform: platform, limit: share) }
                }
            }
        } else {
            await feed(platform: platform, limit: concurrency)
        }
    }

    /// A feed loop: starts a worker (a child task, which inherits the loop's executor) only while
    /// fewer than `limit` are running; a worker goes on with the next ready job and ends when none is
    /// ready now. Workers exist only while there is work: an idle gateway holds one parked task per
    /// feed loop instead of `max_concurrent_pushes` of them (each ~2.4 KB), and a busy one does not
    /// make a task per delivery.
    private func feed(platform: Platform, limit: Int) async {
        let gate = InFlightGate(limit: limit)
        await withDiscardingTaskGroup { group in
            while true {
                await gate.enter()
                guard let first = await queue.next(platform: platform) else {
                    gate.leave()
                    return
                }
                inFlight.withLockedValue { $0 += 1 }
                group.addTask {
                    var job = first
                    while true {
                        await self.process(job)
                        guard let next = self.queue.nextIfReady(platform: platform) else { break }
                        job = next
                    }
                    self.inFlight.withLockedValue { $0 -= 1 }
                    gate.leave()
                }
            }
        }
    }

    func process(_ job: DeliveryJob) async {
        // A push held for the end of its coalescing window and replaced since ends here, unsent
        // (asked first, so the memory queue's record of it is always consumed).
        if job.isHeldForCoalescing, await queue.wasReplaced(job) {
            await apply(lifecycle.step(job, .skipped(.coalesced), now: now()))
            return
        }
        // Due outside its delivery window: it waits for the window's next start, or ends unsent.
        if let window = job.accepted.notification.deliverBetween, case let t = now(), !window.contains(t) {
            if job.accepted.notification.quiet == .drop {
                await apply(lifecycle.step(job, .skipped(.quietHours), now: t))
            } else {
                await apply(lifecycle.step(job, .deferred(until: window.nextAllowed(atOrAfter: t)), now: t))
            }
            return
        }
        // The job's own app's providers, as configured now (a reload may have replaced them).
        let appID = job.accepted.app
        guard let app = self.app(appID), let slot = app.slots[job.platform] else {
            let reason =
                self.app(appID) == nil
                ? "app \(appID) is no longer configured" : "platform \(job.platform.name) is no longer enabled for app \(appID)"
            await apply(lifecycle.step(job, .unpreparable(reason: reason), now: now()))
            return
        }
        app.enter()
        defer { app.leave() }
        let prepared: any PreparedPush
        if let p = job.accepted.prepared {
            prepared = p
        } else {
            // Re-rendered (a store's job after a restart): a notification accepted as its fallback is
            // stored as the fallback; one that fitted then and no longer does falls back here.
            switch Self.prepare(job.accepted.notification, with: slot.provider) {
            case .failure(let failure):
                await apply(lifecycle.step(job, .unpreparable(reason: failure.reason), now: now()))
                return
            case .success(let r):
                prepared = r.prepared
            }
        }
        let started = now()
        if tracing {
            await apply(await sendTraced(job, prepared: prepared, provider: slot.provider, started: started))
            return
        }
        let context = DeliveryContext(messageID: job.messageID)
        let outcome = await slot.provider.send(prepared, to: job.target, context: context)
        // The jitter draw only matters for a retry: none for a delivered push (a getrandom(2) each).
        let draw = outcome.isDelivered ? 0 : random()
        await apply(lifecycle.step(job, .attempted(outcome, started: started), now: now(), random: draw))
    }

    /// Renders `n` for `provider`; when the rendering is over the provider's limit and `n` has a
    /// `fallback`, renders the fallback instead: returns what is sent, its rendering, and the sizes when
    /// it is the fallback. Both over the limit: a PayloadTooLarge failure naming both sizes.
    static func prepare(
        _ n: PushNotification, with provider: any PushProvider
    ) -> Result<(notification: PushNotification, prepared: any PreparedPush, fallback: FallbackInfo?), PushFailure> {
        let failure: PushFailure
        do {
            return .success((n, try provider.prepare(n), nil))
        } catch {
            failure = (error as? PushFailure) ?? PushFailure("\(error)")
        }
        guard let size = failure.size, let limit = failure.limit, let fallback = n.fallback?.notification else { return .failure(failure) }
        do {
            let prepared = try provider.prepare(fallback)
            let info = FallbackInfo(payloadBytes: size, limit: limit, fallbackBytes: prepared.payloadBytes ?? 0)
            return .success((fallback, prepared, info))
        } catch {
            let f = (error as? PushFailure) ?? PushFailure("\(error)")
            if let fallbackSize = f.size, let fallbackLimit = f.limit {
                return .failure(.payloadTooLarge(size: size, limit: limit, fallbackSize: fallbackSize, fallbackLimit: fallbackLimit))
            }
            var out = PushFailure("\(failure.reason); fallback: \(f.reason)")
            out.size = size
            out.limit = limit
            return .failure(out)
        }
    }

    /// Carries out a worker's transition, in order. The events are told by synchronous functions
    /// that take them borrowing (`publish(_:from:)`): iterating here copied every effect and then
    /// its event, a retain and release of each field of the job in both. An effect is still copied
    /// once out of the array before its event goes to the sinks (they are behind a protocol, so the
    /// compiler cannot see that they leave the array alone), the event no more.
    func apply(_ transition: borrowing DeliveryTransition) async {
        var next = 0
        while let (effect, after) = publish(transition.effects, from: next) {
            switch effect {
            case .reschedule: await queue.reschedule(transition.job)
            case .complete(let outcome): await queue.complete(transition.job, outcome: outcome)
            }
            next = after
        }
    }

    /// What an effect asks of the queue.
    private enum QueueEffect {
        case reschedule
        case complete(FinalOutcome)
    }

    /// Tells the sinks the events of `effects` from `start` on, up to the first effect that asks
    /// something of the queue: returns it and the index after it (nil: none is left).
    @inline(never)
    private func publish(_ effects: borrowing [DeliveryEffect], from start: Int) -> (QueueEffect, next: Int)? {
        for i in start..<effects.count {
            if let q = publish(effects[i]) { return (q, i + 1) }
        }
        return nil
    }

    /// Tells the sinks an event effect; returns what any other effect asks of the queue. Its own
    /// function, borrowing: a `switch` over the array's element binding the event copied the event
    /// out as well.
    @inline(never)
    private func publish(_ effect: borrowing DeliveryEffect) -> QueueEffect? {
        switch effect {
        case .emit(let e):
            publish(e)
            return nil
        case .reschedule: return .reschedule
        case .complete(let outcome): return .complete(outcome)
        case .enqueue, .recordFailedBeforeSending, .release: return nil  // submit's and the queue drivers' business
        }
    }
}
