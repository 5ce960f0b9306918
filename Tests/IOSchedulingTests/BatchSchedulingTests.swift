import Foundation
import Glibc
import IOScheduling
import TestSupport
import Testing

/// The I/O threads' scheduling: `SCHED_BATCH` (3) while busy, `SCHED_OTHER` (0) when idle.
struct BatchSchedulingTests {
    /// The calling thread's policy.
    static func policy() -> Int? { schedulingPolicy(statFile: "/proc/thread-self/stat") }

    /// Runs `body` on a thread of its own (the policies are per thread).
    static func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }

    /// The switch itself, as the splice relay drives it: on, on again (no call), off.
    @Test func theSwitchTurnsBatchOnAndOff() async {
        let seen = await Self.onThread { () -> [Int?] in
            var scheduling = BatchScheduling()
            var seen = [Self.policy()]
            scheduling.set(batch: true)
            seen.append(Self.policy())
            seen.append(scheduling.isBatch ? 1 : 0)
            scheduling.set(batch: true)
            seen.append(Self.policy())
            scheduling.set(batch: false)
            seen.append(Self.policy())
            seen.append(scheduling.isBatch ? 1 : 0)
            return seen
        }
        #expect(seen == [0, 3, 1, 3, 0, 0])
    }

    @Test func batchWhileBusyOrdinaryWhenIdle() async throws {
        let seen = await Self.onThread { () -> [Int?] in
            var scheduling = BatchWhileBusy()
            var seen = [Self.policy()]
            scheduling.update(underWay: 1)  // a query or two: still an ordinary thread
            seen.append(Self.policy())
            scheduling.update(underWay: 64)
            seen.append(Self.policy())
            scheduling.update(underWay: 2)  // still busy
            seen.append(Self.policy())
            scheduling.update(underWay: 0)
            seen.append(Self.policy())
            return seen
        }
        #expect(seen == [0, 0, 3, 3, 0])
    }

    @Test func aThreadStartedUnderAnotherPolicyKeepsIt() async throws {
        let seen = await Self.onThread { () -> [Int?] in
            // As if started by a batch thread, or the process run under `chrt -b`.
            var parameters = sched_param(sched_priority: 0)
            _ = sched_setscheduler(0, 3, &parameters)
            var scheduling = BatchWhileBusy()
            scheduling.update(underWay: 64)
            var seen = [Self.policy()]
            scheduling.update(underWay: 0)
            seen.append(Self.policy())
            return seen
        }
        #expect(seen == [3, 3], "the inherited policy is not switched back to SCHED_OTHER")
    }
}
