import DNSCore
import DaemonHTTP
import DaemonListening
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// One client connection: reads the request head, applies the policy, resolves, dials, and forwards
/// a plain `http://` request or (outside Linux, where ``SpliceRelay`` tunnels) turns the connection
/// into a tunnel. On Linux it serves what the relay hands over: plain requests, and the refusals of
/// heads the relay does not vouch for.
final class ProxyConnectionHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = HTTPServerResponsePart
    typealias OutboundOut = HTTPServerResponsePart

    private enum Stage {
        case head
        case awaitingEnd(ProxyTarget)
        case connecting
        /// A plain `http://` request being forwarded; `requestDone` once the client's `.end` is in.
        case forwarding(requestDone: Bool)
        case done
    }

    private let proxy: any ProxyResolving
    private let budget: HeaderBudget
    private let decoder: ByteToMessageHandler<HTTPRequestDecoder>
    private let encoder: HTTPResponseEncoder
    private let headTimeout: TimeAmount
    private let logger: Logger
    private var stage = Stage.head
    /// Bytes that arrived after the CONNECT head (a client that did not wait for the 200).
    private var pending: [NIOAny] = []
    private var headDeadline: Scheduled<Void>?
    /// Forwarding: the upstream connection once made, the request parts that arrived before it, and
    /// whether the client's reads wait for the upstream to take more (backpressure).
    private var upstream: (any Channel)?
    private var forwardQueue: [HTTPClientRequestPart] = []
    private var readHeld = false
    private var responseStarted = false
    private var keepAlive = true
    private weak var context: ChannelHandlerContext?

    init(
        context: any ProxyResolving, budget: HeaderBudget, decoder: ByteToMessageHandler<HTTPRequestDecoder>, encoder: HTTPResponseEncoder,
        headTimeout: TimeAmount, logger: Logger
    ) {
        self.proxy = context
        self.budget = budget
        self.decoder = decoder
        self.encoder = encoder
        self.headTimeout = headTimeout
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // A client that never sends a complete head is closed (a slow-loris costs one timer).
        let channel = context.channel
        headDeadline = context.eventLoop.scheduleTask(in: headTimeout) { [proxy] in
            proxy.count(.outcome("head_timeout"))
            channel.close(promise: nil)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        headDeadline?.cancel()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch stage {
        case .connecting, .done, .forwarding(requestDone: true):
            pending.append(data)
            return
        case .forwarding(requestDone: false):
            forwardRequestPart(unwrapInboundIn(data))
            return
        case .head, .awaitingEnd:
            break
        }
        switch unwrapInboundIn(data) {
        case let .head(head):
            headDeadline?.cancel()
            context.pipeline.syncOperations.removeHandler(budget, promise: nil)
            begin(head, context: context)
        case .body:
            break  // a CONNECT has no body; anything else was refused at its head
        case .end:
            if case let .awaitingEnd(target) = stage {
                stage = .connecting
                resolve(target, context: context) { upstream, idle in
                    self.glue(upstream, idle: idle, context: context)
                    self.proxy.count(.outcome("tunnel"))
                }
            }
        }
    }

    /// The client stopped sending (half-close is allowed for tunnels): outside a forwarded exchange
    /// that still owes a response, the connection is done.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let event = event as? ChannelEvent, case .inputClosed = event else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        if case .forwarding(requestDone: true) = stage {
            keepAlive = false  // answer the request in flight, then close
        } else {
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case .head = stage, error is HTTPParserError {
            refuse(ProxyRefusal(status: 400, reason: "malformed request (\(error))"), context: context)
            return
        }
        context.close(promise: nil)
    }

    private func begin(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let policy = ProxyPolicy(settings: proxy.settings)
        guard policy.authorizes(head.headers.first(name: "proxy-authorization")) else {
            refuse(ProxyRefusal(status: 407, reason: "proxy authentication required"), context: context)
            return
        }
        guard head.method == .CONNECT else {
            guard head.uri.lowercased().hasPrefix("http://") else {
                let reason =
                    head.uri.lowercased().hasPrefix("https://")
                    ? "send https:// requests through CONNECT, so TLS stays end to end"
                    : "this is a forward proxy: send CONNECT host:port or an absolute http:// URL"
                refuse(ProxyRefusal(status: 400, reason: reason), context: context)
                return
            }
            forward(head, policy: policy, context: context)
            return
        }
        guard let target = ProxyTarget(authority: head.uri) else {
            refuse(ProxyRefusal(status: 400, reason: "CONNECT needs host:port, got '\(head.uri.prefix(100))'"), context: context)
            return
        }
        if let refusal = policy.refusal(for: target, plainHTTP: false) {
            refuse(refusal, context: context)
            return
        }
        #if os(Linux)
        // The splice relay is the one tunnel path on Linux: a CONNECT that reaches this handler is
        // one the relay's scan did not take (body framing, or not the connection's first request).
        let reason = "CONNECT must be the first request of a connection, without a body (Content-Length other than 0, Transfer-Encoding)"
        refuse(ProxyRefusal(status: 400, reason: reason), context: context)
        #else
        stage = .awaitingEnd(target)
        #endif
    }

    /// Resolves through HTTPDNS off the event loop, then dials on it.
    private func resolve(
        _ target: ProxyTarget, context: ChannelHandlerContext, connected: @escaping (any Channel, TimeAmount) -> Void
    ) {
        let proxy = self.proxy
        let lookup: EventLoopFuture<[IPAddress]>
        if let literal = IPAddress(target.host) {
            lookup = context.eventLoop.makeSucceededFuture([literal])
        } else if let cached = proxy.addressesWithoutWaiting(target.host) {
            // A fresh cached answer: no hop off the event loop and back.
            lookup = context.eventLoop.makeSucceededFuture(cached)
        } else {
            lookup = context.eventLoop.makeFutureWithTask { try await proxy.addresses(target.host) }
        }
        lookup.assumeIsolated().whenComplete { result in
            switch result {
            case let .success(addresses):
                let policy = ProxyPolicy(settings: proxy.settings)
                switch policy.destinations(addresses, host: target.host, advice: proxy.advice(for: target.host)) {
                case let .success(dialable): self.dial(target, addresses: dialable, context: context, connected: connected)
                case let .failure(refusal): self.refuse(refusal, context: context)
                }
            case let .failure(error):
                self.refuse(.resolution(of: target.host, failed: error as? DNSError ?? DNSError(.internalError, "\(error)")), context: context)
            }
        }
    }

    private func dial(
        _ target: ProxyTarget, addresses: [IPAddress], context: ChannelHandlerContext, connected: @escaping (any Channel, TimeAmount) -> Void
    ) {
        let settings = proxy.settings
        let timeout = TimeAmount(setting: settings.connectTimeout)
        let idle = TimeAmount(setting: settings.idleTimeout)
        let started = NIODeadline.now()
        let bootstrap = ClientBootstrap(group: context.eventLoop)
            .connectTimeout(timeout)
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .channelOption(.recvAllocator, value: ProxyListener.receiveBuffers)
        let dialling = PlannedDial(bootstrap: bootstrap, port: target.port, on: context.eventLoop) { result in
            switch result {
            case let .success(upstream):
                connected(upstream, idle)
                self.logger.debug(
                    "upstream connected",
                    metadata: [
                        "target": "\(target.host):\(target.port)", "remote": "\(upstream.remoteAddress.map { "\($0)" } ?? "?")",
                        "connect_ms": "\((NIODeadline.now() - started).nanoseconds / 1_000_000)",
                    ], source: DaemonLog.source)
            case let .failure(refusal):
                self.refuse(refusal, context: context)
            }
        }
        dialling.start(addresses, target: "\(target.host):\(target.port)", connectTimeout: settings.connectTimeout)
    }

    /// Answers 200 (RFC 9110 §9.3.6: no Content-Length, no Transfer-Encoding), takes the HTTP
    /// handlers out, and relays bytes both ways from now on.
    private func glue(_ upstream: any Channel, idle: TimeAmount, context: ChannelHandlerContext) {
        stage = .done
        let pipeline = context.pipeline.syncOperations
        pipeline.removeHandler(encoder, promise: nil)
        pipeline.removeHandler(decoder, promise: nil)
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(string: "HTTP/1.1 200 Connection established\r\n\r\n")), promise: nil)
        let (client, server) = TunnelHandler.pair(proxy: proxy, idle: idle)
        do {
            try pipeline.addHandler(client)
            try upstream.pipeline.syncOperations.addHandler(server)
        } catch {
            upstream.close(promise: nil)
            context.close(promise: nil)
            return
        }
        for data in pending { context.fireChannelRead(data) }
        pending = []
        if readHeld {
            readHeld = false
            context.read()  // the read held while connecting, now for the tunnel
        }
        pipeline.removeHandler(self, promise: nil)
    }

    // MARK: Plain http:// forwarding

    /// RFC 9110 §7.6.1: connection options, and the fields a `Connection` header names, are for one hop.
    static let hopByHop: Set<String> = [
        "connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "trailer",
        "transfer-encoding", "upgrade",
    ]

    /// Fields a `Connection` header may not take away: the message's framing and its target.
    /// Dropping `Content-Length` from a GET with a body would turn the body into a second request
    /// on the origin's connection (smuggling).
    static let framing: Set<String> = ["content-length", "transfer-encoding", "host"]

    static func endToEnd(_ headers: HTTPHeaders) -> HTTPHeaders {
        let named = Set(headers[canonicalForm: "connection"].map { $0.lowercased() }).subtracting(framing)
        var result = HTTPHeaders()
        for (name, value) in headers where !hopByHop.contains(name.lowercased()) && !named.contains(name.lowercased()) {
            result.add(name: name, value: value)
        }
        return result
    }

    /// The framing field a request's `Connection` header names, if any: such a request is refused
    /// (400), as HAProxy and nginx refuse ambiguous framing rather than guess.
    static func connectionNamesFraming(_ headers: HTTPHeaders) -> String? {
        headers[canonicalForm: "connection"].map { $0.lowercased() }.first { framing.contains($0) }
    }

    /// An absolute-form request: checked, resolved, dialled, then sent in origin form with the body
    /// streamed as it arrives; the response streams back the same way.
    private func forward(_ head: HTTPRequestHead, policy: ProxyPolicy, context: ChannelHandlerContext) {
        guard let url = URLComponents(string: head.uri), let host = url.host, !host.isEmpty,
            let target = ProxyTarget(host: host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host, port: url.port ?? 80)
        else {
            refuse(ProxyRefusal(status: 400, reason: "not a valid http:// URL"), context: context)
            return
        }
        if let refusal = policy.refusal(for: target, plainHTTP: true) {
            refuse(refusal, context: context)
            return
        }
        if let field = Self.connectionNamesFraming(head.headers) {
            refuse(ProxyRefusal(status: 400, reason: "the Connection header names \(field), which frames the request"), context: context)
            return
        }
        var path = url.percentEncodedPath.isEmpty ? "/" : url.percentEncodedPath
        if let query = url.percentEncodedQuery { path += "?" + query }
        var headers = Self.endToEnd(head.headers)
        let authority = url.port.map { "\(target.host.contains(":") ? "[\(target.host)]" : target.host):\($0)" } ?? target.host
        headers.replaceOrAdd(name: "Host", value: authority)
        headers.add(name: "Via", value: "1.1 resolve")
        if head.headers[canonicalForm: "transfer-encoding"].contains(where: { $0.lowercased() == "chunked" }) {
            headers.add(name: "Transfer-Encoding", value: "chunked")  // the body's framing is re-done by the encoder
        }
        forwardQueue = [.head(HTTPRequestHead(version: .http1_1, method: head.method, uri: path, headers: headers))]
        keepAlive = head.isKeepAlive
        responseStarted = false
        stage = .forwarding(requestDone: false)
        resolve(target, context: context) { upstream, idle in
            self.connectedForForwarding(upstream, idle: idle, context: context)
        }
    }

    private func connectedForForwarding(_ upstream: any Channel, idle: TimeAmount, context: ChannelHandlerContext) {
        guard case .forwarding = stage, context.channel.isActive else {
            upstream.close(promise: nil)
            return
        }
        self.upstream = upstream
        do {
            let sync = upstream.pipeline.syncOperations
            try sync.addHandler(IdleStateHandler(allTimeout: idle))
            try sync.addHandler(HTTPRequestEncoder())
            // 1xx answers (100 Continue above all) go to the client: a client that sent
            // `Expect: 100-continue` would otherwise wait its timeout (curl: 1 s) before the body.
            try sync.addHandler(ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .forward)))
            try sync.addHandler(ForwardedResponseHandler(client: self))
        } catch {
            upstream.close(promise: nil)
            refuse(ProxyRefusal(status: 502, reason: "cannot set up the upstream connection"), context: context)
            return
        }
        for part in forwardQueue { upstream.write(part, promise: nil) }
        forwardQueue = []
        upstream.flush()
        resumeReading()
        proxy.count(.outcome("forwarded"))
    }

    private func forwardRequestPart(_ part: HTTPServerRequestPart) {
        let outbound: HTTPClientRequestPart
        switch part {
        case .head: return  // cannot happen: a head ends the previous request
        case let .body(buffer):
            proxy.count(.bytes(upstream: true, buffer.readableBytes))
            outbound = .body(.byteBuffer(buffer))
        case let .end(trailers):
            outbound = .end(trailers)
            stage = .forwarding(requestDone: true)
        }
        if let upstream {
            upstream.write(outbound, promise: nil)
            if case .end = outbound { upstream.flush() }
        } else {
            forwardQueue.append(outbound)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        upstream?.flush()
        context.fireChannelReadComplete()
    }

    /// The upstream's response parts, on the same event loop.
    fileprivate func upstreamResponded(_ part: HTTPClientResponsePart) {
        guard let context else { return }
        switch part {
        case let .head(head) where (100..<200).contains(head.status.code):
            // Informational: passed on at once; the final response follows.
            guard head.status != .switchingProtocols else { return }
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: head.status))), promise: nil)
        case let .head(head):
            responseStarted = true
            var headers = Self.endToEnd(head.headers)
            headers.add(name: "Via", value: "1.1 resolve")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: head.status, headers: headers))), promise: nil)
        case let .body(buffer):
            proxy.count(.bytes(upstream: false, buffer.readableBytes))
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        case let .end(trailers):
            context.writeAndFlush(wrapOutboundOut(.end(trailers)), promise: nil)
            finishExchange(context: context)
        }
    }

    fileprivate func upstreamFlushed() { context?.flush() }

    /// The upstream closed or failed before its response ended.
    fileprivate func upstreamEnded(error: (any Error)?) {
        guard let context, case .forwarding = stage else { return }
        if responseStarted {
            context.close(promise: nil)  // a cut response must look cut to the client
        } else {
            refuse(ProxyRefusal(status: 502, reason: "the origin closed without a response\(error.map { " (\($0))" } ?? "")"), context: context)
        }
        upstream = nil
    }

    /// One exchange done: the connection is ready for the client's next request (keep-alive).
    private func finishExchange(context: ChannelHandlerContext) {
        let finished = upstream
        upstream = nil
        finished?.close(promise: nil)
        guard keepAlive else {
            stage = .done
            context.close(promise: nil)
            return
        }
        stage = .head
        // A kept-alive connection waits for its next request at most the proxy's idle timeout.
        let channel = context.channel
        let idle = TimeAmount(setting: proxy.settings.idleTimeout)
        headDeadline = context.eventLoop.scheduleTask(in: idle) { channel.close(promise: nil) }
        resumeReading()
        let queued = pending
        pending = []
        for data in queued { channelRead(context: context, data: data) }
    }

    // MARK: Backpressure while forwarding

    func read(context: ChannelHandlerContext) {
        switch stage {
        case .forwarding(requestDone: false) where upstream.map({ !$0.isWritable }) ?? true,
            .forwarding(requestDone: true), .connecting:
            // Read the client's body only as fast as the upstream takes it (not at all while it is
            // being dialled), and nothing more until a response is done or a tunnel is set up: what
            // a client sends ahead waits in its socket, not in this process.
            readHeld = true
        case .head, .awaitingEnd, .forwarding, .done:
            context.read()
        }
    }

    fileprivate func resumeReading() {
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    fileprivate var clientIsWritable: Bool { context?.channel.isWritable ?? true }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { upstreamReader?.resumeReading() }
        context.fireChannelWritabilityChanged()
    }

    fileprivate weak var upstreamReader: ForwardedResponseHandler?

    private func refuse(_ refusal: ProxyRefusal, context: ChannelHandlerContext) {
        stage = .done
        upstream?.close(promise: nil)
        upstream = nil
        proxy.count(.outcome(String(refusal.status)))
        logger.info(
            "proxy request refused", metadata: ["status": "\(refusal.status)", "reason": "\(refusal.reason)"], source: DaemonLog.source)
        let headers = HTTPHeaders(refusal.headerFields.map { ($0.name, $0.value) })
        let body = context.channel.allocator.buffer(string: refusal.body)
        let status = HTTPResponseStatus(statusCode: refusal.status)
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }
}

/// The upstream side of a forwarded plain-HTTP exchange: response parts go to the client's handler;
/// reading stops while the client cannot take more.
final class ForwardedResponseHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundIn = HTTPClientRequestPart
    typealias OutboundOut = HTTPClientRequestPart

    private let client: ProxyConnectionHandler
    private var context: ChannelHandlerContext?
    private var readHeld = false
    private var ended = false

    init(client: ProxyConnectionHandler) {
        self.client = client
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        client.upstreamReader = self
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if case .end = part { ended = true }
        client.upstreamResponded(part)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        client.upstreamFlushed()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { client.resumeReading() }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !ended { client.upstreamEnded(error: nil) }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent { context.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !ended {
            ended = true
            client.upstreamEnded(error: error)
        }
        context.close(promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        if !client.clientIsWritable {
            readHeld = true
            return
        }
        context.read()
    }

    func resumeReading() {
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }
}
