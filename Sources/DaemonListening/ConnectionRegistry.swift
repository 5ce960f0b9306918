import NIOCore
import Synchronization

/// The connections a listener holds open: at most `limit` (more are closed as soon as they are
/// accepted, so the accept queue keeps moving and descriptors stay in reserve), each reachable for
/// the drain on shutdown.
package final class ConnectionRegistry: Sendable {
    private struct Entries {
        var channels: [ObjectIdentifier: any Channel] = [:]
        /// Connections held outside NIO (the proxy's splice relay), as a count.
        var reserved = 0
        /// Drains waiting for the last connection to go, by waiter number.
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter = 0

        var count: Int { channels.count + reserved }

        /// The waiters to resume when the last connection has gone (none otherwise).
        mutating func takeWaitersIfEmpty() -> [CheckedContinuation<Void, Never>] {
            guard count == 0, !waiters.isEmpty else { return [] }
            defer { waiters.removeAll() }
            return Array(waiters.values)
        }
    }

    private let entries = Mutex(Entries())
    package let limit: Int
    private let onChange: @Sendable (Int) -> Void

    package init(limit: Int, onChange: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.limit = limit
        self.onChange = onChange
    }

    /// Registers `channel`, or returns false when the listener is full. `force` registers it past
    /// the limit: a connection that already held a reservation and moves into NIO.
    package func admit(_ channel: any Channel, force: Bool = false) -> Bool {
        let id = ObjectIdentifier(channel)
        let count: Int? = entries.withLock { all in
            guard force || all.count < limit else { return nil }
            all.channels[id] = channel
            return all.count
        }
        guard let count else { return false }
        onChange(count)
        channel.closeFuture.whenComplete { _ in
            self.removed { $0.channels[id] = nil }
        }
        return true
    }

    /// Counts a connection that lives outside NIO, or returns false when the listener is full.
    /// Each successful reservation is ended by one ``release()``.
    package func reserve() -> Bool {
        let count: Int? = entries.withLock { all in
            guard all.count < limit else { return nil }
            all.reserved += 1
            return all.count
        }
        guard let count else { return false }
        onChange(count)
        return true
    }

    package func release() {
        removed { $0.reserved -= 1 }
    }

    /// Open connections: NIO channels and reservations.
    package var count: Int { entries.withLock { $0.count } }

    private var channels: [any Channel] { entries.withLock { Array($0.channels.values) } }

    /// Asks every connection to finish (GOAWAY for HTTP/2, close when idle for HTTP/1.1, close for
    /// anything that has not spoken yet), waits up to `grace` for them to go, then closes the rest.
    package func drain(grace: Duration) async {
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.emptied() }
            group.addTask { try? await Task.sleep(for: grace) }
            await group.next()
            group.cancelAll()
        }
        let left = channels
        for channel in left { channel.close(promise: nil) }
        for channel in left { try? await channel.closeFuture.get() }
    }

    /// One connection fewer: reports the count and wakes the drains once none is left.
    private func removed(_ change: (inout Entries) -> Void) {
        let (left, waiters) = entries.withLock { all in
            change(&all)
            return (all.count, all.takeWaitersIfEmpty())
        }
        onChange(left)
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once no connection is open, or when the task is cancelled.
    private func emptied() async {
        let number = entries.withLock { all in
            defer { all.nextWaiter += 1 }
            return all.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (waiter: CheckedContinuation<Void, Never>) in
                // Under the lock: a cancellation that came first has set the flag before its
                // handler looked for this waiter, so one of the two resumes it.
                let now = entries.withLock { all in
                    guard all.count > 0, !Task.isCancelled else { return true }
                    all.waiters[number] = waiter
                    return false
                }
                if now { waiter.resume() }
            }
        } onCancel: {
            entries.withLock { $0.waiters.removeValue(forKey: number) }?.resume()
        }
    }
}
