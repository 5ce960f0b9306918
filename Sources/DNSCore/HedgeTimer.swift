import Synchronization

/// One timer for all of a pool's hedges, instead of a sleeping task per lookup.
///
/// A hedged lookup needs to wake when its first upstream's hedge delay runs out, and almost never
/// does: the upstream answers first. A `Task.sleep` per lookup costs a child task, a dispatch
/// timer armed on every miss and left in the timer heap until its delay passes, and a context
/// switch when it fires into a finished lookup — about 40 % of the throughput of misses at
/// saturation with two upstreams (BENCHMARKS.md, "hedging's cost"). Here each lookup adds an entry
/// to a heap under a lock and removes it when it ends; one task sleeps, and only while entries are
/// pending.
///
/// The sleeping task wakes at the earliest deadline but never sleeps more than ``tick`` at a time,
/// so an entry earlier than the one it sleeps for (another upstream's shorter delay) fires at most
/// a tick late; and it sleeps at least ``granularity``, so entries due close together fire
/// together instead of one wake each. Hedge delays are 50 ms at least (``UpstreamPool/hedgeDelay(_:)``):
/// a few milliseconds late changes nothing.
final class HedgeTimer: Sendable {
    /// The longest the timer sleeps while entries are pending.
    static let tick = Duration.milliseconds(10)
    /// The shortest: entries due within it of each other fire on one wake.
    static let granularity = Duration.milliseconds(2)

    /// A pending entry, for ``cancel(_:)``.
    struct Entry: Sendable {
        fileprivate let id: UInt64
    }

    private struct State {
        /// (deadline, id), a binary min-heap by deadline. An id no longer in `actions` was cancelled
        /// and is skipped when it reaches the top.
        var heap: [(deadline: ResolverInstant, id: UInt64)] = []
        var actions: [UInt64: @Sendable () -> Void] = [:]
        var nextID: UInt64 = 0
        /// The sleeping task's generation; zero when none runs. A task whose generation is not
        /// the current one ends at its next wake.
        var running: UInt64 = 0
        var generations: UInt64 = 0
        var sleeper: Task<Void, Never>?

        mutating func push(_ deadline: ResolverInstant, _ id: UInt64) {
            heap.append((deadline, id))
            var child = heap.count - 1
            while child > 0 {
                let parent = (child - 1) / 2
                guard heap[child].deadline < heap[parent].deadline else { break }
                heap.swapAt(child, parent)
                child = parent
            }
        }

        mutating func popTop() {
            let last = heap.removeLast()
            guard !heap.isEmpty else { return }
            heap[0] = last
            var parent = 0
            while true {
                let left = 2 * parent + 1
                guard left < heap.count else { return }
                let right = left + 1
                let smaller = right < heap.count && heap[right].deadline < heap[left].deadline ? right : left
                guard heap[smaller].deadline < heap[parent].deadline else { return }
                heap.swapAt(parent, smaller)
                parent = smaller
            }
        }

        /// Drops cancelled entries from the top, so `heap.first` is a live one.
        mutating func skipCancelled() {
            while let top = heap.first, actions[top.id] == nil { popTop() }
        }

        /// No entry is pending: the sleeper stops (the caller cancels `sleeper` if it returned one).
        mutating func stop() -> Task<Void, Never>? {
            heap.removeAll(keepingCapacity: heap.capacity <= 1_024)
            running = 0
            defer { sleeper = nil }
            return sleeper
        }
    }

    private let state = Mutex(State())
    private let clock: any ResolverClock

    init(clock: any ResolverClock) {
        self.clock = clock
    }

    /// How many entries are pending (for tests).
    var pending: Int { state.withLock { $0.actions.count } }

    /// Runs `action` once, at `deadline` (a little later: see the type's comment), unless
    /// ``cancel(_:)`` comes first. `action` runs on the timer's task: it must be quick.
    func schedule(at deadline: ResolverInstant, _ action: @escaping @Sendable () -> Void) -> Entry {
        let (id, generation) = state.withLock { state -> (UInt64, UInt64?) in
            state.nextID += 1
            let id = state.nextID
            state.actions[id] = action
            state.push(deadline, id)
            guard state.running == 0 else { return (id, nil) }
            state.generations += 1
            state.running = state.generations
            return (id, state.running)
        }
        if let generation {
            let sleeper = Task { await self.run(generation) }
            let stale = state.withLock { state -> Bool in
                guard state.running == generation else { return true }
                state.sleeper = sleeper
                return false
            }
            if stale { sleeper.cancel() }
        }
        return Entry(id: id)
    }

    /// Forgets `entry` if it has not fired; stops the sleeping task when nothing is left pending.
    func cancel(_ entry: Entry) {
        let sleeper = state.withLock { state -> Task<Void, Never>? in
            guard state.actions.removeValue(forKey: entry.id) != nil, state.actions.isEmpty else { return nil }
            return state.stop()
        }
        sleeper?.cancel()
    }

    private func run(_ generation: UInt64) async {
        while true {
            let now = clock.now
            let (due, wake) = state.withLock { state -> ([@Sendable () -> Void], ResolverInstant?) in
                guard state.running == generation else { return ([], nil) }
                var due: [@Sendable () -> Void] = []
                state.skipCancelled()
                while let top = state.heap.first, top.deadline <= now {
                    state.popTop()
                    if let action = state.actions.removeValue(forKey: top.id) { due.append(action) }
                    state.skipCancelled()
                }
                guard let next = state.heap.first else {
                    _ = state.stop()  // this very task: nothing to cancel
                    return (due, nil)
                }
                return (due, min(max(next.deadline, now + Self.granularity), now + Self.tick))
            }
            for action in due { action() }
            guard let wake else { return }
            // Cancelled when the last entry is cancelled: the next pass finds it stopped.
            try? await clock.sleep(until: wake)
        }
    }
}
