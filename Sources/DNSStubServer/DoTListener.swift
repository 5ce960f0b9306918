import DNSWire
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
package struct DoTListener: Service {
    let answering: any StubAnswering
    let host: String
    let port: Int
    let sslContext: NIOSSLContext
    let maxConnections: Int
    let handshakeTimeout: TimeAmount
    let lookups: LookupBudget
    /// What open connections get to finish at shutdown.
    package var drainGrace = ListenerLifetime.drainGrace
    package var onBound: @Sendable (SocketAddress?) -> Void = { _ in }
    /// PROXY v2 headers from trusted proxies (`trusted_proxies:`), or nil to read none.
    package var proxyProtocol: ProxyProtocolPolicy?

    /// A listener on `host`:`port` with the daemon's certificate in `sslContext`; `lookups` is the
    /// budget of lookups in flight over DNS over TLS, `handshakeTimeout` the time to finish TLS.
    package init(
        answering: any StubAnswering, host: String, port: Int, sslContext: NIOSSLContext, maxConnections: Int, handshakeTimeout: TimeAmount,
        lookups: LookupBudget
    ) {
        self.answering = answering
        self.host = host
        self.port = port
        self.sslContext = sslContext
        self.maxConnections = maxConnections
        self.handshakeTimeout = handshakeTimeout
        self.lookups = lookups
    }

    package func run() async throws {
        let answering = self.answering, sslContext = self.sslContext, lookups = self.lookups, handshakeTimeout = self.handshakeTimeout
        let proxyProtocol = self.proxyProtocol
        let registry = ConnectionRegistry(limit: maxConnections) { answering.count(.connectionsOpen($0), over: .dot) }
        let channel = try await DNSStreamListener.bind(host: host, port: port, group: MultiThreadedEventLoopGroup.singleton, registry: registry) {
            answering.count(.connectionRejected(reason: "limit"), over: .dot)
        } handlers: { channel in
            let guardHandler = ConnectionGuard(deadline: handshakeTimeout) { answering.count(.connectionRejected(reason: "timeout"), over: .dot) }
            try channel.pipeline.syncOperations.addHandler(guardHandler)
            // A trusted proxy's PROXY v2 header comes before TLS.
            let client = try ProxyProtocolPolicy.install(proxyProtocol, on: channel)
            try channel.pipeline.syncOperations.addHandlers([
                NIOSSLServerHandler(context: sslContext), HandshakeDone(guardHandler),
                TCPQueryHandler(answering: answering, lookups: lookups, transport: .dot, client: client),
            ])
        }
        onBound(channel.localAddress)
        answering.logger.notice("dns over tls listening", metadata: ["address": "\(host):\(port)"], source: DaemonLog.source)
        await ListenerLifetime.serve([channel], registry: registry, grace: drainGrace)
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
