import DNSCore
import DaemonHTTP
import DaemonListening
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The local forward proxy (`proxy_listen:`): HTTP/1.1 `CONNECT host:port` tunnels opened to the
/// trusted addresses of `host` (resolved through HTTPDNS, never the system's DNS unless the fallback
/// policy says so), with RFC 8305 fallback across them; then bytes relayed both ways untouched, so
/// TLS stays end to end between the client and the origin. Policy (`proxy:`) is read per request,
/// so SIGHUP changes it; on SIGTERM the listener stops accepting and tunnels get the drain time.
package struct ProxyListener: Service {
    let context: any ProxyResolving
    let host: String
    let port: Int
    /// Tunnels and requests open at once: `proxy.max_connections`, or less when the descriptor
    /// limit could not hold that many (the daemon's `connectionLimits`).
    let maxConnections: Int
    let drainTimeout: Duration
    let logger: Logger
    package var onBound: @Sendable (SocketAddress?) -> Void = { _ in }

    package init(context: any ProxyResolving, host: String, port: Int, maxConnections: Int, drainTimeout: Duration, logger: Logger) {
        self.context = context
        self.host = host
        self.port = port
        self.maxConnections = maxConnections
        self.drainTimeout = drainTimeout
        self.logger = logger
    }

    package func run() async throws {
        let context = self.context
        let registry = ConnectionRegistry(limit: maxConnections) { context.count(.connectionsOpen($0)) }
        #if os(Linux)
        // CONNECT tunnels are served by the splice relay; what is not a clean CONNECT comes back to
        // the NIO handlers below with the bytes the relay read.
        let environment = SpliceRelay.Environment(context: context, registry: registry, logger: logger) { [logger] fd, head in
            Self.adopt(fd, head: head, context: context, registry: registry, logger: logger)
        }
        let relay = try SpliceRelay(host: host, port: port, loops: System.coreCount, environment: environment)
        relay.start()
        let address = try? SocketAddress.makeAddressResolvingHost(host, port: relay.port)
        onBound(address)
        logger.notice(
            "proxy listening", metadata: ["address": "\(address.map { "\($0)" } ?? "\(host):\(port)")", "relay": "splice"], source: DaemonLog.source)
        try? await gracefulShutdown()
        // New connections stop; tunnels get the grace (the registry counts them: its drain is woken by
        // the last one's end), then whatever is left is closed and the relay's threads end.
        relay.quiesce()
        await registry.drain(grace: drainTimeout)
        await relay.stop()
        #else
        // One listening socket per event loop (SO_REUSEPORT), each keeping its connections on its own
        // loop: a connection is accepted, served and dialled out on one thread. With one socket for
        // the group, every new tunnel was handed from the accepting thread to another (a wake-up
        // each; docs/benchmarks-history.md, the proxy's CONNECT latency against tinyproxy).
        var servers: [any Channel] = []
        var boundPort = port
        for loop in MultiThreadedEventLoopGroup.singleton.makeIterator() {
            let server = try await ServerBootstrap(group: loop, childGroup: loop)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .serverChannelOption(ChannelOptions.socketOption(NIOBSDSocket.Option(rawValue: SO_REUSEPORT)), value: 1)
                .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
                .childChannelOption(.allowRemoteHalfClosure, value: true)
                .childChannelOption(.recvAllocator, value: Self.receiveBuffers)
                .childChannelInitializer { [logger] channel in
                    guard registry.admit(channel) else {
                        context.count(.outcome("connection_limit"))
                        return channel.close()
                    }
                    return channel.eventLoop.makeCompletedFuture { try Self.configure(channel, context: context, logger: logger) }
                }
                .bind(host: host, port: boundPort).get()
            // Port 0: the first socket's port, shared by the others.
            boundPort = server.localAddress?.port ?? boundPort
            servers.append(server)
        }
        let listening = servers
        let address = listening.first?.localAddress
        onBound(address)
        logger.notice(
            "proxy listening", metadata: ["address": "\(address.map { "\($0)" } ?? "\(host):\(port)")", "sockets": "\(servers.count)"],
            source: DaemonLog.source)
        await ListenerLifetime.serve(listening, registry: registry, grace: drainTimeout)
        #endif
    }

    /// Tunnels move bulk data: reads grow up to 256 KiB (NIO's default tops out at 64 KiB).
    static let receiveBuffers = AdaptiveRecvByteBufferAllocator(minimum: 1024, initial: 2048, maximum: 262_144)

    /// The HTTP/1.1 handlers of a client connection.
    static func configure(_ channel: any Channel, context: any ProxyResolving, logger: Logger) throws {
        let settings = context.settings
        let sync = channel.pipeline.syncOperations
        let budget = HeaderBudget(limit: settings.maxHeaderBytes)
        let decoder = ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes))
        let encoder = HTTPResponseEncoder()
        try sync.addHandler(budget)
        try sync.addHandler(decoder)
        try sync.addHandler(encoder)
        try sync.addHandler(
            ProxyConnectionHandler(
                context: context, budget: budget, decoder: decoder, encoder: encoder,
                headTimeout: TimeAmount(setting: context.headTimeout),
                logger: logger))
    }

    /// A connection the relay read the start of and hands over: the same handlers, fed `head`
    /// first, then reading from the socket. Its registry reservation becomes the channel's entry.
    static func adopt(_ fd: CInt, head: [UInt8], context: any ProxyResolving, registry: ConnectionRegistry, logger: Logger) {
        ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelOption(.recvAllocator, value: receiveBuffers)
            // Nothing is read from the socket before `head` went through the handlers.
            .channelOption(.autoRead, value: false)
            .channelInitializer { channel in
                _ = registry.admit(channel, force: true)
                return channel.eventLoop.makeCompletedFuture { try configure(channel, context: context, logger: logger) }
            }
            .withConnectedSocket(fd)
            .whenComplete { result in
                switch result {
                case let .success(channel):
                    channel.pipeline.fireChannelRead(channel.allocator.buffer(bytes: head))
                    channel.pipeline.fireChannelReadComplete()
                    channel.setOption(.autoRead, value: true).whenFailure { _ in channel.close(promise: nil) }
                case let .failure(error):
                    logger.debug("proxy hand-off failed", metadata: ["error": "\(error)"], source: DaemonLog.source)
                }
            }
    }
}
