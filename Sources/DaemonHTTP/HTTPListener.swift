import DaemonListening
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle

/// The HTTP listener (`listen:`): HTTPS with ALPN offering h2 and http/1.1 when `tls:` is set,
/// plain HTTP/1.1 otherwise. Every connection passes a ``ConnectionGuard`` and is counted in a
/// ``ConnectionRegistry``; on graceful shutdown the listener stops accepting, drains, and returns
/// within `drainTimeout` whatever its clients do.
package struct HTTPListener: Service {
    /// What a connection may cost, taken from the configuration current when it is accepted (so a
    /// SIGHUP changes them for new connections).
    package struct Limits: Sendable {
        var handshakeTimeout: TimeAmount
        var http1: HTTP1ConnectionHandler.Configuration
        var http2: HTTP2RequestStateMachine.Configuration

        /// - Parameters:
        ///   - maxBodyBytes: the largest request body taken.
        ///   - requestTimeout: the time to complete a request, and to finish the TLS handshake.
        ///   - idleTimeout: the time a connection may be idle between requests.
        ///   - drainTimeout: the time an HTTP/2 connection has to answer its streams after GOAWAY.
        package init(maxBodyBytes: Int, requestTimeout: TimeAmount, idleTimeout: TimeAmount, drainTimeout: TimeAmount) {
            handshakeTimeout = requestTimeout
            http1 = .init(maxBodyBytes: maxBodyBytes, requestTimeout: requestTimeout, idleTimeout: idleTimeout)
            http2 = .init(
                maxBodyBytes: maxBodyBytes, requestTimeout: requestTimeout, firstRequestTimeout: requestTimeout, idleTimeout: idleTimeout,
                drainTimeout: drainTimeout)
        }
    }

    let host: String
    let port: Int
    let sslContext: NIOSSLContext?
    let handling: any HTTPRequestHandling
    /// The limits of a connection accepted now.
    let limits: @Sendable () -> Limits
    let maxConnections: Int
    let drainTimeout: Duration
    let logger: Logger
    /// Called with the bound address once the listener is up.
    package var onBound: @Sendable (SocketAddress?) -> Void = { _ in }
    /// PROXY v2 headers from trusted proxies (`trusted_proxies:`), or nil to read none.
    package var proxyProtocol: ProxyProtocolPolicy?

    package init(
        host: String, port: Int, sslContext: NIOSSLContext?, handling: any HTTPRequestHandling, limits: @escaping @Sendable () -> Limits,
        maxConnections: Int, drainTimeout: Duration, logger: Logger
    ) {
        self.host = host
        self.port = port
        self.sslContext = sslContext
        self.handling = handling
        self.limits = limits
        self.maxConnections = maxConnections
        self.drainTimeout = drainTimeout
        self.logger = logger
    }

    package func run() async throws {
        let registry = ConnectionRegistry(limit: maxConnections) { [handling] in handling.connectionsOpen($0) }
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { [self] channel in
                guard registry.admit(channel) else {
                    handling.connectionRejected(reason: "limit")
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
            ], source: DaemonLog.source)
        await ListenerLifetime.serve([server], registry: registry, grace: drainTimeout)
    }

    private func setUp(_ channel: any Channel) throws {
        let sync = channel.pipeline.syncOperations
        let handling = self.handling, logger = self.logger
        let limits = self.limits()
        let guardHandler = ConnectionGuard(deadline: limits.handshakeTimeout) { handling.connectionRejected(reason: "timeout") }
        try sync.addHandler(guardHandler)
        let client = try ProxyProtocolPolicy.install(proxyProtocol, on: channel)
        guard let sslContext else {
            try Self.addHTTP1(channel, handling: handling, limits: limits, scheme: "http", logger: logger, client: client)
            guardHandler.protocolReady()
            return
        }
        try sync.addHandler(NIOSSLServerHandler(context: sslContext))
        try sync.addHandler(
            ApplicationProtocolNegotiationHandler { result, channel in
                channel.eventLoop.makeCompletedFuture {
                    switch result {
                    case .negotiated("h2"):
                        try channel.pipeline.syncOperations.addHandler(
                            HTTP2ConnectionHandler(handling: handling, configuration: limits.http2, logger: logger, client: client))
                    case .negotiated("http/1.1"), .fallback:
                        try Self.addHTTP1(channel, handling: handling, limits: limits, scheme: "https", logger: logger, client: client)
                    case .negotiated:
                        throw NIOHTTP2Errors.invalidALPNToken()
                    }
                    guardHandler.protocolReady()
                }
            })
    }

    private static func addHTTP1(
        _ channel: any Channel, handling: any HTTPRequestHandling, limits: Limits, scheme: String, logger: Logger, client: ConnectionClient?
    ) throws {
        let sync = channel.pipeline.syncOperations
        try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
        try sync.addHandler(HTTP1ConnectionHandler(handling: handling, configuration: limits.http1, scheme: scheme, logger: logger, client: client))
    }
}
