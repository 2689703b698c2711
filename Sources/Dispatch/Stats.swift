import Foundation
import NIOConcurrencyHelpers
import PushgateCore

/// gorush's `/api/stat/app` counters, per platform.
public struct StatsSnapshot: Sendable, Codable, Equatable {
    public struct PlatformCounts: Sendable, Codable, Equatable {
        public var pushSuccess: Int64 = 0
        public var pushError: Int64 = 0
        enum CodingKeys: String, CodingKey {
            case pushSuccess = "push_success"
            case pushError = "push_error"
        }
        public init() {}
    }
    public var totalCount: Int64 = 0
    public var submittedTasks: Int64 = 0
    public var successTasks: Int64 = 0
    public var failureTasks: Int64 = 0
    public var retries: Int64 = 0
    public var platforms: [String: PlatformCounts] = [:]

    public init() {}

    public func counts(_ p: Platform) -> PlatformCounts { platforms[p.name] ?? PlatformCounts() }
}

/// Thread-safe statistics. A durable queue engine may seed it from its store.
public final class Stats: Sendable {
    private let box: NIOLockedValueBox<StatsSnapshot>

    public init(initial: StatsSnapshot = StatsSnapshot()) { box = NIOLockedValueBox(initial) }

    public var snapshot: StatsSnapshot { box.withLockedValue { $0 } }

    public func accepted(count: Int) {
        box.withLockedValue { $0.totalCount += Int64(count) }
    }

    public func submitted(jobs: Int) {
        box.withLockedValue { $0.submittedTasks += Int64(jobs) }
    }

    public func retried() { box.withLockedValue { $0.retries += 1 } }

    public func finished(platform: Platform, delivered: Bool) {
        box.withLockedValue { s in
            var c = s.platforms[platform.name] ?? .init()
            if delivered { c.pushSuccess += 1; s.successTasks += 1 } else { c.pushError += 1; s.failureTasks += 1 }
            s.platforms[platform.name] = c
        }
    }
}
