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
