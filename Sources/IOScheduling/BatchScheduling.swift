#if canImport(Glibc)
import Glibc
#endif

/// The one switch of the project's I/O threads between `SCHED_BATCH` (a woken thread does not
/// preempt the running one) and `SCHED_OTHER`, for the calling thread. The library's pipelined
/// connections and libcurl's engine switch on what they have under way (``BatchWhileBusy``), the
/// proxy's splice relay on the bytes it moves. A thread that started under another policy than
/// `SCHED_OTHER` (the process run under `chrt`, or started by a thread that was) is left alone; a
/// switch the system refuses (a seccomp filter) leaves the thread as it is and is not asked again.
package struct BatchScheduling {
    package private(set) var isBatch = false
    private var managed: Bool

    /// Made by the thread itself.
    package init() {
        #if os(Linux)
        managed = sched_getscheduler(0) == 0  // SCHED_OTHER
        #else
        managed = false
        #endif
    }

    /// Runs the calling thread as `SCHED_BATCH` (`true`) or `SCHED_OTHER` (`false`).
    package mutating func set(batch on: Bool) {
        guard managed, on != isBatch else { return }
        #if os(Linux)
        var parameters = sched_param(sched_priority: 0)
        // 3 is SCHED_BATCH (<sched.h>, visible to C only with _GNU_SOURCE); 0 is SCHED_OTHER; pid 0
        // is the calling thread.
        if sched_setscheduler(0, on ? 3 : 0, &parameters) == 0 {
            isBatch = on
        } else {
            managed = false
        }
        #endif
    }
}

/// Runs the calling I/O thread as `SCHED_BATCH` while it has work under way, as `SCHED_OTHER`
/// when it has none.
///
/// Callers hand these threads work and wake them once per burst. As ordinary threads under load,
/// each wake preempted the caller on the spot when both shared a core: the worker took one query,
/// slept again, the caller went on to the next — a pair of context switches per query and most of
/// the CPU a miss cost (measured in docs/benchmarks-history.md, "The forwarding path with DoH on
/// libcurl's multi handle"). A woken `SCHED_BATCH` thread does not preempt the running one, so the caller
/// finishes its turn and the worker takes the whole burst in one write. Only while busy: an idle
/// worker is an ordinary thread again, so a lone lookup on a machine busy with other work is not
/// kept waiting for someone else's time slice (as the proxy's relay does, `SpliceRelay`). If the
/// policy cannot be set (a seccomp filter), the thread stays as it is; a thread that started under
/// another policy than `SCHED_OTHER` (the process run under `chrt`, or started by a thread that was)
/// is left alone.
package struct BatchWhileBusy {
    /// Queries or transfers under way from which the thread counts as busy.
    static let busyFrom = 4
    private var scheduling = BatchScheduling()

    /// Made by the thread itself, before its loop.
    package init() {}

    /// Called by the thread itself on each turn with what it has under way.
    package mutating func update(underWay: Int) {
        if underWay >= Self.busyFrom {
            scheduling.set(batch: true)
        } else if underWay == 0 {
            scheduling.set(batch: false)
        }
    }
}
