import DaemonListening
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle

/// DNS over TLS on `dot_listen` (RFC 7858; port 853 by default): the stub's TCP handling —
/// pipelined queries answered as they are ready, at most 16 in progress a connection, no reading
/// while answers are not taken, 10 s idle and partial-query timeouts — behind TLS with the
/// daemon's certificate (`tls:`), ALPN `dot` offered (RFC 7858 §3.2 allows none: clients that send
/// no ALPN are served too).
///
/// A connection must finish its handshake within `limits.request_timeout` or it is closed; at most
/// `limits.max_connections` are open.
struct DoTListener: Service {
    let state: DaemonState
    let host: String
    let port: Int
    let sslContext: NIOSSLContext
    let maxConnections: Int
    let handshakeTimeout: TimeAmount
    let lookups: LookupBudget
    var onBound: @Sendable (SocketAddress?) -> Void = { _ in }

    func run() async throws {
        let state = self.state, sslContext = self.sslContext, lookups = self.lookups, handshakeTimeout = self.handshakeTimeout
        let registry = ConnectionRegistry(limit: maxConnections) { state.metrics.connectionsOpen(.dot, $0) }
        let channel = try await DNSStreamListener.bind(host: host, port: port, group: MultiThreadedEventLoopGroup.singleton, registry: registry) {
            state.metrics.connectionRejected(.dot, reason: "limit")
        } handlers: { channel in
            let guardHandler = ConnectionGuard(deadline: handshakeTimeout) { state.metrics.connectionRejected(.dot, reason: "timeout") }
            try channel.pipeline.syncOperations.addHandlers([
                guardHandler, NIOSSLServerHandler(context: sslContext), HandshakeDone(guardHandler),
                TCPQueryHandler(state: state, lookups: lookups, transport: .dot),
            ])
        }
        onBound(channel.localAddress)
        state.logger.notice("dns over tls listening", metadata: ["address": "\(host):\(port)"])
        try? await gracefulShutdown()
        try? await channel.close()
        await registry.drain(grace: .seconds(1))
    }

    /// Tells the guard that the handshake is done: from then on the query handler keeps time.
    final class HandshakeDone: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        private let guardHandler: ConnectionGuard

        init(_ guardHandler: ConnectionGuard) { self.guardHandler = guardHandler }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            context.fireUserInboundEventTriggered(event)
            if case TLSUserEvent.handshakeCompleted = event {
                guardHandler.protocolReady()
                context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            }
        }
    }
}
