import DaemonListening
import Logging
import NIOCore
import NIOHTTP1

/// One HTTP/1.1 connection after NIOHTTP1's parser (with its pipelining assistance: one request at
/// a time reaches this handler). Requests go to the ``HTTPRequestHandling``; what this handler adds is
/// time and size:
/// - the head is checked before any body is read (414, 401, 405, a declared 413), and a request
///   refused that way, or whose body grows past the limit, is answered and the connection closed
///   (the rest of its body is never read);
/// - a request must be complete within `requestTimeout` of its head (else 408 and close);
/// - a connection must send a complete head within `requestTimeout` of opening, and within
///   `idleTimeout` of its previous response; otherwise it is closed. Partial headers do not extend
///   either.
final class HTTP1ConnectionHandler: ChannelInboundHandler, TickingHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    struct Configuration: Sendable {
        var maxBodyBytes = 65_535
        var requestTimeout = TimeAmount.seconds(10)
        var idleTimeout = TimeAmount.seconds(120)
    }

    private enum State {
        case idle(since: NIODeadline)
        case receiving(head: HTTPRequestHead, body: ByteBuffer?, deadline: NIODeadline)
        /// Answered before the request ended: close once the answer is written.
        case refused
        case answering(keepAlive: Bool)
        case closed
    }

    private let handling: any HTTPRequestHandling
    /// Who the connection's client is when a trusted proxy said (PROXY v2); nil without `trusted_proxies`.
    private let client: ConnectionClient?
    private let configuration: Configuration
    private let scheme: String
    private let logger: Logger
    private var state: State
    private var served = 0
    private var closeWhenDone = false
    var context: ChannelHandlerContext?
    var timer: RepeatedTask?
    private var date = HTTPDate()

    init(handling: any HTTPRequestHandling, configuration: Configuration, scheme: String, logger: Logger, client: ConnectionClient? = nil) {
        self.client = client
        self.handling = handling
        self.configuration = configuration
        self.scheme = scheme
        self.logger = logger
        state = .idle(since: .now())
    }

    func handlerAdded(context: ChannelHandlerContext) {
        state = .idle(since: context.eventLoop.now)
        startTicking(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTicking()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch (unwrapInboundIn(data), state) {
        case (.head(let head), .idle):
            let declared = head.headers.first(name: "content-length").flatMap(Int.init)
            if let refused = handling.refusal(
                method: head.method.rawValue, target: head.uri, contentLength: declared,
                authorization: head.headers.first(name: "authorization"))
            {
                handling.recordEarly(refused, target: head.uri, method: head.method.rawValue)
                let hasBody = (declared ?? 0) > 0 || head.headers.contains(name: "transfer-encoding")
                if hasBody {
                    state = .refused
                    write(refused, version: head.version, keepAlive: false)
                } else {
                    state = .answering(keepAlive: head.isKeepAlive && !closeWhenDone)
                    write(refused, version: head.version, keepAlive: head.isKeepAlive && !closeWhenDone)
                }
                return
            }
            state = .receiving(head: head, body: nil, deadline: now + configuration.requestTimeout)
        case (.body(var chunk), .receiving(let head, var body, let deadline)):
            guard (body?.readableBytes ?? 0) + chunk.readableBytes <= configuration.maxBodyBytes else {
                state = .refused
                let answer = HTTPAnswer.text(413, HTTPAnswer.bodyOverLimit(declared: nil, limit: configuration.maxBodyBytes))
                handling.recordEarly(answer, target: head.uri, method: head.method.rawValue)
                write(answer, version: head.version, keepAlive: false)
                return
            }
            if body == nil { body = chunk } else { body!.writeBuffer(&chunk) }
            state = .receiving(head: head, body: body, deadline: deadline)
        case (.end, .receiving(let head, let body, _)):
            dispatch(head, body: body)
        case (.body, .refused), (.end, .refused), (_, .closed):
            break
        default:
            // NIOHTTP1 delivers head, body, end in order; anything else means the parser and this
            // handler disagree: close rather than guess.
            close()
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            closeWhenDone = true
            if case .idle = state { close() }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        handling.connectionRejected(reason: "error")
        logger.debug("HTTP/1.1 connection error", metadata: ["error": "\(error)"], source: DaemonLog.source)
        close()
    }

    private func dispatch(_ head: HTTPRequestHead, body: ByteBuffer?) {
        guard let context else { return }
        let keepAlive = head.isKeepAlive && !closeWhenDone
        state = .answering(keepAlive: keepAlive)
        var request = HTTPRequest(
            method: head.method.rawValue, target: head.uri, scheme: scheme,
            authority: head.headers.first(name: "host"), fields: .http1(head.headers), body: body,
            contentLength: head.headers.first(name: "content-length").flatMap(Int.init))
        request.proxiedClient = client?.proxied
        switch handling.respond(to: request, on: context.channel) {
        case .ready(let answer):
            write(answer, version: head.version, keepAlive: keepAlive)
        case .pending(let future):
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            future.whenSuccess { answer in handler.value.write(answer, version: head.version, keepAlive: keepAlive) }
        }
    }

    private func write(_ answer: HTTPAnswer, version: HTTPVersion, keepAlive: Bool) {
        guard let context else { return }
        var headers = HTTPHeaders()
        headers.reserveCapacity(answer.headers.count + 4)
        for (name, value) in answer.headers { headers.add(name: name, value: value) }
        headers.add(name: "content-length", value: String(answer.body.readableBytes))
        headers.add(name: "date", value: date.now())
        headers.add(name: "server", value: "resolve-daemon")
        if !keepAlive { headers.add(name: "connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: version, status: .init(statusCode: answer.status), headers: headers))),
            promise: nil)
        if answer.body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(answer.body))), promise: nil) }
        served += 1
        // The next state is set before `.end` is written: writing it lets NIOHTTP1's pipelining
        // handler deliver the next request at once, inside this call.
        let keepOpen: Bool
        if keepAlive, case .answering = state {
            state = .idle(since: now)
            keepOpen = true
        } else {
            state = .closed
            keepOpen = false
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: written)
        if !keepOpen {
            let channel = context.channel
            written.futureResult.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    func tick(now: NIODeadline) {
        switch state {
        case .idle(let since):
            let limit = served == 0 ? configuration.requestTimeout : configuration.idleTimeout
            if now - since >= limit {
                if served == 0 { handling.connectionRejected(reason: "timeout") }
                close()
            }
        case .receiving(let head, _, let deadline) where deadline <= now:
            state = .refused
            let answer = HTTPAnswer.text(408, HTTPAnswer.incompleteRequest(within: configuration.requestTimeout))
            handling.recordEarly(answer, target: head.uri, method: head.method.rawValue)
            write(answer, version: head.version, keepAlive: false)
        default:
            break
        }
    }

    private func close() {
        state = .closed
        context?.close(promise: nil)
    }
}
