import Foundation

/// The library's own I/O threads: libcurl's engine and each pipelined DoH or DoT connection's worker.
package enum IOThread {
    /// Starts `body` on a new thread named `name` (set from the thread itself: Linux names a
    /// thread only so).
    package static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            Thread.current.name = name
            body()
        }
        thread.start()
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
    private var batch = false
    private let managed: Bool

    /// Made by the thread itself, before its loop.
    package init() {
        #if os(Linux)
        managed = sched_getscheduler(0) == 0  // SCHED_OTHER
        #else
        managed = false
        #endif
    }

    /// Called by the thread itself on each turn with what it has under way.
    package mutating func update(underWay: Int) {
        guard managed else { return }
        if !batch, underWay >= Self.busyFrom {
            batch = Self.setBatch(true)
        } else if batch, underWay == 0 {
            batch = !Self.setBatch(false)
        }
    }

    /// Whether the switch took effect.
    private static func setBatch(_ on: Bool) -> Bool {
        #if os(Linux)
        var parameters = sched_param(sched_priority: 0)
        // 3 is SCHED_BATCH (<sched.h>, visible to C only with _GNU_SOURCE); 0 is SCHED_OTHER; pid 0
        // is the calling thread.
        return sched_setscheduler(0, on ? 3 : 0, &parameters) == 0
        #else
        return false
        #endif
    }
}
