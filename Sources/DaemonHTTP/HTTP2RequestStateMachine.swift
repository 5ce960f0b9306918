import HTTP2Wire
import NIOCore
import NIOHPACK

import struct NIOHTTP2.HTTP2StreamID

/// One HTTP/2 server connection as a state machine: frames and timer ticks in, actions out, no I/O.
/// ``HTTP2ConnectionHandler`` feeds it and carries out what it says; unit tests drive it directly.
///
/// What it decides:
/// - a request is gathered from HEADERS and DATA and dispatched once complete; a malformed header
///   block (RFC 9113 §8.2-§8.3, ``RequestHead``) or a body that contradicts its `content-length` is
///   reset with PROTOCOL_ERROR;
/// - a body over the limit (declared or received) is answered 413 at once; the stream's window is
///   no longer refilled, so the client may finish what that window allows (dropped) or is reset
///   with NO_ERROR once it is used up (``HTTP2FrameLayer``) — at once when its declared length could
///   never fit;
/// - a request whose body is not complete within ``Configuration/requestTimeout`` is answered 408;
/// - the connection window is refilled as DATA arrives, but not while the bodies held unfinished
///   exceed ``Configuration/bodyBudget``: a client that opens many streams and never finishes them
///   stalls itself rather than filling memory;
/// - a connection with no stream open for ``Configuration/idleTimeout`` (PINGs do not count), or
///   that opens no stream within ``Configuration/firstRequestTimeout``, is told GOAWAY and closed;
/// - a draining connection (GOAWAY sent) refuses new streams, and closes once its streams are
///   answered or ``Configuration/drainTimeout`` has passed, whichever is first.
struct HTTP2RequestStateMachine {
    struct Configuration: Sendable, Equatable {
        var maxBodyBytes = 65_535
        var requestTimeout = TimeAmount.seconds(10)
        var firstRequestTimeout = TimeAmount.seconds(10)
        var idleTimeout = TimeAmount.seconds(120)
        var drainTimeout = TimeAmount.seconds(5)
        /// Unfinished request-body bytes held per connection before its window stops being refilled.
        var bodyBudget = 256 * 1024
    }

    /// A complete request, ready to be answered.
    struct Request: Sendable {
        var head: RequestHead
        var body: ByteBuffer?
    }

    /// What the handler does for one inbound frame.
    enum Action {
        case none
        /// Answer this request (the client may still be sending: see ``HTTP2FrameLayer``'s rule for
        /// the rest of its body).
        case dispatch(HTTP2StreamID, Request)
        /// Send this error response at once; `reset`: RST_STREAM NO_ERROR right after it, the client
        /// not being let finish its body.
        case respond(HTTP2StreamID, status: Int, reason: String, reset: Bool)
        case reset(HTTP2StreamID, HTTP2ErrorCode)
    }

    /// What the handler does on a timer tick or at the end of a read.
    struct Housekeeping {
        var windowUpdates: [(HTTP2StreamID, Int)] = []
        var responses: [(HTTP2StreamID, status: Int, reason: String)] = []
        var goAway = false
        var close = false
    }

    private enum StreamState {
        /// Headers in, body still arriving; `unacknowledged` DATA bytes not yet given back to the
        /// stream's window.
        case receiving(deadline: NIODeadline, received: Int, unacknowledged: Int)
        /// Dispatched; `ended` whether the client's side is closed.
        case answering(ended: Bool)
    }

    private struct Stream {
        var head: RequestHead
        var body: ByteBuffer?
        var state: StreamState
    }

    private enum ConnectionState: Equatable {
        case active
        case draining(deadline: NIODeadline)
        case closed
    }

    let configuration: Configuration
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var state = ConnectionState.active
    private(set) var openedAnyStream = false
    /// When the connection last had no stream open (nil while some are).
    private var idleSince: NIODeadline?
    /// Body bytes held in streams that have not finished.
    private var heldBodyBytes = 0
    private var touched: [HTTP2StreamID] = []

    init(configuration: Configuration, now: NIODeadline) {
        self.configuration = configuration
        idleSince = now
    }

    var isDraining: Bool { if case .draining = state { true } else { false } }
    var isClosed: Bool { state == .closed }
    var openStreams: Int { streams.count }

    // MARK: Frames

    mutating func receivedHeaders(_ id: HTTP2StreamID, _ headers: HPACKHeaders, endStream: Bool, now: @autoclosure () -> NIODeadline) -> Action {
        if var stream = streams[id] {
            // Trailers: they must end the request, and may carry no pseudo-header.
            guard case let .receiving(_, received, _) = stream.state else { return .none }
            do { try RequestHead.validateTrailers(headers) } catch { return malformed(id) }
            guard endStream else { return malformed(id) }
            if let declared = stream.head.contentLength, declared != received { return malformed(id) }
            stream.state = .answering(ended: true)
            streams[id] = stream
            finishBody(received)
            return .dispatch(id, Request(head: stream.head, body: stream.body))
        }
        guard !isDraining, state != .closed else { return .reset(id, .refusedStream) }
        let head: RequestHead
        do { head = try RequestHead.validate(headers) } catch { return .reset(id, .protocolError) }
        openedAnyStream = true
        idleSince = nil
        if let declared = head.contentLength {
            if endStream, declared != 0 { return .reset(id, .protocolError) }
            if declared > configuration.maxBodyBytes {
                streams[id] = Stream(head: head, body: nil, state: .answering(ended: endStream))
                // Reset after the answer only when the rest could not fit the stream's window (the
                // client would wait for a WINDOW_UPDATE); a smaller body is let finish, and dropped.
                return .respond(id, status: 413, reason: overLimit(declared: declared), reset: !endStream && declared > HTTP2FrameLayer.defaultWindow)
            }
        }
        if endStream {
            streams[id] = Stream(head: head, body: nil, state: .answering(ended: true))
            return .dispatch(id, Request(head: head, body: nil))
        }
        streams[id] = Stream(
            head: head, body: nil,
            state: .receiving(deadline: now() + configuration.requestTimeout, received: 0, unacknowledged: 0))
        return .none
    }

    mutating func receivedData(_ id: HTTP2StreamID, _ data: ByteBuffer, endStream: Bool) -> Action {
        guard var stream = streams[id], case .receiving(let deadline, var received, var unacknowledged) = stream.state else {
            return .none  // a stream already answered (its window no longer matters) or unknown
        }
        let length = data.readableBytes
        received += length
        if let declared = stream.head.contentLength, received > declared || (endStream && received != declared) {
            streams[id] = nil
            finishBody(received - length)
            return .reset(id, .protocolError)
        }
        if received > configuration.maxBodyBytes {
            stream.body = nil
            stream.state = .answering(ended: endStream)
            streams[id] = stream
            finishBody(received - length)
            // No declared length: what the stream's window still allows is dropped, then the reset.
            return .respond(id, status: 413, reason: overLimit(declared: nil), reset: false)
        }
        if length > 0 {
            var body = stream.body ?? ByteBuffer()
            var data = data
            body.writeBuffer(&data)
            stream.body = body
            heldBodyBytes += length
        }
        if endStream {
            stream.state = .answering(ended: true)
            streams[id] = stream
            finishBody(received)
            return .dispatch(id, Request(head: stream.head, body: stream.body))
        }
        unacknowledged += length
        if unacknowledged > 0 { touched.append(id) }
        stream.state = .receiving(deadline: deadline, received: received, unacknowledged: unacknowledged)
        streams[id] = stream
        return .none
    }

    /// The client reset the stream, or the frame layer reset it.
    mutating func streamClosed(_ id: HTTP2StreamID, now: @autoclosure () -> NIODeadline) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        if case let .receiving(_, received, _) = stream.state { finishBody(received) }
        if streams.isEmpty { idleSince = now() }
    }

    /// The handler has written the last frame of this stream's response.
    /// - Returns: whether the connection should now close (draining, and nothing left to answer).
    mutating func responded(_ id: HTTP2StreamID, now: @autoclosure () -> NIODeadline) -> Bool {
        streams[id] = nil
        if streams.isEmpty { idleSince = now() }
        return closeIfDrained()
    }

    /// Whether the stream still expects a response (false once it was reset or answered).
    func isAwaitingResponse(_ id: HTTP2StreamID) -> Bool {
        if case .answering = streams[id]?.state { return true }
        return false
    }

    /// The head of a stream's request, while the stream is known.
    func head(of id: HTTP2StreamID) -> RequestHead? { streams[id]?.head }

    /// Whether the client has finished sending this request.
    func requestEnded(_ id: HTTP2StreamID) -> Bool {
        if case .answering(let ended) = streams[id]?.state { return ended }
        return false
    }

    // MARK: Windows and time

    /// The WINDOW_UPDATEs of the end of a read: streams still receiving get back what they used (so
    /// a body can reach the limit + 1 and be refused), and the connection window is topped up while
    /// the unfinished bodies stay under the budget.
    /// - Parameter connectionWindow: the connection's inbound window now (the frame layer keeps it).
    /// - Returns: the stream (the root stream for the connection) and increment of each update.
    mutating func readComplete(connectionWindow: Int) -> [(HTTP2StreamID, Int)] {
        var updates: [(HTTP2StreamID, Int)] = []
        if connectionWindow < HTTP2FrameLayer.defaultWindow / 2, heldBodyBytes < configuration.bodyBudget {
            updates.append((.rootStream, HTTP2FrameLayer.defaultWindow - connectionWindow))
        }
        for id in touched {
            guard var stream = streams[id], case let .receiving(deadline, received, unacknowledged) = stream.state,
                unacknowledged > 0
            else { continue }
            updates.append((id, unacknowledged))
            stream.state = .receiving(deadline: deadline, received: received, unacknowledged: 0)
            streams[id] = stream
        }
        touched.removeAll(keepingCapacity: true)
        return updates
    }

    /// Timeouts: requests whose body did not arrive in time, an idle connection, a drain that took
    /// too long.
    mutating func tick(now: NIODeadline) -> Housekeeping {
        var result = Housekeeping()
        for (id, stream) in streams {
            guard case let .receiving(deadline, received, _) = stream.state, deadline <= now else { continue }
            streams[id] = Stream(head: stream.head, body: nil, state: .answering(ended: false))
            finishBody(received)
            result.responses.append((id, 408, HTTPAnswer.incompleteRequest(within: configuration.requestTimeout)))
        }
        switch state {
        case .active:
            if let since = idleSince, streams.isEmpty {
                let limit = openedAnyStream ? configuration.idleTimeout : configuration.firstRequestTimeout
                if now - since >= limit {
                    result.goAway = startDraining(now: now)
                    result.close = closeIfDrained()
                }
            }
        case .draining(let deadline):
            if deadline <= now {
                state = .closed
                result.close = true
            }
        case .closed:
            break
        }
        return result
    }

    /// Begins a graceful close (SIGTERM, or idleness): returns whether GOAWAY is to be sent (false
    /// when already draining). Its last stream ID is the frame layer's highest.
    mutating func startDraining(now: NIODeadline) -> Bool {
        guard state == .active else { return false }
        state = .draining(deadline: now + configuration.drainTimeout)
        return true
    }

    /// Whether a draining connection has nothing left to answer (and is now closed).
    mutating func closeIfDrained() -> Bool {
        guard isDraining, streams.isEmpty else { return false }
        state = .closed
        return true
    }

    // MARK: Helpers

    private mutating func malformed(_ id: HTTP2StreamID) -> Action {
        if let stream = streams.removeValue(forKey: id), case let .receiving(_, received, _) = stream.state { finishBody(received) }
        return .reset(id, .protocolError)
    }

    /// A body is no longer held: its bytes leave the budget.
    private mutating func finishBody(_ received: Int) {
        heldBodyBytes = max(0, heldBodyBytes - received)
    }

    private func overLimit(declared: Int?) -> String {
        HTTPAnswer.bodyOverLimit(declared: declared, limit: configuration.maxBodyBytes)
    }
}
