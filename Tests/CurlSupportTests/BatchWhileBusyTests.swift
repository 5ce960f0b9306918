import CurlSupport
import Glibc
import TestSupport
import Testing

/// The I/O threads' scheduling: `SCHED_BATCH` (3) while busy, `SCHED_OTHER` (0) when idle.
struct BatchWhileBusyTests {
    /// The calling thread's policy.
    static func policy() -> Int? { schedulingPolicy(statFile: "/proc/thread-self/stat") }

    @Test func batchWhileBusyOrdinaryWhenIdle() async throws {
        let seen = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[Int?], Error>) in
            IOThread.start(name: "test.batch") {
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
                continuation.resume(returning: seen)
            }
        }
        #expect(seen == [0, 0, 3, 3, 0])
    }

    @Test func aThreadStartedUnderAnotherPolicyKeepsIt() async throws {
        let seen = await withCheckedContinuation { (continuation: CheckedContinuation<[Int?], Never>) in
            IOThread.start(name: "test.batch") {
                // As if started by a batch thread, or the process run under `chrt -b`.
                var parameters = sched_param(sched_priority: 0)
                _ = sched_setscheduler(0, 3, &parameters)
                var scheduling = BatchWhileBusy()
                scheduling.update(underWay: 64)
                var seen = [Self.policy()]
                scheduling.update(underWay: 0)
                seen.append(Self.policy())
                continuation.resume(returning: seen)
            }
        }
        #expect(seen == [3, 3], "the inherited policy is not switched back to SCHED_OTHER")
    }
}
