import DNSCore
import DaemonHTTP
import DaemonListening
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// One side of a tunnel: what it reads is written to its partner; a partner that cannot take more
/// stops the reading (backpressure both ways); a half-close is passed on; idleness closes both.
final class TunnelHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private weak var partner: TunnelHandler?
    private var context: ChannelHandlerContext?
    private var pendingRead = false
    private let upstreamSide: Bool
    private let proxy: any ProxyResolving
    private let activity: Activity
    private var idleCheck: Scheduled<Void>?

    /// When bytes last moved either way, shared by both sides (one event loop). Every write in a
    /// tunnel follows a read on the other side, so reads alone say whether it is idle — without
    /// NIO's IdleStateHandler, which made a promise and a callback for every write.
    private final class Activity {
        var last = NIODeadline.now()
        let idle: TimeAmount
        init(idle: TimeAmount) { self.idle = idle }
    }

    private init(upstreamSide: Bool, proxy: any ProxyResolving, activity: Activity) {
        self.upstreamSide = upstreamSide
        self.proxy = proxy
        self.activity = activity
    }

    /// The client side and the upstream side, joined; closed after `idle` without a byte either way.
    static func pair(proxy: any ProxyResolving, idle: TimeAmount) -> (TunnelHandler, TunnelHandler) {
        let activity = Activity(idle: idle)
        let client = TunnelHandler(upstreamSide: false, proxy: proxy, activity: activity)
        let server = TunnelHandler(upstreamSide: true, proxy: proxy, activity: activity)
        client.partner = server
        server.partner = client
        proxy.count(.tunnels(delta: +1))
        return (client, server)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // The client side keeps the tunnel's one idle timer.
        if !upstreamSide { scheduleIdleCheck(in: activity.idle, context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
        self.context = nil
        partner = nil
    }

    private func scheduleIdleCheck(in delay: TimeAmount, context: ChannelHandlerContext) {
        idleCheck = context.eventLoop.assumeIsolated().scheduleTask(in: delay) { [weak self] in
            guard let self, let context = self.context else { return }
            let quiet = NIODeadline.now() - self.activity.last
            if quiet >= self.activity.idle {
                context.close(promise: nil)
            } else {
                self.scheduleIdleCheck(in: self.activity.idle - quiet, context: context)
            }
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        activity.last = .now()
        let bytes = unwrapInboundIn(data).readableBytes
        proxy.count(.bytes(upstream: !upstreamSide, bytes))
        partner?.context?.write(data, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        partner?.context?.flush()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !upstreamSide { proxy.count(.tunnels(delta: -1)) }
        partner?.context?.close(promise: nil)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, case .inputClosed = event {
            // The peer finished sending: finish sending to the other side too (TLS close_notify and
            // HTTP/1.0 bodies rely on it).
            partner?.context?.close(mode: .output, promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.resumeReading() }
    }

    func read(context: ChannelHandlerContext) {
        if let partner, let partnerContext = partner.context, !partnerContext.channel.isWritable {
            pendingRead = true
            return
        }
        context.read()
    }

    private func resumeReading() {
        guard pendingRead, let context else { return }
        pendingRead = false
        context.read()
    }
}
