import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2

#if canImport(Glibc)
import Glibc
#endif

/// The I/O of one HTTP/2 connection: frames from NIOHTTP2Handler go into ``HTTP2ServerConnection``,
/// its actions come out as frames; complete requests go to the ``RequestGateway``. No child channel
/// and no task per stream: a cached DoH answer is written in the same read that brought its query,
/// and every answer of one read leaves in one flush.
final class HTTP2ConnectionHandler: ChannelInboundHandler, TickingHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private var connection: HTTP2ServerConnection
    private let gateway: RequestGateway
    private let logger: Logger
    var context: ChannelHandlerContext?
    private var reading = false
    private var flushPending = false
    var timer: RepeatedTask?
    /// The write of the last frame sent while draining: the connection closes after it is on the wire.
    private var lastWrite: EventLoopFuture<Void>?
    private var closing = false
    private var date = HTTPDate()

    private var answersSinceFlush = 0
    /// Answers written in one read before they are flushed, without waiting for the read to end.
    /// One flush for a whole read made client and server take turns: the client got 64 answers at
    /// once, then sent 64 queries at once, each side idle while the other worked (h2load: 35,000
    /// answers a second with one flush per read, 61,000 with a flush every 16; BENCHMARKS.md).
    static let flushEvery = 16

    init(gateway: RequestGateway, configuration: HTTP2ServerConnection.Configuration, logger: Logger) {
        self.gateway = gateway
        self.logger = logger
        connection = HTTP2ServerConnection(configuration: configuration, now: .now())
    }

    func handlerAdded(context: ChannelHandlerContext) {
        connection = HTTP2ServerConnection(configuration: connection.configuration, now: context.eventLoop.now)
        startTicking(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTicking()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            perform(connection.receivedHeaders(frame.streamID, headers.headers, endStream: headers.endStream, now: now))
        case .data(let payload):
            guard case .byteBuffer(let bytes) = payload.data else { return }
            perform(connection.receivedData(frame.streamID, bytes, endStream: payload.endStream))
        case .rstStream:
            connection.streamClosed(frame.streamID, now: now)
        default:
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        for (stream, increment) in connection.readComplete() {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .windowUpdate(windowSizeIncrement: increment))), promise: nil)
            flushPending = true
        }
        if flushPending {
            flushPending = false
            context.flush()
        }
        answersSinceFlush = 0
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case let updated as NIOHTTP2WindowUpdatedEvent where updated.streamID == .rootStream:
            if let inbound = updated.inboundWindowSize { connection.inboundConnectionWindow(inbound) }
        case let closed as StreamClosedEvent:
            connection.streamClosed(closed.streamID, now: now)
            if connection.closeIfDrained() { close() }
        case is ChannelShouldQuiesceEvent:
            drain()
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A stream error has been answered with RST_STREAM by NIOHTTP2Handler already; a connection
        // error ends the connection. Logged at debug only, counted always: a client must not be
        // able to flood the log.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            connection.streamClosed(streamError.streamID, now: now)
            return
        }
        gateway.metrics.connectionRejected(.http, reason: "error")
        logger.debug("HTTP/2 connection error", metadata: ["error": "\(error)"])
        context.close(promise: nil)
    }

    // MARK: Actions

    private func perform(_ action: HTTP2ServerConnection.Action) {
        switch action {
        case .none:
            break
        case let .dispatch(id, request):
            dispatch(id, request)
        case let .respond(id, status, reason, _):
            let answer = HTTPAnswer.text(status, reason)
            if let head = connection.head(of: id) { gateway.recordEarly(answer, target: head.path, method: head.method) }
            write(id, answer)
        case let .reset(id, code):
            context?.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(code))), promise: nil)
            scheduleFlush()
        }
    }

    private func dispatch(_ id: HTTP2StreamID, _ request: HTTP2ServerConnection.Request) {
        guard let context else { return }
        let head = request.head
        let gatewayRequest = GatewayRequest(
            method: head.method, target: head.path, scheme: head.headers.first(name: ":scheme"),
            authority: head.authority, fields: .http2(head.headers), body: request.body,
            contentLength: head.contentLength)
        switch gateway.respond(to: gatewayRequest, on: context.channel) {
        case .ready(let answer):
            write(id, answer)
        case .pending(let future):
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            future.whenSuccess { answer in handler.value.write(id, answer) }
        }
    }

    /// HEADERS and DATA (END_STREAM on the last), then RST_STREAM NO_ERROR when the client is still
    /// sending; flushed with the rest of this read, or on the next turn of the loop for an answer
    /// that came from a task.
    private func write(_ id: HTTP2StreamID, _ answer: HTTPAnswer) {
        guard let context, connection.isAwaitingResponse(id) else { return }
        var headers = HPACKHeaders()
        headers.reserveCapacity(answer.headers.count + 4)
        headers.add(name: ":status", value: String(answer.status))
        for (name, value) in answer.headers {
            // Values that change from answer to answer stay out of the HPACK table.
            headers.add(name: name, value: value, indexing: name == "cache-control" ? .nonIndexable : .indexable)
        }
        headers.add(name: "content-length", value: String(answer.body.readableBytes), indexing: .nonIndexable)
        headers.add(name: "date", value: date.now())
        let ended = connection.requestEnded(id)
        let empty = answer.body.readableBytes == 0
        let closeAfter = connection.responded(id, now: now)
        let headersFrame = HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: empty)))
        let dataFrame = empty ? nil : HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(answer.body), endStream: true)))
        // The last frame's write is watched when the connection closes after it, or when the client
        // is still sending: RST_STREAM then follows once the answer is on the wire (NIOHTTP2 drops
        // a stream's queued DATA when a reset overtakes it).
        let watched = !ended || connection.isDraining || closeAfter
        let promise = watched ? context.eventLoop.makePromise(of: Void.self) : nil
        context.write(wrapOutboundOut(headersFrame), promise: dataFrame == nil ? promise : nil)
        if let dataFrame { context.write(wrapOutboundOut(dataFrame), promise: promise) }
        if let promise {
            lastWrite = promise.futureResult
            if !ended {
                let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
                promise.futureResult.whenSuccess {
                    guard let context = handler.value.context else { return }
                    context.writeAndFlush(handler.value.wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.noError))), promise: nil)
                }
            }
        }
        scheduleFlush()
        if closeAfter { close() }
    }

    private func scheduleFlush() {
        answersSinceFlush += 1
        if reading, answersSinceFlush >= Self.flushEvery, let context {
            answersSinceFlush = 0
            flushPending = false
            context.flush()
            return
        }
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

    // MARK: Time and draining

    func tick(now: NIODeadline) {
        let housekeeping = connection.tick(now: now)
        for (id, status, reason) in housekeeping.responses {
            let answer = HTTPAnswer.text(status, reason)
            if let head = connection.head(of: id) { gateway.recordEarly(answer, target: head.path, method: head.method) }
            write(id, answer)
        }
        if let last = housekeeping.goAway { sendGoAway(last) }
        if housekeeping.close || connection.isClosed { close() }
    }

    /// SIGTERM: GOAWAY with the last stream taken; close once those are answered (or at the drain
    /// deadline).
    private func drain() {
        guard let last = connection.startDraining(now: now) else { return }
        sendGoAway(last)
        if connection.closeIfDrained() { close() }
    }

    private func sendGoAway(_ last: HTTP2StreamID) {
        guard let context else { return }
        let promise = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(
            wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: last, errorCode: .noError, opaqueData: nil))),
            promise: promise)
        lastWrite = promise.futureResult
    }

    /// Closes once the last frame written is on the wire (a close fails writes not yet sent).
    private func close() {
        guard !closing, let context else { return }
        closing = true
        flushPending = false
        context.flush()
        let channel = context.channel
        (lastWrite ?? context.eventLoop.makeSucceededVoidFuture()).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// The `Date` field (RFC 9110 §6.6.1), formatted once a second.
struct HTTPDate {
    private var second = 0
    private var text = ""

    mutating func now() -> String {
        var now = time(nil)
        if now != second {
            second = now
            var parts = tm()
            gmtime_r(&now, &parts)
            var buffer = [CChar](repeating: 0, count: 40)
            let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
            text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return text
    }
}
