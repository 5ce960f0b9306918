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
package final class ConnectionGuard: ChannelDuplexHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

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

    package init(deadline: TimeAmount, onTimeout: @escaping @Sendable () -> Void = {}) {
        self.deadline = deadline
        self.onTimeout = onTimeout
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let channel = context.channel, onTimeout = self.onTimeout
        timeout = context.eventLoop.scheduleTask(in: deadline) {
            onTimeout()
            channel.close(promise: nil)
        }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        timeout?.cancel()
        self.context = nil
    }

    /// The protocol handlers are in place and keep their own time from here on.
    package func protocolReady() {
        ready = true
        timeout?.cancel()
        timeout = nil
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if !reading {
            reading = true
            wrote = false
        }
        context.fireChannelRead(data)
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        reading = false
        if !wrote {
            try? context.channel.syncOptions?.setOption(Self.quickAck, value: 1)
        }
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        wrote = true
        context.write(data, promise: promise)
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, !ready {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // TLS and I/O errors before the protocol handlers end the connection; nothing to log.
        if !ready { context.close(promise: nil) } else { context.fireErrorCaught(error) }
    }
}
