import DNSCore
import Dispatch
import Foundation
import Hummingbird
import HummingbirdCore
import HTTPTypes
import Logging
import Metrics
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization

/// The HTTPS listener: TLS with ALPN offering h2 and http/1.1. HTTP/1.1 connections are
/// Hummingbird's. HTTP/2 connections are served at the frame level by `HTTP2ConnectionHandler`,
/// without a child channel and a task per stream: that machinery cost more than the answer itself
/// and held DoH to a quarter of BIND's rate.
struct DaemonHTTPSChannel: ServerChildChannel {
    enum Negotiated: Sendable {
        case http1(HTTP1Channel.Value)
        case http2(any Channel)
    }

    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<Negotiated>
        let channel: any Channel
    }

    let sslContext: NIOSSLContext
    let http1: HTTP1Channel
    let state: DaemonState
    let router: RouterResponder<BasicRequestContext>

    /// How long an HTTP/2 connection may send nothing at all before it is told to go away (checked
    /// every quarter of it).
    static let idleTimeout = TimeAmount.seconds(120)

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let http1 = self.http1, state = self.state, router = self.router
        return channel.eventLoop.makeCompletedFuture {
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(NIOSSLServerHandler(context: sslContext))
            let alpn = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { result in
                switch result {
                case .negotiated("h2"):
                    return channel.eventLoop.makeCompletedFuture {
                        let sync = channel.pipeline.syncOperations
                        // NIOHTTP2Handler's header-block and content-length checks cost an eighth
                        // of a DoH answer; the handler does what of them it needs (a request has
                        // :method and :path; a body is read up to the limit, whatever its
                        // content-length says), and the router's HTTPField names are checked.
                        var connection = NIOHTTP2Handler.ConnectionConfiguration()
                        connection.headerBlockValidation = .disabled
                        connection.contentLengthValidation = .disabled
                        try sync.addHandler(NIOHTTP2Handler(mode: .server, connectionConfiguration: connection))
                        try sync.addHandler(HTTP2ConnectionHandler(state: state, router: router, logger: logger))
                        return .http2(channel)
                    }
                case .negotiated("http/1.1"), .fallback:
                    return http1.setup(channel: channel, logger: logger).map { .http1($0) }
                case .negotiated(let other):
                    logger.debug("unknown ALPN protocol", metadata: ["protocol": "\(other)"])
                    return channel.close().flatMapThrowing { throw NIOHTTP2Errors.invalidALPNToken() }
                }
            }
            try sync.addHandler(alpn)
            return Value(negotiated: alpn.protocolNegotiationResult, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http1(let connection):
                await http1.handle(value: connection, logger: logger)
            case .http2(let channel):
                // The handler answers on the event loop; this task only lives as long as the
                // connection, and closes it when the server is cancelled.
                await withTaskCancellationHandler {
                    try? await channel.closeFuture.get()
                } onCancel: {
                    channel.close(promise: nil)
                }
            }
        } catch {
            logger.debug("connection ended before a protocol was agreed", metadata: ["error": "\(error)"])
        }
    }
}

/// One HTTP/2 connection, frame by frame, on its event loop. A stream's request is gathered
/// (headers, then a body of at most `limits.max_body_bytes`); then
/// - a `/dns-query` that the engine answers from its cache without a lookup is answered at once,
///   in the same read, and every answer of one read goes out in one flush;
/// - a `/dns-query` that needs a lookup or a forward runs as a task (counted against
///   `limits.max_concurrent_requests`) and is answered when it finishes;
/// - everything else, and any `/dns-query` that is not plainly valid and allowed (a wrong token,
///   a malformed query, a limit reached), goes through the router, so that every error answer,
///   the middleware and the metrics are the same as over HTTP/1.1.
final class HTTP2ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private struct Stream {
        var headers: HPACKHeaders
        var method: String
        var path: String
        var body: ByteBuffer?
        /// The request has ended (END_STREAM seen); false when it was dispatched over the limit.
        var ended = false
        var dispatched = false
    }

    private let state: DaemonState
    private let router: RouterResponder<BasicRequestContext>
    private let logger: Logger
    private var context: ChannelHandlerContext?
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var highestStreamID = HTTP2StreamID.rootStream
    /// Bytes of DATA taken since the last connection-level WINDOW_UPDATE.
    private var unacknowledgedBytes = 0
    private var reading = false
    private var flushPending = false
    private var goingAway = false
    private var lastRead = NIODeadline.now()
    private var idleCheck: RepeatedTask?
    private var closing = false
    /// The last response frame written, so that a draining connection closes after it is sent.
    private var lastWrite: EventLoopFuture<Void>?
    private var dohMetrics: [String: (requests: Counter, duration: Metrics.Timer)] = [:]
    private var dateSecond = 0
    private var dateText = ""

    init(state: DaemonState, router: RouterResponder<BasicRequestContext>, logger: Logger) {
        self.state = state
        self.router = router
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        // Idleness is checked now and then against the last read (an IdleStateHandler in the
        // pipeline would sit in the path of every frame).
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let check = TimeAmount.nanoseconds(DaemonHTTPSChannel.idleTimeout.nanoseconds / 4)
        idleCheck = context.eventLoop.scheduleRepeatedTask(initialDelay: check, delay: check) { _ in
            let this = handler.value
            if NIODeadline.now() - this.lastRead >= DaemonHTTPSChannel.idleTimeout { this.goAway() }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        idleCheck = nil
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            if var stream = streams[id] {
                // Trailers: only their END_STREAM matters.
                if headers.endStream, !stream.dispatched {
                    stream.ended = true
                    streams[id] = stream
                    dispatch(id)
                }
                return
            }
            guard !goingAway else {
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.refusedStream))), promise: nil)
                flushPending = true
                return
            }
            highestStreamID = max(highestStreamID, id)
            guard let method = headers.headers.first(name: ":method"), let path = headers.headers.first(name: ":path") else {
                // RFC 9113 §8.1.1: a malformed request is a stream error of type PROTOCOL_ERROR.
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.protocolError))), promise: nil)
                flushPending = true
                return
            }
            streams[id] = Stream(headers: headers.headers, method: method, path: path, ended: headers.endStream)
            if headers.endStream { dispatch(id) }
        case .data(let payload):
            let length = payload.data.readableBytes
            unacknowledgedBytes += length + (payload.paddingBytes ?? 0)
            if unacknowledgedBytes >= 32_768 {
                context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: unacknowledgedBytes))),
                              promise: nil)
                unacknowledgedBytes = 0
                flushPending = true
            }
            guard var stream = streams[id], !stream.dispatched else { return }
            // One byte over the limit is kept, so that the router's own check answers 413.
            let limit = state.current.config.limits.maxBodyBytes
            let room = limit + 1 - (stream.body?.readableBytes ?? 0)
            if case .byteBuffer(var bytes) = payload.data, room > 0 {
                var body = stream.body ?? context.channel.allocator.buffer(capacity: min(length, room))
                if var slice = bytes.readSlice(length: min(room, bytes.readableBytes)) { body.writeBuffer(&slice) }
                stream.body = body
            }
            stream.ended = payload.endStream
            streams[id] = stream
            if payload.endStream || (stream.body?.readableBytes ?? 0) > limit { dispatch(id) }
        case .rstStream:
            streams[id] = nil
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        lastRead = .now()
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let closed as StreamClosedEvent:
            streams[closed.streamID] = nil
            closeIfDrained()
        case is ChannelShouldQuiesceEvent:
            goAway()
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error has already been answered with RST_STREAM by NIOHTTP2Handler; a
        // connection error closes the connection.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            streams[streamError.streamID] = nil
            return
        }
        logger.notice("HTTP/2 connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    /// GOAWAY with the last stream taken, then close once those streams are answered.
    private func goAway() {
        guard let context, !goingAway else { return }
        goingAway = true
        context.writeAndFlush(wrapOutboundOut(HTTP2Frame(streamID: .rootStream,
                                                         payload: .goAway(lastStreamID: highestStreamID, errorCode: .noError, opaqueData: nil))),
                              promise: nil)
        closeIfDrained()
    }

    private func closeIfDrained() {
        guard goingAway, !closing, streams.isEmpty, let context else { return }
        closing = true
        // A close fails the writes not yet on the wire: the last answer's write must finish first.
        flushPending = false
        context.flush()
        let channel = context.channel
        (lastWrite ?? context.eventLoop.makeSucceededVoidFuture()).whenComplete { _ in channel.close(promise: nil) }
    }

    // MARK: Requests

    private func dispatch(_ id: HTTP2StreamID) {
        guard var stream = streams[id], !stream.dispatched, let context else { return }
        stream.dispatched = true
        streams[id] = stream
        let path = stream.path
        if path == "/dns-query" || path.hasPrefix("/dns-query?"), answerDNS(id, method: stream.method, path: path, stream: stream) {
            return
        }
        route(id, stream: stream, context: context)
    }

    /// The DoH fast path; false when the request is left to the router (which gives the error).
    private func answerDNS(_ id: HTTP2StreamID, method: String, path: String, stream: Stream) -> Bool {
        let started = DispatchTime.now().uptimeNanoseconds
        let current = state.current
        let config = current.config
        guard path.utf8.count <= config.limits.maxURLLength else { return false }
        if let token = config.authToken, config.protectDNSQuery {
            guard let given = stream.headers.first(name: "authorization"), AuthMiddleware<BasicRequestContext>.bearer(given, matches: token) else { return false }
        }
        let wire: [UInt8]
        switch method {
        case "GET":
            guard let parameter = Self.queryParameter("dns", in: path),
                  let decoded = DoHAnswering.queryFromGETParameter(parameter) else { return false }
            wire = decoded
        case "POST":
            guard DoHAnswering.isDNSMessage(contentType: stream.headers.first(name: "content-type")), stream.ended, let body = stream.body,
                  body.readableBytes <= config.limits.maxBodyBytes else { return false }
            wire = Array(buffer: body)
        default:
            return false
        }
        guard let query = try? DoHAnswering.Query(wire) else { return false }
        let resolver = current.resolver
        if let (response, ttl) = DoHAnswering.answerWithoutWaiting(query, resolver: resolver) {
            writeDNS(id, response, ttl: ttl, method: method, started: started)
            return true
        }
        // A lookup or a forward: a task, within the limit of requests in flight.
        let running = state.requestsInFlight.add(1, ordering: .relaxed).newValue
        guard running <= config.limits.maxConcurrentRequests, let eventLoop = context?.eventLoop else {
            state.requestsInFlight.subtract(1, ordering: .relaxed)
            return false
        }
        let handler = NIOLoopBound(self, eventLoop: eventLoop)
        let state = self.state
        Task {
            let (response, ttl) = await DoHAnswering.answer(query, resolver: resolver)
            state.requestsInFlight.subtract(1, ordering: .relaxed)
            eventLoop.execute { handler.value.writeDNS(id, response, ttl: ttl, method: method, started: started) }
        }
        return true
    }

    private func writeDNS(_ id: HTTP2StreamID, _ response: [UInt8], ttl: UInt32, method: String, started: UInt64) {
        guard let context, streams[id] != nil else { return }
        var body = context.channel.allocator.buffer(capacity: response.count)
        body.writeBytes(response)
        var headers: HPACKHeaders = [":status": "200", "content-type": "application/dns-message", "date": date()]
        // Values that change from answer to answer stay out of the HPACK table (no insert and
        // eviction per response).
        headers.add(name: "content-length", value: String(response.count), indexing: .nonIndexable)
        headers.add(name: "cache-control", value: "max-age=\(ttl)", indexing: .nonIndexable)
        write(id, headers: headers, body: body)
        // The same series the router's MetricsMiddleware keeps for /dns-query.
        let metrics = dohMetrics[method] ?? {
            let dimensions = [("http.route", "/dns-query"), ("http.request.method", method), ("http.response.status_code", "200")]
            let made = (Counter(label: "hb.requests", dimensions: dimensions),
                        Metrics.Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds))
            dohMetrics[method] = made
            return made
        }()
        metrics.requests.increment()
        metrics.duration.recordNanoseconds(Int64(DispatchTime.now().uptimeNanoseconds - started))
    }

    /// Any other request: the router, in a task, the response written back on the event loop.
    private func route(_ id: HTTP2StreamID, stream: Stream, context: ChannelHandlerContext) {
        var fields = HTTPFields()
        for (name, value, _) in stream.headers where !name.hasPrefix(":") {
            if let name = HTTPField.Name(name) { fields.append(HTTPField(name: name, value: value)) }
        }
        let head = HTTPRequest(method: HTTPRequest.Method(stream.method) ?? .get,
                               scheme: stream.headers.first(name: ":scheme"), authority: stream.headers.first(name: ":authority"),
                               path: stream.path, headerFields: fields)
        let request = Request(head: head, body: RequestBody(buffer: stream.body ?? ByteBuffer()))
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let router = self.router, channel = context.channel, logger = self.logger
        Task {
            var response: Response
            do {
                response = try await router.respond(to: request, context: BasicRequestContext(source: .init(channel: channel, logger: logger)))
            } catch {
                logger.debug("unrecognised error", metadata: ["error": "\(error)"])
                response = Response(status: .internalServerError)
            }
            let status = response.status.code
            var fields = response.headers
            let collector = BodyCollector()
            do {
                try await response.body.write(collector)
            } catch {
                logger.debug("response body failed", metadata: ["error": "\(error)"])
            }
            let bytes = collector.buffer.withLock { $0 }
            if fields[.contentLength] == nil { fields[.contentLength] = String(bytes.readableBytes) }
            let responseFields = fields
            channel.eventLoop.execute {
                var headers: HPACKHeaders = [":status": String(status)]
                for field in responseFields { headers.add(name: field.name.canonicalName, value: field.value) }
                headers.add(name: "date", value: handler.value.date())
                headers.add(name: "server", value: "resolve-daemon")
                handler.value.write(id, headers: headers, body: bytes)
            }
        }
    }

    /// HEADERS, then DATA with END_STREAM (or HEADERS alone for an empty body); flushed with the
    /// rest of this read, or on the next turn of the loop for an answer that came from a task.
    private func write(_ id: HTTP2StreamID, headers: HPACKHeaders, body: ByteBuffer) {
        guard let context, let stream = streams[id] else { return }
        var frames = [HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: body.readableBytes == 0)))]
        if body.readableBytes > 0 {
            frames.append(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(body), endStream: true))))
        }
        if !stream.ended {
            // Answered before the request ended (its body was over the limit): stop the rest.
            frames.append(HTTP2Frame(streamID: id, payload: .rstStream(.noError)))
        }
        for (index, frame) in frames.enumerated() {
            if goingAway, index == frames.count - 1 {
                let promise = context.eventLoop.makePromise(of: Void.self)
                context.write(wrapOutboundOut(frame), promise: promise)
                lastWrite = promise.futureResult
            } else {
                context.write(wrapOutboundOut(frame), promise: nil)
            }
        }
        streams[id] = nil
        scheduleFlush()
        closeIfDrained()
    }

    private func scheduleFlush() {
        guard !flushPending, let context else { return }
        flushPending = true
        if reading { return }
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let this = handler.value
            guard this.flushPending, !this.reading else { return }
            this.flushPending = false
            this.context?.flush()
        }
    }

    /// The Date header's value (RFC 9110 §6.6.1), formatted once a second.
    private func date() -> String {
        var now = time(nil)
        if now != dateSecond {
            dateSecond = now
            var parts = tm()
            gmtime_r(&now, &parts)
            var text = [CChar](repeating: 0, count: 40)
            let count = strftime(&text, text.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
            dateText = String(decoding: text[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return dateText
    }

    /// The first `name=value` of a request target's query, as it is (base64url needs no decoding).
    /// Scans bytes: the target of a DoH GET is long, and splitting it as characters cost more than
    /// answering the query.
    static func queryParameter(_ name: String, in path: String) -> Substring? {
        let bytes = path.utf8
        guard var start = bytes.firstIndex(of: UInt8(ascii: "?")).map(bytes.index(after:)) else { return nil }
        while start < bytes.endIndex {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: "&")) ?? bytes.endIndex
            if let equals = bytes[start..<end].firstIndex(of: UInt8(ascii: "=")), bytes[start..<equals].elementsEqual(name.utf8) {
                return Substring(bytes[bytes.index(after: equals)..<end])
            }
            start = end == bytes.endIndex ? end : bytes.index(after: end)
        }
        return nil
    }
}

/// Gathers a router response's body; our routes' bodies are small and whole.
private final class BodyCollector: ResponseBodyWriter, Sendable {
    let buffer = Mutex(ByteBuffer())

    func write(_ buffer: ByteBuffer) async throws {
        var buffer = buffer
        _ = self.buffer.withLock { $0.writeBuffer(&buffer) }
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
