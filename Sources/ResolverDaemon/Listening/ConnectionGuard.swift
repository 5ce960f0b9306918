import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The first handler of every accepted TCP connection (HTTP and DNS), next to the socket.
///
/// **Prompt acknowledgements.** When a read leaves the server nothing to send — half a request, a
/// HEADERS frame whose DATA is still to come, a client's WINDOW_UPDATE — Linux delays its ACK (up
/// to 40 ms, "delayed ACK"). A client with Nagle's algorithm on (dnsperf, many DoH stacks) holds
/// its next small write until that ACK arrives, so every such read cost ~40 ms: 1,400 DoH POSTs a
/// second against 38,000 without the wait. After a read that produced no write this handler asks
/// the kernel to acknowledge at once (`TCP_QUICKACK`, which Linux does not keep, hence per read).
///
/// **Time to speak.** Until the protocol handlers take over (``protocolReady()``: TLS done and a
/// protocol chosen, or at once for plain TCP), the connection must get there within `deadline` or
/// it is closed: a TCP connection that never sends a ClientHello, or half of one, costs a
/// descriptor for seconds, not forever. On SIGTERM (`ChannelShouldQuiesceEvent`) a connection that
/// has not got there is closed at once; one that has passes the event on to its protocol handler.
final class ConnectionGuard: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private static let quickAck = ChannelOptions.Types.SocketOption(
        level: SocketOptionLevel(IPPROTO_TCP),
        name: SocketOptionName(TCP_QUICKACK))

    private let deadline: TimeAmount
    private let onTimeout: @Sendable () -> Void
    private var reading = false
    private var wrote = false
    private var ready = false
    private var timeout: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    init(deadline: TimeAmount, onTimeout: @escaping @Sendable () -> Void = {}) {
        self.deadline = deadline
        self.onTimeout = onTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let channel = context.channel, onTimeout = self.onTimeout
        timeout = context.eventLoop.scheduleTask(in: deadline) {
            onTimeout()
            channel.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timeout?.cancel()
        self.context = nil
    }

    /// The protocol handlers are in place and keep their own time from here on.
    func protocolReady() {
        ready = true
        timeout?.cancel()
        timeout = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !reading {
            reading = true
            wrote = false
        }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        reading = false
        if !wrote {
            try? context.channel.syncOptions?.setOption(Self.quickAck, value: 1)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        wrote = true
        context.write(data, promise: promise)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, !ready {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // TLS and I/O errors before the protocol handlers end the connection; nothing to log.
        if !ready { context.close(promise: nil) } else { context.fireErrorCaught(error) }
    }
}

/// The connections a listener holds open: at most `limit` (more are closed as soon as they are
/// accepted, so the accept queue keeps moving and descriptors stay in reserve), each reachable for
/// the drain on shutdown.
final class ConnectionRegistry: Sendable {
    /// NIO channels, and connections held outside NIO (the proxy's splice relay) as a count.
    private let entries = Mutex<(channels: [ObjectIdentifier: any Channel], reserved: Int)>(([:], 0))
    let limit: Int
    private let onChange: @Sendable (Int) -> Void

    init(limit: Int, onChange: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.limit = limit
        self.onChange = onChange
    }

    /// Registers `channel`, or returns false when the listener is full. `force` registers it past
    /// the limit: a connection that already held a reservation and moves into NIO.
    func admit(_ channel: any Channel, force: Bool = false) -> Bool {
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
    func reserve() -> Bool {
        let count: Int? = entries.withLock { all in
            guard all.channels.count + all.reserved < limit else { return nil }
            all.reserved += 1
            return all.channels.count + all.reserved
        }
        guard let count else { return false }
        onChange(count)
        return true
    }

    func release() {
        onChange(
            entries.withLock { all in
                all.reserved -= 1
                return all.channels.count + all.reserved
            })
    }

    /// Open connections: NIO channels and reservations.
    var count: Int { entries.withLock { $0.channels.count + $0.reserved } }

    private var channels: [any Channel] { entries.withLock { Array($0.channels.values) } }

    /// Asks every connection to finish (GOAWAY for HTTP/2, close when idle for HTTP/1.1, close for
    /// anything that has not spoken yet), waits up to `grace` for them to go, then closes the rest.
    func drain(grace: Duration) async {
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

/// A connection handler that keeps time: deadlines are checked once a second on its event loop,
/// with the loop's clock (which a test's embedded loop moves by hand). The handler keeps its
/// context and timer; ``startTicking(_:every:)`` and ``stopTicking()`` manage both.
protocol TickingHandler: AnyObject {
    var context: ChannelHandlerContext? { get set }
    var timer: RepeatedTask? { get set }
    func tick(now: NIODeadline)
}

extension TickingHandler {
    /// The event loop's clock.
    var now: NIODeadline { context?.eventLoop.now ?? .now() }

    /// From `handlerAdded`: keeps `context` and calls ``tick(now:)`` every `interval` on its loop
    /// until ``stopTicking()``.
    func startTicking(_ context: ChannelHandlerContext, every interval: TimeAmount = .seconds(1)) {
        self.context = context
        let handler = NIOLoopBound<any TickingHandler>(self, eventLoop: context.eventLoop)
        let loop = context.eventLoop
        timer = loop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { _ in handler.value.tick(now: loop.now) }
    }

    /// From `handlerRemoved`: no more ticks, and the context is let go.
    func stopTicking() {
        timer?.cancel()
        timer = nil
        context = nil
    }
}
