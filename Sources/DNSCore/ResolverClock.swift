import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// An instant of a ``ResolverClock``.
///
/// Its own type, not `ContinuousClock.Instant`: a resolver's time is injected (tests move it by
/// hand), so an instant from it must not be comparable with, or subtractable from, the process's
/// real clock by mistake. Expiries, deadlines and circuit-breaker backoffs are all in it.
public struct ResolverInstant: Comparable, Hashable, Sendable {
    /// Time since the clock's origin.
    package var offset: Duration

    package init(offset: Duration) {
        self.offset = offset
    }

    public static func + (lhs: ResolverInstant, rhs: Duration) -> ResolverInstant { ResolverInstant(offset: lhs.offset + rhs) }
    public static func - (lhs: ResolverInstant, rhs: Duration) -> ResolverInstant { ResolverInstant(offset: lhs.offset - rhs) }
    public static func - (lhs: ResolverInstant, rhs: ResolverInstant) -> Duration { lhs.offset - rhs.offset }
    public static func < (lhs: ResolverInstant, rhs: ResolverInstant) -> Bool { lhs.offset < rhs.offset }
}

/// Monotonic time for everything with a TTL, a deadline or a timer. A wall-clock jump must neither
/// freeze nor flush the cache, so only monotonic instants are used; tests inject a clock they move.
public protocol ResolverClock: Sendable {
    /// The current instant.
    var now: ResolverInstant { get }
    /// Suspends until `deadline` (at once when it has passed).
    /// - Throws: `CancellationError` when the task is cancelled first.
    func sleep(until deadline: ResolverInstant) async throws
}

extension ResolverClock {
    /// Suspends for `duration` of this clock's time.
    public func sleep(for duration: Duration) async throws {
        try await sleep(until: now + duration)
    }
}

/// The process's monotonic clock: it counts time the machine spends suspended (`CLOCK_BOOTTIME` on
/// Linux, as `ContinuousClock`), so a TTL ends on time across a laptop's sleep.
public struct MonotonicClock: ResolverClock {
    public init() {}

    #if os(Linux)
    /// One origin for the whole process, so instants of every `MonotonicClock` compare.
    private static let origin = bootTime()

    /// `CLOCK_BOOTTIME` read directly: every cache hit reads the clock, and this skips the runtime's
    /// clock dispatch and the 128-bit arithmetic of `ContinuousClock.Instant` (BENCHMARKS.md).
    @inline(__always)
    private static func bootTime() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_BOOTTIME, &time)
        return Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec)
    }

    public var now: ResolverInstant { ResolverInstant(offset: .nanoseconds(Self.bootTime() &- Self.origin)) }
    #else
    private static let origin = ContinuousClock.now

    public var now: ResolverInstant { ResolverInstant(offset: ContinuousClock.now - Self.origin) }
    #endif

    public func sleep(until deadline: ResolverInstant) async throws {
        let left = deadline - now
        if left > .zero { try await Task.sleep(for: left, clock: .continuous) } else { try Task.checkCancellation() }
    }
}

/// A clock that moves only when told to, for tests of TTLs, stale windows, prefetch timing and
/// deadlines: a sleeper wakes when ``advance(by:)`` moves the time past its deadline.
package final class ManualClock: ResolverClock {
    private struct State {
        var now: ResolverInstant
        var sleepers: [UInt64: (deadline: ResolverInstant, continuation: CheckedContinuation<Void, any Error>)] = [:]
        var nextID: UInt64 = 0
        /// Tasks waiting for this many sleepers.
        var watchers: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []

        /// Takes out the watchers whose count is reached.
        mutating func satisfiedWatchers() -> [CheckedContinuation<Void, Never>] {
            let count = sleepers.count
            let ready = watchers.filter { $0.count <= count }.map(\.continuation)
            watchers.removeAll { $0.count <= count }
            return ready
        }
    }

    private let state: Mutex<State>

    package init(start: Duration = .seconds(1_000)) {
        state = Mutex(State(now: ResolverInstant(offset: start)))
    }

    package var now: ResolverInstant { state.withLock { $0.now } }

    /// How many tasks sleep on this clock now.
    package var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// Returns once at least `count` tasks sleep on this clock: a test waits for the work it started
    /// to reach its timer before it moves the time.
    package func waitForSleepers(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let ready = state.withLock { state -> Bool in
                guard state.sleepers.count < count else { return true }
                state.watchers.append((count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }

    /// Moves time forward by `duration`, waking the sleepers whose deadline it reaches.
    package func advance(by duration: Duration) {
        let woken = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
            state.now = state.now + duration
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { state.sleepers[id] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    package func sleep(until deadline: ResolverInstant) async throws {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (sleeping, watchers) = state.withLock { state -> (Bool, [CheckedContinuation<Void, Never>]) in
                    guard deadline > state.now, !Task.isCancelled else { return (false, []) }
                    state.sleepers[id] = (deadline, continuation)
                    return (true, state.satisfiedWatchers())
                }
                for watcher in watchers { watcher.resume() }
                if !sleeping {
                    if Task.isCancelled { continuation.resume(throwing: CancellationError()) } else { continuation.resume() }
                }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}

/// Where the engine starts its background work (refreshes, prefetches, the timer of a stale
/// answer's delay). Tests give one they can drain instead of polling for the work to end.
package protocol TaskSpawner: Sendable {
    func spawn(_ work: @escaping @Sendable () async -> Void)
}

/// Unstructured tasks, as the engine runs in production.
package struct UnstructuredTasks: TaskSpawner {
    package init() {}

    package func spawn(_ work: @escaping @Sendable () async -> Void) {
        Task { await work() }
    }
}

/// Tasks a test can wait for: ``drain()`` returns once every task spawned so far, and every task
/// those spawned, has finished.
package final class DrainableTasks: TaskSpawner {
    private let tasks = Mutex<[Task<Void, Never>]>([])

    package init() {}

    package func spawn(_ work: @escaping @Sendable () async -> Void) {
        let task = Task { await work() }
        tasks.withLock { $0.append(task) }
    }

    package func drain() async {
        while true {
            let pending = tasks.withLock { pending -> [Task<Void, Never>] in
                defer { pending.removeAll() }
                return pending
            }
            if pending.isEmpty { return }
            for task in pending { await task.value }
        }
    }
}
