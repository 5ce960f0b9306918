import Synchronization
import Testing

@testable import DNSCore

/// The pool's one timer for hedge delays: entries fire in deadline order, cancelled ones never,
/// and a task sleeps only while an entry is pending.
@Suite struct HedgeTimerTests {
    let clock = ManualClock()

    /// What fired, in order.
    final class Fired: Sendable {
        private let names = Mutex<[String]>([])
        func append(_ name: String) { names.withLock { $0.append(name) } }
        var all: [String] { names.withLock { $0 } }
    }

    /// Waits until `fired` holds `count` names (the timer's task runs them after the clock moved).
    func wait(for count: Int, in fired: Fired) async {
        for _ in 0..<10_000 where fired.all.count < count { await Task.yield() }
    }

    @Test func entriesFireInDeadlineOrderAndCancelledOnesNever() async {
        let timer = HedgeTimer(clock: clock)
        let fired = Fired()
        let start = clock.now
        _ = timer.schedule(at: start + .milliseconds(300)) { fired.append("300") }
        let cancelled = timer.schedule(at: start + .milliseconds(100)) { fired.append("100") }
        _ = timer.schedule(at: start + .milliseconds(200)) { fired.append("200") }
        _ = timer.schedule(at: start + .milliseconds(50)) { fired.append("50") }
        timer.cancel(cancelled)
        timer.cancel(cancelled)  // twice: nothing happens
        #expect(timer.pending == 3)
        await clock.waitForSleepers(1)
        #expect(clock.sleepers == 1, "one task sleeps for every entry")
        clock.advance(by: .milliseconds(250))
        await wait(for: 2, in: fired)
        #expect(fired.all == ["50", "200"])
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(50))
        await wait(for: 3, in: fired)
        #expect(fired.all == ["50", "200", "300"])
        #expect(timer.pending == 0)
        for _ in 0..<1_000 where clock.sleepers > 0 { await Task.yield() }
        #expect(clock.sleepers == 0, "nothing pending: nothing sleeps")
    }

    @Test func theTaskSleepsAtMostATickSoAnEarlierEntryIsNotLate() async {
        let timer = HedgeTimer(clock: clock)
        let fired = Fired()
        let start = clock.now
        _ = timer.schedule(at: start + .seconds(1)) { fired.append("1s") }
        await clock.waitForSleepers(1)
        // Added while the task sleeps for the 1-s entry: due in 50 ms, fired within a tick of it.
        _ = timer.schedule(at: start + .milliseconds(50)) { fired.append("50ms") }
        var waited = Duration.zero
        while fired.all.isEmpty, waited < .seconds(1) {
            await clock.waitForSleepers(1)
            clock.advance(by: .milliseconds(1))
            waited += .milliseconds(1)
            for _ in 0..<100 where fired.all.isEmpty { await Task.yield() }
        }
        #expect(fired.all == ["50ms"])
        #expect(waited >= .milliseconds(50) && waited <= .milliseconds(50) + HedgeTimer.tick)
    }

    @Test func cancellingTheLastEntryStopsTheSleepingTask() async {
        let timer = HedgeTimer(clock: clock)
        let fired = Fired()
        let entry = timer.schedule(at: clock.now + .milliseconds(200)) { fired.append("x") }
        await clock.waitForSleepers(1)
        timer.cancel(entry)
        #expect(clock.sleepers == 0, "the sleep is cancelled at once")
        // A new entry starts a new task; the old one does not fire it twice.
        _ = timer.schedule(at: clock.now + .milliseconds(100)) { fired.append("y") }
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(300))
        await wait(for: 1, in: fired)
        for _ in 0..<1_000 { await Task.yield() }
        #expect(fired.all == ["y"])
    }

    @Test func manyEntriesFireEachOnce() async {
        let timer = HedgeTimer(clock: clock)
        let fired = Fired()
        let start = clock.now
        var entries: [HedgeTimer.Entry] = []
        for index in 0..<1_000 {
            // Deadlines out of order, half of them cancelled.
            let at = start + .milliseconds((index * 7_919) % 1_000)
            entries.append(timer.schedule(at: at) { fired.append("\(index)") })
        }
        for (index, entry) in entries.enumerated() where index % 2 == 1 { timer.cancel(entry) }
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        await wait(for: 500, in: fired)
        #expect(fired.all.count == 500)
        #expect(Set(fired.all) == Set((0..<1_000).filter { $0 % 2 == 0 }.map { "\($0)" }))
        let order = fired.all.compactMap(Int.init).map { ($0 * 7_919) % 1_000 }
        #expect(order == order.sorted(), "in deadline order")
    }
}
