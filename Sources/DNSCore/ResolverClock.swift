import Synchronization

/// Monotonic time for everything with a TTL or a timer. A wall-clock jump must neither freeze nor
/// flush the cache, so only monotonic instants are used; tests inject ``ManualClock``.
public protocol ResolverClock: Sendable {
    /// The current monotonic instant.
    var now: ContinuousClock.Instant { get }
}

/// The process's monotonic clock.
public struct MonotonicClock: ResolverClock {
    public init() {}
    public var now: ContinuousClock.Instant { ContinuousClock.now }
}

/// A clock that moves only when told to, for tests of TTLs, stale windows and prefetch timing.
package final class ManualClock: ResolverClock {
    private let current: Mutex<ContinuousClock.Instant>

    package init(start: ContinuousClock.Instant = ContinuousClock.now) {
        current = Mutex(start)
    }

    package var now: ContinuousClock.Instant { current.withLock { $0 } }

    /// Moves time forward by `duration`.
    package func advance(by duration: Duration) {
        current.withLock { $0 = $0 + duration }
    }
}
