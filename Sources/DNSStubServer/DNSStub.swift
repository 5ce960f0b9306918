import DNSCore
import DNSWire
import DaemonListening
import Dispatch
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// The optional plain-DNS stub on `dns_listen`: UDP and TCP (RFC 1035 §4.2, RFC 7766), answered
/// by a ``StubAnswering`` (the daemon's: like `/dns-query`).
///
/// - Malformed queries get FORMERR, other opcodes NOTIMP, EDNS versions above 0 BADVERS; a message
///   shorter than a header or with QR set gets nothing (it cannot be made to reflect traffic).
/// - Over UDP an answer larger than the client takes (512 bytes, or its EDNS size up to 1,232) goes
///   back with TC set, so the client retries over TCP.
/// - TCP connections may pipeline (answers go back as they are ready, RFC 7766 §6.2.1.1), but a
///   connection has at most 16 queries being answered and stops being read while its answers are
///   not being taken: a client that sends and never reads holds a few kilobytes, not gigabytes.
/// - A TCP connection idle for 10 s, or holding half a query for 10 s, is closed; at most
///   `limits.max_connections` are open.
/// - Past 1,024 queries being looked up at once, new ones that need a lookup are dropped (and
///   counted) rather than queued, as a loaded DNS server does (unbound's `num-queries-per-thread`
///   is 1,024 too). A lookup under way holds ~20 KB at its peak (its task, the upstream request),
///   and glibc keeps a burst's peak: 3,000 at once grew the daemon by 38-100 MB with 4,096 allowed.
package struct DNSStub: Service {
    let answering: any StubAnswering
    let host: String
    let port: Int
    let maxConnections: Int
    let lookups: LookupBudget
    /// What open TCP connections get to finish at shutdown.
    package var drainGrace = ListenerLifetime.drainGrace
    package var onBound: @Sendable (SocketAddress?, SocketAddress?) -> Void = { _, _ in }
    /// PROXY v2 headers from trusted proxies (`trusted_proxies:`), or nil to read none.
    package var proxyProtocol: ProxyProtocolPolicy?

    /// A stub on `host`:`port` over UDP and TCP; `lookups` is the budget of lookups in flight it
    /// shares with the daemon's other listeners.
    package init(answering: any StubAnswering, host: String, port: Int, maxConnections: Int, lookups: LookupBudget) {
        self.answering = answering
        self.host = host
        self.port = port
        self.maxConnections = maxConnections
        self.lookups = lookups
    }

    static let idleTimeout = TimeAmount.seconds(10)
    static let datagramsPerRead = 32
    /// The largest query read over UDP: queries are a question and an OPT record with a few
    /// options, a few hundred bytes; 4,096 leaves room for any padding (RFC 8467 pads to 468).
    /// A longer datagram arrives cut and is answered FORMERR.
    static let maxQuerySize = 4_096

    package func run() async throws {
        let group = MultiThreadedEventLoopGroup.singleton
        let answering = self.answering, lookups = self.lookups, proxyProtocol = self.proxyProtocol
        let udp = try await DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            // Up to 32 datagrams per recvmmsg, and a read cycle takes up to 4 of those before the
            // answers are flushed (sendmmsg). NIO cuts the receive buffer into one slice per
            // datagram, so the buffer is sized for that: with NIO's default 2,048 bytes each
            // datagram got 64 and every query longer than that (dig's default EDNS query for a
            // name of 24 characters or more) came out cut, and was answered FORMERR.
            .channelOption(.datagramVectorReadMessageCount, value: Self.datagramsPerRead)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: Self.datagramsPerRead * Self.maxQuerySize))
            .channelOption(.maxMessagesPerRead, value: 4)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        UDPQueryHandler(answering: answering, lookups: lookups, proxyProtocol: proxyProtocol))
                }
            }
            .bind(host: host, port: port).get()
        let registry = ConnectionRegistry(limit: maxConnections) { answering.count(.connectionsOpen($0), over: .tcp) }
        let tcp: any Channel
        do {
            tcp = try await DNSStreamListener.bind(host: host, port: port, group: group, registry: registry) {
                answering.count(.connectionRejected(reason: "limit"), over: .tcp)
            } handlers: { channel in
                let guardHandler = ConnectionGuard(deadline: .seconds(3600))
                try channel.pipeline.syncOperations.addHandler(guardHandler)
                let client = try ProxyProtocolPolicy.install(proxyProtocol, on: channel)
                try channel.pipeline.syncOperations.addHandler(TCPQueryHandler(answering: answering, lookups: lookups, client: client))
                guardHandler.protocolReady()
            }
        } catch {
            try? await udp.close()
            throw error
        }
        onBound(udp.localAddress, tcp.localAddress)
        answering.logger.notice("dns stub listening", metadata: ["address": "\(host):\(port)", "transports": "udp, tcp"], source: DaemonLog.source)
        await ListenerLifetime.serve([tcp, udp], registry: registry, grace: drainGrace)
    }
}

/// The stream listener that DNS over TCP and DNS over TLS share: socket options (Nagle off), the
/// connection limit, and the pipeline each connection gets.
enum DNSStreamListener {
    static func bind(
        host: String, port: Int, group: any EventLoopGroup, registry: ConnectionRegistry, rejected: @escaping @Sendable () -> Void,
        handlers: @escaping @Sendable (any Channel) throws -> Void
    ) async throws -> any Channel {
        try await ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelOption(.autoRead, value: true)
            .childChannelInitializer { channel in
                guard registry.admit(channel) else {
                    rejected()
                    return channel.close()
                }
                return channel.eventLoop.makeCompletedFuture { try handlers(channel) }
            }
            .bind(host: host, port: port).get()
    }
}

/// The daemon's one admission budget: queries being looked up (and requests being routed) at once,
/// shared by every listener that takes them — the stub over UDP and TCP, DNS over TLS and the DoH
/// gateway — so the same work is admitted the same way whichever transport brought it. Past the
/// limit a lookup is refused at once (dropped over UDP, SERVFAIL over TCP and DoT, 503 over HTTP):
/// nothing queues. The limit can change while running (a reload).
///
/// UDP's source addresses can be forged, so a flood from made-up clients escapes any per-client rate
/// limit; and one client over TCP, DoT or DoH can hold many lookups at once. So each side — UDP, and
/// the transports whose clients proved their address — may fill `limit`, and all of them together
/// `limit` and a quarter more (``reserveShare``): whichever side floods, the other keeps a quarter of
/// the budget.
package final class LookupBudget: Sendable {
    private let running = Atomic<Int>(0)
    private let spoofable = Atomic<Int>(0)
    private let verified = Atomic<Int>(0)
    private let ceiling: Atomic<Int>

    package init(limit: Int) { ceiling = Atomic(limit) }

    /// The places each side keeps from the other's flood, as a share of `limit`.
    package static let reserveShare = 4

    /// The most lookups at once from one side (UDP, or the others).
    package var limit: Int { ceiling.load(ordering: .relaxed) }

    /// Lookups in flight now.
    package var inFlight: Int { running.load(ordering: .relaxed) }

    /// A new limit (a reload): lookups in flight finish; new ones are admitted against it.
    package func setLimit(_ limit: Int) { ceiling.store(limit, ordering: .relaxed) }

    /// Takes a place; false (and nothing taken) when the budget is spent. `spoofable`: the query
    /// came over UDP.
    package func enter(spoofable fromUDP: Bool = false) -> Bool {
        let limit = self.limit
        guard fromUDP ? Self.take(spoofable, below: limit) : Self.take(verified, below: limit) else { return false }
        guard Self.take(running, below: limit + max(limit / Self.reserveShare, 1)) else {
            if fromUDP { spoofable.subtract(1, ordering: .relaxed) } else { verified.subtract(1, ordering: .relaxed) }
            return false
        }
        return true
    }

    /// Gives back a place `enter(spoofable:)` took, with the same `spoofable`.
    package func leave(spoofable fromUDP: Bool = false) {
        running.subtract(1, ordering: .relaxed)
        if fromUDP { spoofable.subtract(1, ordering: .relaxed) } else { verified.subtract(1, ordering: .relaxed) }
    }

    /// Adds one to `counter` if it stays within `bound`; a refusal writes nothing, so a flood of
    /// refused lookups never makes the count look higher than it is to the other side.
    private static func take(_ counter: borrowing Atomic<Int>, below bound: Int) -> Bool {
        var current = counter.load(ordering: .relaxed)
        while current < bound {
            let (exchanged, original) = counter.compareExchange(expected: current, desired: current + 1, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Drops since the last warning, and when that was (uptime nanoseconds).
    private let drops = Atomic<Int>(0)
    private let lastWarning = Atomic<UInt64>(0)
    static let warningInterval: UInt64 = 10_000_000_000

    /// Logs the drops at most once per 10 s (they are counted in `httpdns_dns_stub_dropped_total`
    /// one by one): a stub that sheds load says so where an operator looks first.
    func reportDrop(_ logger: Logger, now: UInt64 = DispatchTime.now().uptimeNanoseconds) {
        let count = drops.add(1, ordering: .relaxed).newValue
        let last = lastWarning.load(ordering: .relaxed)
        guard now &- last >= Self.warningInterval || last == 0,
            lastWarning.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
        else { return }
        drops.subtract(count, ordering: .relaxed)
        logger.warning(
            "dns stub: queries dropped, \(limit) lookups already in flight (the upstreams are slower than the load)",
            metadata: ["dropped": "\(count)", "since": last == 0 ? "start" : "\((now - last) / 1_000_000_000) s"], source: DaemonLog.source)
    }
}

extension StubDatagram {
    /// `reply(to:cached:)` with what `answering` has without waiting, counting queries and
    /// malformed messages.
    static func reply(to wire: [UInt8], answering: any StubAnswering, transport: DNSTransport) -> Reply {
        answering.count(.query, over: transport)
        let (reply, malformed) = reply(to: wire) { answering.answerWithoutWaiting($0) }
        if malformed { answering.count(.malformed, over: transport) }
        return reply
    }
}

private final class UDPQueryHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    typealias OutboundOut = AddressedEnvelope<ByteBuffer>

    let answering: any StubAnswering
    let lookups: LookupBudget
    /// Whether a flush of lookups' answers is scheduled: the answers that lookups finish in one turn
    /// of the loop go out in one `sendmmsg`, not one `sendmsg` each.
    let flushScheduled = Atomic<Bool>(false)

    /// PROXY v2 from trusted proxies: each of their datagrams starts with a header.
    let proxyProtocol: ProxyProtocolPolicy?

    init(answering: any StubAnswering, lookups: LookupBudget, proxyProtocol: ProxyProtocolPolicy? = nil) {
        self.answering = answering
        self.lookups = lookups
        self.proxyProtocol = proxyProtocol
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = unwrapInboundIn(data)
        var wire = Array(buffer: envelope.data)
        // The client: a trusted proxy's header names it (required from such a proxy: a datagram
        // without a whole one is dropped); anyone else's datagram is read as a query, never for a header.
        var client = envelope.remoteAddress
        if let policy = proxyProtocol, policy.trusts(envelope.remoteAddress) {
            switch ProxyProtocolV2.parse(wire) {
            case .header(let source, let length):
                wire.removeFirst(length)
                if let source { client = source }
            case .incomplete:
                policy.rejected("a datagram that ends inside its PROXY header (from \(envelope.remoteAddress.endpointText), over UDP)")
                return
            case .invalid(let reason):
                policy.rejected("\(reason) (from \(envelope.remoteAddress.endpointText), over UDP)")
                return
            }
        }
        let started = answering.logsQueries ? DispatchTime.now().uptimeNanoseconds : 0
        if case .limited(let reply) = answering.admission(client, over: .udp, query: wire) {
            if let reply {
                context.write(
                    wrapOutboundOut(AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: ByteBuffer(bytes: reply))), promise: nil)
            }
            return
        }
        switch StubDatagram.reply(to: wire, answering: answering, transport: .udp) {
        case .none:
            return
        case .now(let response):
            context.write(wrapOutboundOut(AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: ByteBuffer(bytes: response))), promise: nil)
        case .answer(let answer, let query):
            let response = StubDatagram.fitted(answer.bytes, to: query)
            if response.count < answer.bytes.count { answering.count(.truncated, over: .udp) }
            answering.logQuery(query, answer, client: client, transport: .udp, started: started)
            context.write(wrapOutboundOut(AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: ByteBuffer(bytes: response))), promise: nil)
        case .lookup(let query):
            guard lookups.enter(spoofable: true) else {
                answering.count(.dropped, over: .udp)
                lookups.reportDrop(answering.logger)
                return
            }
            let channel = context.channel, answering = self.answering, lookups = self.lookups, handler = self
            // On Swift's pool, not on this loop (as the TCP and DoH lookups are): the loop must go on
            // reading a burst of datagrams and drop what is over the budget itself, counted. With
            // lookups on the loop, 3,000 misses at once kept it busy and the kernel dropped the rest
            // of the burst unseen (Tests/Adversarial, the 1,024-lookup budget test).
            Task {
                let answer = await answering.answer(query)
                lookups.leave(spoofable: true)
                let response = StubDatagram.fitted(answer.bytes, to: query)
                if response.count < answer.bytes.count { answering.count(.truncated, over: .udp) }
                answering.logQuery(query, answer, client: client, transport: .udp, started: started)
                // Written and its flush decided on the loop, in that order: a write queued from here
                // could land after a flush already scheduled and wait unflushed.
                let reply = AddressedEnvelope(remoteAddress: envelope.remoteAddress, data: ByteBuffer(bytes: response))
                channel.eventLoop.execute {
                    channel.write(reply, promise: nil)
                    handler.flushSoon(channel)
                }
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
        context.fireChannelReadComplete()
    }

    /// On the loop, after a write: flushes once the loop has run what is queued on it (other
    /// lookups' answers among them).
    func flushSoon(_ channel: any Channel) {
        guard !flushScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        channel.eventLoop.execute {
            self.flushScheduled.store(false, ordering: .releasing)
            channel.flush()
        }
    }
}

/// DNS over TCP (RFC 1035 §4.2.2: each message preceded by its length as two bytes), with the
/// reading of a connection paused while it has ``maxPending`` answers under way or its answers are
/// not being read (the channel is not writable).
final class TCPQueryHandler: ChannelDuplexHandler, TickingHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    static let maxPending = 16

    private let answering: any StubAnswering
    private let lookups: LookupBudget
    /// `tcp`, or `dot` behind a TLS handler (RFC 7858: the same framing inside TLS).
    private let transport: DNSTransport
    private var buffer = ByteBuffer()
    private var pending = 0
    private var heldRead = false
    private var lastActivity = NIODeadline.now()
    private var partialSince: NIODeadline?
    var timer: RepeatedTask?
    var context: ChannelHandlerContext?
    private var closing = false
    /// Lookups run on the connection's loop (made when the handler is added).
    private var executor: EventLoopTaskExecutor?
    /// The client a trusted proxy named (PROXY v2); nil without `trusted_proxies`.
    private let client: ConnectionClient?

    package init(answering: any StubAnswering, lookups: LookupBudget, transport: DNSTransport = .tcp, client: ConnectionClient? = nil) {
        self.answering = answering
        self.lookups = lookups
        self.transport = transport
        self.client = client
    }

    func handlerAdded(context: ChannelHandlerContext) {
        lastActivity = context.eventLoop.now
        executor = EventLoopTaskExecutor.forCurrentLoop()
        startTicking(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTicking()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var bytes = unwrapInboundIn(data)
        buffer.writeBuffer(&bytes)
        answerWhatFits(context: context)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        answersSinceFlush = 0
        context.flush()
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            answerWhatFits(context: context)
            context.flush()
            resumeIfHeld(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Reading stops while the connection has work it cannot take on.
    func read(context: ChannelHandlerContext) {
        if mustPause(context) {
            heldRead = true
        } else {
            context.read()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            if pending == 0 { context.close(promise: nil) } else { closing = true }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func mustPause(_ context: ChannelHandlerContext) -> Bool {
        pending >= Self.maxPending || !context.channel.isWritable || hasCompleteFrame
    }

    private var hasCompleteFrame: Bool {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self) else { return false }
        return buffer.readableBytes >= 2 + Int(length)
    }

    private func resumeIfHeld(context: ChannelHandlerContext) {
        guard heldRead, !mustPause(context) else { return }
        heldRead = false
        context.read()
    }

    /// Answers complete queries while there is room; keeps the rest in the buffer.
    private func answerWhatFits(context: ChannelHandlerContext) {
        var answered = 0
        while !closing, pending < Self.maxPending, context.channel.isWritable, answered < Self.answersPerTurn,
            let length = buffer.getInteger(at: buffer.readerIndex, as: UInt16.self),
            buffer.readableBytes >= 2 + Int(length)
        {
            buffer.moveReaderIndex(forwardBy: 2)
            let wire = buffer.readBytes(length: Int(length)) ?? []
            lastActivity = now
            answered += 1
            let started = answering.logsQueries ? DispatchTime.now().uptimeNanoseconds : 0
            let peer = client?.proxied ?? context.remoteAddress
            if case .limited(let reply) = answering.admission(peer, over: transport, query: wire) {
                if let reply { write(reply, context: context) }
                continue
            }
            switch StubDatagram.reply(to: wire, answering: answering, transport: transport) {
            case .now(let response):
                write(response, context: context)
            case .answer(let answer, let query):
                write(transport.outgoing(answer.bytes, answering: query), context: context)
                answering.logQuery(query, answer, client: peer, transport: transport, started: started)
            case .none:
                // A response, or less than a header: this stream cannot be trusted to be framed
                // right any more.
                context.close(promise: nil)
                return
            case .lookup(let query):
                guard lookups.enter() else {
                    answering.count(.dropped, over: transport)
                    lookups.reportDrop(answering.logger)
                    write(DNSResponseWriter(answering: query, rcode: ResponseCode.serverFailure.rawValue).finish(), context: context)
                    continue
                }
                pending += 1
                let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                let answering = self.answering, lookups = self.lookups, eventLoop = context.eventLoop, client = peer
                let transport = self.transport
                Task(executorPreference: executor) {
                    let answer = await answering.answer(query)
                    lookups.leave()
                    answering.logQuery(query, answer, client: client, transport: transport, started: started)
                    let response = transport.outgoing(answer.bytes, answering: query)
                    eventLoop.execute { handler.value.finished(response) }
                }
            }
        }
        buffer.discardReadBytes()
        partialSince = buffer.readableBytes > 0 ? (partialSince ?? now) : nil
        // A turn's worth answered and more queries waiting: the rest in a later turn of the event
        // loop, so that one pipelining client (thousands of queries in the kernel's buffers) does
        // not keep the loop from every other connection on it.
        if answered == Self.answersPerTurn, !continuing, hasCompleteFrame {
            continuing = true
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute {
                let handler = handler.value
                handler.continuing = false
                guard let context = handler.context else { return }
                handler.answerWhatFits(context: context)
                context.flush()
                handler.resumeIfHeld(context: context)
            }
        }
    }

    /// Queries answered in one turn of the event loop before the rest wait for the next.
    static let answersPerTurn = 64
    private var continuing = false

    private func finished(_ response: [UInt8]) {
        pending -= 1
        guard let context else { return }
        write(response, context: context)
        context.flush()
        lastActivity = now
        if closing, pending == 0 {
            context.close(promise: nil)
            return
        }
        answerWhatFits(context: context)
        resumeIfHeld(context: context)
    }

    private var answersSinceFlush = 0

    /// Writes an answer; every 16th is flushed at once rather than at the end of the read, so the
    /// client can work on the first answers while the rest are made (as the HTTP/2 handler does).
    private func write(_ response: [UInt8], context: ChannelHandlerContext) {
        let response = DNSAnswers.sendable(response)
        guard let length = UInt16(exactly: response.count), length > 0 else { return }
        var out = context.channel.allocator.buffer(capacity: response.count + 2)
        out.writeInteger(length)
        out.writeBytes(response)
        context.write(wrapOutboundOut(out), promise: nil)
        answersSinceFlush += 1
        if answersSinceFlush >= WriteBatching.flushEvery {
            answersSinceFlush = 0
            context.flush()
        }
    }

    func tick(now: NIODeadline) {
        guard let context else { return }
        if let partialSince, now - partialSince >= DNSStub.idleTimeout {
            context.close(promise: nil)
        } else if pending == 0, buffer.readableBytes == 0, now - lastActivity >= DNSStub.idleTimeout {
            context.close(promise: nil)
        }
    }
}
