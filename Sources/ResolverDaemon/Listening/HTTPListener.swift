import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import ResolverConfig
import ServiceLifecycle

/// The HTTP listener (`listen:`): HTTPS with ALPN offering h2 and http/1.1 when `tls:` is set,
/// plain HTTP/1.1 otherwise. Every connection passes a ``ConnectionGuard`` and is counted in a
/// ``ConnectionRegistry``; on graceful shutdown the listener stops accepting, drains, and returns
/// within `drainTimeout` whatever its clients do.
struct HTTPListener: Service {
    /// What a connection may cost, taken from the configuration current when it is accepted (so a
    /// SIGHUP changes them for new connections).
    struct Limits: Sendable {
        var handshakeTimeout: TimeAmount
        var http1: HTTP1ConnectionHandler.Configuration
        var http2: HTTP2RequestStateMachine.Configuration

        init(_ limits: DaemonSettings.Limits, drainTimeout: Duration) {
            func amount(_ duration: Duration) -> TimeAmount { .nanoseconds(Int64(duration / .nanoseconds(1))) }
            handshakeTimeout = amount(limits.requestTimeout)
            http1 = .init(maxBodyBytes: limits.maxBodyBytes, requestTimeout: amount(limits.requestTimeout), idleTimeout: amount(limits.idleTimeout))
            http2 = .init(
                maxBodyBytes: limits.maxBodyBytes, requestTimeout: amount(limits.requestTimeout),
                firstRequestTimeout: amount(limits.requestTimeout), idleTimeout: amount(limits.idleTimeout),
                drainTimeout: amount(drainTimeout))
        }
    }

    let host: String
    let port: Int
    let sslContext: NIOSSLContext?
    let gateway: RequestGateway
    let maxConnections: Int
    let drainTimeout: Duration
    let logger: Logger
    /// Called with the bound address once the listener is up.
    var onBound: @Sendable (SocketAddress?) -> Void = { _ in }

    func run() async throws {
        let registry = ConnectionRegistry(limit: maxConnections) { [metrics = gateway.metrics] in
            metrics.connectionsOpen(.http, $0)
        }
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [self] channel in
                guard registry.admit(channel) else {
                    gateway.metrics.connectionRejected(.http, reason: "limit")
                    return channel.close()
                }
                return channel.eventLoop.makeCompletedFuture { try setUp(channel) }
            }
            .bind(host: host, port: port).get()
        onBound(server.localAddress)
        logger.notice(
            "listening",
            metadata: [
                "address": "\(server.localAddress.map { "\($0)" } ?? "\(host):\(port)")", "scheme": "\(sslContext == nil ? "http" : "https")",
            ])
        await withGracefulShutdownHandler {
            try? await server.closeFuture.get()
        } onGracefulShutdown: {
            server.close(promise: nil)
        }
        await registry.drain(grace: drainTimeout)
    }

    private func setUp(_ channel: any Channel) throws {
        let sync = channel.pipeline.syncOperations
        let metrics = gateway.metrics
        let limits = Limits(gateway.state.current.config.daemon.limits, drainTimeout: drainTimeout)
        let guardHandler = ConnectionGuard(deadline: limits.handshakeTimeout) { metrics.connectionRejected(.http, reason: "timeout") }
        try sync.addHandler(guardHandler)
        guard let sslContext else {
            try Self.addHTTP1(channel, gateway: gateway, limits: limits, scheme: "http", logger: logger)
            guardHandler.protocolReady()
            return
        }
        try sync.addHandler(NIOSSLServerHandler(context: sslContext))
        let gateway = self.gateway, logger = self.logger
        try sync.addHandler(
            ApplicationProtocolNegotiationHandler { result, channel in
                channel.eventLoop.makeCompletedFuture {
                    switch result {
                    case .negotiated("h2"):
                        try channel.pipeline.syncOperations.addHandler(
                            HTTP2ConnectionHandler(gateway: gateway, configuration: limits.http2, logger: logger))
                    case .negotiated("http/1.1"), .fallback:
                        try Self.addHTTP1(channel, gateway: gateway, limits: limits, scheme: "https", logger: logger)
                    case .negotiated:
                        throw NIOHTTP2Errors.invalidALPNToken()
                    }
                    guardHandler.protocolReady()
                }
            })
    }

    private static func addHTTP1(_ channel: any Channel, gateway: RequestGateway, limits: Limits, scheme: String, logger: Logger) throws {
        let sync = channel.pipeline.syncOperations
        try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
        try sync.addHandler(HTTP1ConnectionHandler(gateway: gateway, configuration: limits.http1, scheme: scheme, logger: logger))
    }
}
