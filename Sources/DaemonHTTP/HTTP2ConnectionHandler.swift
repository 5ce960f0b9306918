import DaemonListening
import HTTP2Wire
import Logging
import NIOCore
import NIOHPACK

import struct NIOHTTP2.HTTP2StreamID

/// The I/O of one HTTP/2 connection: bytes from TLS go through ``HTTP2FrameLayer`` (the frame layer)
/// into ``HTTP2RequestStateMachine`` (the requests), whose actions come out as frames written by the
/// frame layer; complete requests go to the ``HTTPRequestHandling``. No child channel and no task per
/// stream: a cached DoH answer is written in the same read that brought its query, and the answers
/// of one read leave together.
///
/// A client that sends requests and never reads the answers stops being read: no frame is taken
/// from a read while the channel is not writable (the rest of the read waits, as the DNS stub's TCP
/// connections wait), and no new read is asked for, so what it costs is bounded by the write
/// buffer's high mark and one read — not by every answer a large read asks for. Answers that wait
/// for flow-control window make progress or the connection closes after the idle timeout (the
/// send timeout). Those decisions — when to flush, read and close — are ``HTTP2ConnectionIO``'s;
/// this class does the I/O they call for.
final class HTTP2ConnectionHandler: ChannelDuplexHandler, TickingHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var requests: HTTP2RequestStateMachine
    private var frames: HTTP2FrameLayer
    private let handling: any HTTPRequestHandling
    /// Who the connection's client is when a trusted proxy said (PROXY v2); nil without `trusted_proxies`.
    private let client: ConnectionClient?
    private let logger: Logger
    var context: ChannelHandlerContext?
    /// When to flush, read and close (the decisions; this class does the I/O).
    private var io = HTTP2ConnectionIO()
    var timer: RepeatedTask?
    /// The write of the last bytes sent while draining: the connection closes after they are on the wire.
    private var lastWrite: EventLoopFuture<Void>?
    private var date = HTTPDate()
    /// The start of a frame that has not fully arrived.
    private var partial: ByteBuffer?
    /// When the read being processed began: the time of every request it brings (one clock read per
    /// read, not three per request).
    private var readTime: NIODeadline?

    /// The time for deadlines: the read's start while one is processed, else the clock.
    private var moment: NIODeadline { readTime ?? now }

    init(handling: any HTTPRequestHandling, configuration: HTTP2RequestStateMachine.Configuration, logger: Logger, client: ConnectionClient? = nil) {
        self.client = client
        self.handling = handling
        self.logger = logger
        requests = HTTP2RequestStateMachine(configuration: configuration, now: .now())
        frames = HTTP2FrameLayer()
    }

    func handlerAdded(context: ChannelHandlerContext) {
        requests = HTTP2RequestStateMachine(configuration: requests.configuration, now: context.eventLoop.now)
        frames = HTTP2FrameLayer(allocator: context.channel.allocator)
        startTicking(context)
        // Our SETTINGS go out at once (RFC 9113 §3.4).
        if context.channel.isActive { flushOutput(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        flushOutput(context)
        context.fireChannelActive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTicking()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard io.readStarted() else { return }
        if readTime == nil { readTime = now }
        var bytes = unwrapInboundIn(data)
        if var held = partial {
            partial = nil
            held.writeBuffer(&bytes)
            bytes = held
        }
        process(&bytes, context)
    }

    /// Frames from `bytes` while the channel is writable; what is left (the rest of the read, or
    /// the start of a frame) waits in `partial`.
    private func process(_ bytes: inout ByteBuffer, _ context: ChannelHandlerContext) {
        do {
            while let event = try frames.next(from: &bytes, now: self.moment) {
                handle(event)
                if io.closing { return }
                if !context.channel.isWritable { break }
            }
        } catch {
            connectionError(error)
            return
        }
        if bytes.readableBytes > 0 {
            bytes.discardReadBytes()
            partial = bytes
        }
    }

    private func handle(_ event: HTTP2FrameLayer.Event) {
        switch event {
        case let .headers(id, headers, endStream):
            perform(requests.receivedHeaders(id, headers, endStream: endStream, now: moment))
        case let .data(id, bytes, endStream):
            perform(requests.receivedData(id, bytes, endStream: endStream))
        case .reset(let id):
            requests.streamClosed(id, now: moment)
            if requests.closeIfDrained() { close() }
        case .goAway:
            drain()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        finishRead(context)
        context.fireChannelReadComplete()
    }

    /// The end of a read: window updates for what the read consumed, then one flush.
    private func finishRead(_ context: ChannelHandlerContext) {
        io.readFinished()
        readTime = nil
        for (stream, increment) in requests.readComplete(connectionWindow: frames.inboundWindow) {
            frames.windowUpdate(stream, increment)
        }
        flushOutput(context)
    }

    func read(context: ChannelHandlerContext) {
        if io.readRequested(writable: context.channel.isWritable) { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        // The frames a read left when the channel filled up come first, as one more read.
        if io.resumesHeldBytes(writable: context.channel.isWritable), var held = partial, io.readStarted() {
            partial = nil
            readTime = now
            process(&held, context)
            if !io.closing { finishRead(context) }
        }
        if io.resumesRead(writable: context.channel.isWritable) { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            drain()
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        handling.connectionRejected(reason: "error")
        logger.debug("HTTP/2 connection error", metadata: ["error": "\(error)"], source: DaemonLog.source)
        context.close(promise: nil)
    }

    /// A protocol violation or an abuse bound: GOAWAY with the code and reason, then close. Logged
    /// at debug only, counted always: a client must not be able to flood the log.
    private func connectionError(_ error: HTTP2FrameLayer.ConnectionError) {
        handling.connectionRejected(reason: "error")
        logger.debug("HTTP/2 connection error", metadata: ["code": "\(error.code)", "reason": "\(error.reason)"], source: DaemonLog.source)
        frames.goAway(error.code, reason: error.reason)
        close()
    }

    // MARK: Actions

    private func perform(_ action: HTTP2RequestStateMachine.Action) {
        switch action {
        case .none:
            break
        case let .dispatch(id, request):
            dispatch(id, request)
        case let .respond(id, status, reason, reset):
            // Unless `reset`, a client still sending may finish within its window (the frame layer's rule).
            let answer = HTTPAnswer.text(status, reason)
            if let head = requests.head(of: id) { handling.recordEarly(answer, target: head.path, method: head.method) }
            write(id, answer, abortUnfinished: reset)
        case let .reset(id, code):
            frames.reset(id, code, now: moment)
            scheduleFlush()
        }
    }

    private func dispatch(_ id: HTTP2StreamID, _ request: HTTP2RequestStateMachine.Request) {
        guard let context else { return }
        let head = request.head
        var served = HTTPRequest(
            method: head.method, target: head.path, scheme: head.headers.first(name: ":scheme"),
            authority: head.authority, fields: .http2(head.headers), body: request.body,
            contentLength: head.contentLength)
        served.proxiedClient = client?.proxied
        switch handling.respond(to: served, on: context.channel) {
        case .ready(let answer):
            write(id, answer)
        case .pending(let future):
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            future.whenSuccess { answer in handler.value.write(id, answer) }
        }
    }

    /// HEADERS and DATA (END_STREAM on the last); a client still sending finishes or is reset as
    /// ``HTTP2FrameLayer/respond(_:status:headers:body:abortUnfinished:)`` says. Flushed with the rest
    /// of this read, or on the next turn of the loop for an answer that came from a task.
    private func write(_ id: HTTP2StreamID, _ answer: HTTPAnswer, abortUnfinished: Bool = false) {
        guard context != nil, !io.closing, requests.isAwaitingResponse(id) else { return }
        let closeAfter = requests.responded(id, now: moment)
        frames.respond(id, status: answer.status, headers: answer.headers, body: answer.body, date: date.now(), abortUnfinished: abortUnfinished)
        if let context { emit(context) }
        scheduleFlush()
        if closeAfter { close() }
    }

    private func scheduleFlush() {
        guard let context else { return }
        switch io.wrote() {
        case .later:
            break
        case .now:
            flushOutput(context)
        case .nextTurn:
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute {
                let this = handler.value
                guard let context = this.context, this.io.turnCame() else { return }
                this.flushOutput(context)
            }
        }
    }

    /// Writes what the frame layer has written, as one buffer and so one TLS record; the write is
    /// remembered as the last while draining.
    ///
    /// Each answer is its own record (``write(_:_:)`` emits after every answer; they leave
    /// together at the flush). A client may read one record at a time and expect one answer in it:
    /// dnsperf 2.10 pauses nghttp2 after the first complete answer of a read and loses the DATA of
    /// a second answer in the same record (its queries time out). BIND and unbound write an answer
    /// per record too. Still three records fewer per answer than a record per frame.
    private func emit(_ context: ChannelHandlerContext) {
        // Usually one buffer; resets after answers come as a second (a TLS record of their own).
        while let bytes = frames.takeOutput(allocator: context.channel.allocator) {
            if io.closing || requests.isDraining {
                let promise = context.eventLoop.makePromise(of: Void.self)
                context.write(wrapOutboundOut(bytes), promise: promise)
                lastWrite = promise.futureResult
            } else {
                context.write(wrapOutboundOut(bytes), promise: nil)
            }
        }
    }

    private func flushOutput(_ context: ChannelHandlerContext) {
        emit(context)
        context.flush()
    }

    // MARK: Time and draining

    func tick(now: NIODeadline) {
        // An answer waiting for a window the client keeps closed: once one stream has waited the
        // idle timeout, GOAWAY and close (a client that holds answers holds nothing for longer than
        // an idle one).
        let limit = requests.configuration.idleTimeout
        if io.sendTimedOut(waiting: frames.longestWaitingStream, now: now, limit: limit) {
            handling.connectionRejected(reason: "timeout")
            logger.debug("HTTP/2 send timeout", metadata: ["waited": "\(limit)"], source: DaemonLog.source)
            frames.goAway(.noError, reason: "answers waited for flow-control window too long")
            return close()
        }
        let housekeeping = requests.tick(now: now)
        for (id, status, reason) in housekeeping.responses {
            let answer = HTTPAnswer.text(status, reason)
            if let head = requests.head(of: id) { handling.recordEarly(answer, target: head.path, method: head.method) }
            // A body that did not arrive in time is not waited for any longer: reset after the 408.
            write(id, answer, abortUnfinished: true)
        }
        if housekeeping.goAway { sendGoAway() }
        if housekeeping.close || requests.isClosed { close() }
        if let context, !io.closing { flushOutput(context) }
    }

    /// SIGTERM, or the client's GOAWAY: GOAWAY with the last stream taken; close once those are
    /// answered (or at the drain deadline).
    private func drain() {
        guard requests.startDraining(now: moment) else { return }
        sendGoAway()
        if requests.closeIfDrained() { close() }
    }

    private func sendGoAway() {
        guard let context else { return }
        frames.goAway(.noError)
        flushOutput(context)
    }

    /// Closes once the last bytes written are on the wire (a close fails writes not yet sent).
    private func close() {
        guard let context, io.close() else { return }
        flushOutput(context)
        let channel = context.channel
        (lastWrite ?? context.eventLoop.makeSucceededVoidFuture()).whenComplete { _ in channel.close(promise: nil) }
    }
}
