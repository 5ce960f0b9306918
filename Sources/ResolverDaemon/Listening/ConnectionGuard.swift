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
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])
    let limit: Int
    private let onChange: @Sendable (Int) -> Void

    init(limit: Int, onChange: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.limit = limit
        self.onChange = onChange
    }

    /// Registers `channel`, or returns false when the listener is full.
    func admit(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let count: Int? = channels.withLock { all in
            guard all.count < limit else { return nil }
            all[id] = channel
            return all.count
        }
        guard let count else { return false }
        onChange(count)
        channel.closeFuture.whenComplete { _ in
            let left = self.channels.withLock { all in
                all[id] = nil
                return all.count
            }
            self.onChange(left)
        }
        return true
    }

    var count: Int { channels.withLock { $0.count } }

    /// Asks every connection to finish (GOAWAY for HTTP/2, close when idle for HTTP/1.1, close for
    /// anything that has not spoken yet), waits up to `grace` for them to go, then closes the rest.
    func drain(grace: Duration) async {
        for channel in channels.withLock({ Array($0.values) }) {
            channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
        let deadline = ContinuousClock.now + grace
        while count > 0, ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
        let left = channels.withLock { Array($0.values) }
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
