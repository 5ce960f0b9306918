import NIOCore
import NIOPosix

/// A task executor (SE-0417) that runs jobs on one NIO event loop.
///
/// A lookup that a channel handler starts with `Task(executorPreference:)` runs on the channel's
/// own loop: its answer is written there without a hop, and a miss crosses only to the upstream's
/// thread and back. Used where a connection bounds its lookups (DNS over TCP and TLS: 16; DoH: its
/// streams), not for the UDP stub, whose loop must keep reading a burst to count what it drops. Without it a miss visited three threads (the loop, a Swift concurrency pool
/// thread, the upstream's), and on a busy core each hand-off is a context switch (BENCHMARKS.md,
/// "The daemon as a forwarder on misses"). Work that suspends on actors still hops as usual; work
/// that never suspends runs on the loop, so only lookups go here, not the HTTP API's routes.
package final class EventLoopTaskExecutor: TaskExecutor {
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) { self.eventLoop = eventLoop }

    /// An executor for the NIOPosix loop the caller runs on; nil off such a loop (the testing
    /// loops of the unit tests run jobs only when told, so lookups there stay on the global pool).
    package static func forCurrentLoop() -> EventLoopTaskExecutor? {
        MultiThreadedEventLoopGroup.currentEventLoop.map(EventLoopTaskExecutor.init)
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
