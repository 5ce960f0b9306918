import NIOCore
import Synchronization

/// The connections a listener holds open: at most `limit` (more are closed as soon as they are
/// accepted, so the accept queue keeps moving and descriptors stay in reserve), each reachable for
/// the drain on shutdown.
package final class ConnectionRegistry: Sendable {
    /// NIO channels, and connections held outside NIO (the proxy's splice relay) as a count.
    private let entries = Mutex<(channels: [ObjectIdentifier: any Channel], reserved: Int)>(([:], 0))
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
            guard force || all.channels.count + all.reserved < limit else { return nil }
            all.channels[id] = channel
            return all.channels.count + all.reserved
        }
        guard let count else { return false }
        onChange(count)
        channel.closeFuture.whenComplete { _ in
            let left = self.entries.withLock { all in
                all.channels[id] = nil
                return all.channels.count + all.reserved
            }
            self.onChange(left)
        }
        return true
    }

    /// Counts a connection that lives outside NIO, or returns false when the listener is full.
    /// Each successful reservation is ended by one ``release()``.
    package func reserve() -> Bool {
        let count: Int? = entries.withLock { all in
            guard all.channels.count + all.reserved < limit else { return nil }
            all.reserved += 1
            return all.channels.count + all.reserved
        }
        guard let count else { return false }
        onChange(count)
        return true
    }

    package func release() {
        onChange(
            entries.withLock { all in
                all.reserved -= 1
                return all.channels.count + all.reserved
            })
    }

    /// Open connections: NIO channels and reservations.
    package var count: Int { entries.withLock { $0.channels.count + $0.reserved } }

    private var channels: [any Channel] { entries.withLock { Array($0.channels.values) } }

    /// Asks every connection to finish (GOAWAY for HTTP/2, close when idle for HTTP/1.1, close for
    /// anything that has not spoken yet), waits up to `grace` for them to go, then closes the rest.
    package func drain(grace: Duration) async {
        for channel in channels {
            channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
        let deadline = ContinuousClock.now + grace
        while count > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        let left = channels
        for channel in left { channel.close(promise: nil) }
        for channel in left { try? await channel.closeFuture.get() }
    }
}
