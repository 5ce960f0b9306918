import DNSCore
import Logging
import Metrics
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The optional plain-DNS stub on `dns_listen`: UDP and TCP (RFC 1035 §4.2, RFC 7766), answered
/// like `/dns-query` (A/AAAA from the engine, other types forwarded to the trusted upstreams).
///
/// Over UDP a response larger than the client can take (512 bytes, or its EDNS payload size up to
/// 4,096) goes back truncated: header and question with TC set, so the client retries over TCP.
/// TCP connections may pipeline queries; answers go back as they are ready (RFC 7766 §6.2.1.1)
/// and a connection idle for 10 s is closed. A packet that is not a query is dropped and counted.
struct DNSStub: Service {
    let state: DaemonState
    let host: String
    let port: Int

    static let idleTimeout: TimeAmount = .seconds(10)

    func run() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let state = self.state
        let udp = try await DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(UDPQueryHandler(state: state)) }
            }
            .bind(host: host, port: port).get()
        let tcp: any Channel
        do {
            tcp = try await ServerBootstrap(group: group)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([
                            IdleStateHandler(readTimeout: Self.idleTimeout),
                            ByteToMessageHandler(TCPFrameDecoder()),
                            TCPQueryHandler(state: state),
                        ])
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            try? await udp.close()
            throw error
        }
        state.logger.notice("dns stub listening", metadata: ["address": "\(host):\(port)", "transports": "udp, tcp"])
        try? await gracefulShutdown()
        try? await tcp.close()
        try? await udp.close()
    }

    /// Queries being answered at once, over both transports; past `maxInFlight` new ones are
    /// dropped (and counted) rather than queued, as a loaded DNS server does.
    static let inFlight = Atomic<Int>(0)
    static let maxInFlight = 4_096

    /// Answers one packet; nil for a packet that is not a query or that came while the stub is full
    /// (dropped and counted).
    static func respond(to query: [UInt8], state: DaemonState, transport: String) async -> [UInt8]? {
        queriesCounter(transport).increment()
        defer { inFlight.subtract(1, ordering: .relaxed) }
        guard inFlight.add(1, ordering: .relaxed).newValue <= maxInFlight else {
            Counter(label: "httpdns_dns_stub_dropped_total", dimensions: [("transport", transport)]).increment()
            return nil
        }
        do {
            return try await DoHAnswering.answer(query, resolver: state.current.resolver).response
        } catch {
            Counter(label: "httpdns_dns_stub_malformed_total", dimensions: [("transport", transport)]).increment()
            return nil
        }
    }

    /// The answer to `query` when the cache has it, without suspending (for the event loop); nil
    /// when it has to go through `respond`, which counts it then.
    static func respondWithoutWaiting(to query: [UInt8], state: DaemonState, transport: String) -> [UInt8]? {
        guard let parsed = try? DoHAnswering.Query(query),
              let ready = DoHAnswering.answerWithoutWaiting(parsed, resolver: state.current.resolver) else { return nil }
        queriesCounter(transport).increment()
        return ready.response
    }

    private static let udpQueries = Counter(label: "httpdns_dns_stub_queries_total", dimensions: [("transport", "udp")])
    private static let tcpQueries = Counter(label: "httpdns_dns_stub_queries_total", dimensions: [("transport", "tcp")])
    static let truncatedCounter = Counter(label: "httpdns_dns_stub_truncated_total")

    private static func queriesCounter(_ transport: String) -> Counter { transport == "udp" ? udpQueries : tcpQueries }

    /// What fits in a UDP response to `query`: 512 bytes, or the EDNS payload size it advertised
    /// (RFC 6891 §6.2.3, RFC 6891 §6.2.5: below 512 counts as 512), capped at 4,096.
    static func udpLimit(of query: [UInt8]) -> Int {
        guard let message = try? DNSMessage(decoding: query),
              let opt = message.additionals.first(where: { $0.type == .opt }) else { return 512 }
        return min(max(Int(opt.recordClass), 512), 4_096)
    }

    /// The header and question of `response` with TC set: "ask again over TCP".
    static func truncated(_ response: [UInt8]) -> [UInt8] {
        guard var message = try? DNSMessage(decoding: response) else { return Array(response.prefix(12)) }
        message.flags |= 0x0200
        message.answers = []
        message.authorities = []
        message.additionals = []
        return message.encode()
    }
}

private final class UDPQueryHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    let state: DaemonState

    init(state: DaemonState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        let query = Array(buffer: envelope.data)
        // A cached answer is sent from here, on the event loop; the rest wait in a task.
        if let ready = DNSStub.respondWithoutWaiting(to: query, state: state, transport: "udp") {
            context.write(wrapOutboundOut(Self.reply(ready, to: query, at: envelope.remoteAddress)), promise: nil)
            return
        }
        let channel = context.channel
        let state = self.state
        Task {
            guard let response = await DNSStub.respond(to: query, state: state, transport: "udp") else { return }
            try? await channel.writeAndFlush(Self.reply(response, to: query, at: envelope.remoteAddress))
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    /// The datagram for `response`, truncated (TC) when it is larger than the client takes.
    static func reply(_ response: [UInt8], to query: [UInt8], at address: SocketAddress) -> AddressedEnvelope<ByteBuffer> {
        var response = response
        if response.count > DNSStub.udpLimit(of: query) {
            DNSStub.truncatedCounter.increment()
            response = DNSStub.truncated(response)
        }
        return AddressedEnvelope(remoteAddress: address, data: ByteBuffer(bytes: response))
    }
}

/// RFC 1035 §4.2.2: each message is preceded by its length as two bytes.
private struct TCPFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self),
              buffer.readableBytes >= 2 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 2)
        context.fireChannelRead(wrapInboundOut(buffer.readSlice(length: Int(length))!))
        return .continue
    }
}

private final class TCPQueryHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let state: DaemonState

    init(state: DaemonState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let query = Array(buffer: unwrapInboundIn(data))
        let channel = context.channel
        let state = self.state
        Task {
            guard let response = await DNSStub.respond(to: query, state: state, transport: "tcp") else {
                // A stream that carried garbage cannot be trusted to be framed right any more.
                try? await channel.close()
                return
            }
            var buffer = ByteBuffer()
            buffer.writeInteger(UInt16(response.count))
            buffer.writeBytes(response)
            try? await channel.writeAndFlush(buffer)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
