import HTTP2Wire
import NIOCore
import NIOHPACK

import struct NIOHTTP2.HTTP2StreamID

/// The server side of the HTTP/2 framing layer (RFC 9113 §3-§6): the preface, frames in and out,
/// SETTINGS, PING, flow control in both directions, stream identifiers and states, header blocks
/// with CONTINUATION and HPACK. What a request means is ``HTTP2RequestStateMachine``'s business; this
/// layer hands it ``Event``s and writes the frames it is asked to.
///
/// The two keep disjoint books, nothing copied between them: this layer owns each stream's protocol
/// state (its ``StreamPhase``, both windows, the answer waiting for window), the connection's windows
/// and the highest stream ID (GOAWAY names it); the request machine owns each request's head, body and
/// deadline, and is handed the inbound connection window when it decides on WINDOW_UPDATEs.
///
/// Our own rather than NIOHTTP2Handler: a DoH answer is a cached lookup, so the frame layer is most
/// of the cost of a query. NIOHTTP2's general machinery (a frame enum per frame, a stream state
/// machine per stream, a user event per window change and per closed stream, HPACK with a dynamic
/// table on the way out) took about half the daemon's CPU under h2load; this layer parses frames in
/// place, keeps a small table of open streams and writes answers as bytes (BENCHMARKS.md).
///
/// Bounds against abusive clients, each a connection error (GOAWAY, then close):
/// - frames larger than our SETTINGS_MAX_FRAME_SIZE (16,384);
/// - header blocks over ``Limits/maxHeaderBlockBytes`` or ``Limits/maxContinuationFrames``;
///   decoded header lists over ``Limits/maxHeaderListSize`` (HPACK state cannot be skipped, so
///   the connection ends);
/// - more than ``Limits/maxCostlyFrames`` frames that cost work and make no progress (PING,
///   SETTINGS, PRIORITY, empty DATA, unknown types, frames in flight on streams this side reset, a
///   connection WINDOW_UPDATE that lets no DATA out while answers wait for window) in
///   ``Limits/window``;
/// - more than ``Limits/maxResets`` streams reset within any ``Limits/window`` (a sliding window):
///   the client's RST_STREAMs (rapid reset, CVE-2023-44487) and every reset the client provokes —
///   a malformed request, a WINDOW_UPDATE of 0 or past 2^31-1 on a stream, DATA beyond a stream's
///   window, a stream refused (MadeYouReset, CVE-2025-8671);
/// - a new stream over MAX_CONCURRENT_STREAMS once the client has acknowledged our SETTINGS (it
///   knew the limit; before that, RST_STREAM REFUSED_STREAM, counted as a reset);
/// - a frame that reuses a closed stream or a stream identifier lower than one already used
///   (RFC 9113 §5.1, §5.1.1): HEADERS or DATA there is a connection error, STREAM_CLOSED for a stream
///   that was open and closed, PROTOCOL_ERROR for one never opened. Frames still in flight on a
///   stream this side reset are ignored instead (the client could not know yet).
///
/// Answers wait for flow-control window at most as long as a connection may be idle: the session
/// names the stream that has waited longest (``longestWaitingStream``), and the handler closes the
/// connection when that one has waited that long — however many other streams the client lets through.
struct HTTP2FrameLayer {
    struct Limits: Sendable, Equatable {
        var maxConcurrentStreams = 100
        var maxHeaderListSize = 16_384
        var maxHeaderBlockBytes = 32_768
        var maxContinuationFrames = 64
        var maxCostlyFrames = 1_000
        var maxResets = 200
        var window = TimeAmount.seconds(30)
    }

    enum Event {
        case headers(HTTP2StreamID, HPACKHeaders, endStream: Bool)
        case data(HTTP2StreamID, ByteBuffer, endStream: Bool)
        /// The client reset the stream, or it was reset for a stream error.
        case reset(HTTP2StreamID)
        /// The client sent GOAWAY.
        case goAway
    }

    struct ConnectionError: Error, Equatable {
        var code: HTTP2ErrorCode
        var reason: String
    }

    static var preface: [UInt8] { HTTP2Limits.preface }
    static var defaultWindow: Int { HTTP2Limits.defaultWindow }
    static var maxWindow: Int { HTTP2Limits.maxWindow }
    static var ourMaxFrameSize: Int { HTTP2Limits.defaultMaxFrameSize }

    private struct Stream {
        var phase: StreamPhase
        var sendWindow: Int
        var receiveWindow: Int
    }

    private struct HeaderBlock {
        var stream: UInt32
        var endStream: Bool
        var bytes: ByteBuffer
        var frames: Int
    }

    let limits: Limits
    /// Frames to write; the handler takes them at each flush.
    private(set) var output: ByteBuffer
    private var decoder: NIOHPACK.HPACKDecoder
    private var sawPreface = false
    private var sawSettings = false
    private var streams: [UInt32: Stream] = [:]
    /// Streams with DATA waiting for window, oldest first, and the same as a set (membership is
    /// asked on every DATA that finds no room).
    private var blocked: [UInt32] = []
    private var blockedSet: Set<UInt32> = []
    private(set) var highestStreamID: UInt32 = 0
    private var block: HeaderBlock?
    private(set) var inboundWindow = defaultWindow
    private var sendWindow = defaultWindow
    private var peerInitialWindow = defaultWindow
    private var peerMaxFrameSize = ourMaxFrameSize
    /// The client lowered SETTINGS_HEADER_TABLE_SIZE: the next header block starts with a table
    /// size update to 0 (RFC 7541 §4.2). We never add to the table, so 0 is always right.
    private var tableSizeUpdatePending = false
    private var costly = RateWindow()
    private var resets = SlidingWindowCount()
    /// A reset decided by the connection layer (a malformed request) crossed ``Limits/maxResets``:
    /// thrown by the next call to ``next(from:now:)``.
    private var pendingError: ConnectionError?
    /// The client acknowledged our SETTINGS: from then on it knows MAX_CONCURRENT_STREAMS.
    private var settingsAcknowledged = false
    /// Streams that were open and closed normally, most recent last: a HEADERS or DATA on one of
    /// them is STREAM_CLOSED, on any other identifier not above the highest PROTOCOL_ERROR.
    private var closedStreams = RecentStreams()
    /// The streams this side reset last: frames the client had sent before our RST_STREAM arrived
    /// are ignored on them (RFC 9113 §5.1, "closed"), not answered with a second reset — libcurl
    /// 7.88 failed an early 413 as a "stream error" when a STREAM_CLOSED followed the NO_ERROR.
    private var resetByUs = RecentStreams()
    /// Streams answered and given up on: RST_STREAM NO_ERROR goes out after the answer's bytes.
    private var resetsAfterAnswers: [UInt32] = []

    init(limits: Limits = Limits(), allocator: ByteBufferAllocator = ByteBufferAllocator()) {
        self.limits = limits
        output = allocator.buffer(capacity: 4_096)
        decoder = NIOHPACK.HPACKDecoder(
            allocator: allocator, maxDynamicTableSize: NIOHPACK.HPACKDecoder.maxDynamicTableSize, maxHeaderListSize: limits.maxHeaderListSize)
        // Our SETTINGS: MAX_CONCURRENT_STREAMS, MAX_HEADER_LIST_SIZE (ENABLE_PUSH is the client's).
        writeFrameHeader(length: 12, type: .settings, stream: 0)
        output.writeInteger(HTTP2SettingID.maxConcurrentStreams.rawValue)
        output.writeInteger(UInt32(limits.maxConcurrentStreams))
        output.writeInteger(HTTP2SettingID.maxHeaderListSize.rawValue)
        output.writeInteger(UInt32(limits.maxHeaderListSize))
    }

    var openStreams: Int { streams.count }

    /// The stream whose DATA has waited longest for the client to open a window (nil when none waits).
    var longestWaitingStream: UInt32? { blocked.first }

    /// The bytes written so far, leaving an empty buffer behind (sized for one answer: the handler
    /// takes the output after each). Resets that follow an answer come in a buffer of their own, on
    /// the next call: written separately, they travel in a TLS record after the answer's — in the
    /// same record, libcurl 7.88 saw the stream closed before it had taken the answer's headers
    /// ("stream error"; nginx writes them apart too). The caller takes output until nil.
    mutating func takeOutput(allocator: ByteBufferAllocator) -> ByteBuffer? {
        if output.readableBytes == 0, !resetsAfterAnswers.isEmpty {
            for stream in resetsAfterAnswers { writeResetFrame(stream, .noError) }  // remembered in `finish`
            resetsAfterAnswers.removeAll()
        }
        guard output.readableBytes > 0 else { return nil }
        let bytes = output
        output = allocator.buffer(capacity: 512)
        return bytes
    }

    // MARK: Reading

    /// The next event in `buffer`, consuming the frames before it; nil when `buffer` holds no
    /// complete frame (what is left is the start of one).
    mutating func next(from buffer: inout ByteBuffer, now: @autoclosure () -> NIODeadline) throws(ConnectionError) -> Event? {
        if let pendingError { throw pendingError }
        if !sawPreface {
            guard buffer.readableBytes >= Self.preface.count else {
                if !buffer.readableBytesView.elementsEqual(Self.preface.prefix(buffer.readableBytes)) {
                    throw ConnectionError(code: .protocolError, reason: "not the HTTP/2 connection preface")
                }
                return nil
            }
            guard buffer.readableBytesView.prefix(Self.preface.count).elementsEqual(Self.preface) else {
                throw ConnectionError(code: .protocolError, reason: "not the HTTP/2 connection preface")
            }
            buffer.moveReaderIndex(forwardBy: Self.preface.count)
            sawPreface = true
        }
        while let header = buffer.withUnsafeReadableBytes({ HTTP2FrameHeader(parsing: $0) }) {
            let (length, type, flags, stream) = (header.length, header.type, header.flags, header.stream)
            guard length <= Self.ourMaxFrameSize else {
                throw ConnectionError(code: .frameSizeError, reason: "a frame of \(length) bytes (the limit is \(Self.ourMaxFrameSize))")
            }
            let size = HTTP2Limits.frameHeaderSize
            guard buffer.readableBytes >= size + length else { return nil }
            var payload = buffer.getSlice(at: buffer.readerIndex + size, length: length)!
            buffer.moveReaderIndex(forwardBy: size + length)
            if !sawSettings {
                guard type == .settings, !flags.contains(.ack) else {
                    throw ConnectionError(code: .protocolError, reason: "the first frame is not SETTINGS")
                }
                sawSettings = true
            }
            if block != nil, type != .continuation || stream != block!.stream {
                throw ConnectionError(code: .protocolError, reason: "a header block interrupted by another frame")
            }
            if let event = try frame(type, flags: flags, stream: stream, payload: &payload, now: now()) {
                return event
            }
        }
        return nil
    }

    private mutating func frame(
        _ type: HTTP2FrameType?, flags: HTTP2FrameFlags, stream: UInt32, payload: inout ByteBuffer, now: NIODeadline
    ) throws(ConnectionError) -> Event? {
        guard let type else {
            try cost(now)  // unknown frame types are ignored (RFC 9113 §4.1)
            return nil
        }
        switch type {
        case .data: return try data(flags: flags, stream: stream, payload: &payload, now: now)
        case .headers:
            guard stream != 0, stream & 1 == 1 else { throw ConnectionError(code: .protocolError, reason: "HEADERS on stream \(stream)") }
            let first = payload.getInteger(at: payload.readerIndex, as: UInt8.self)
            switch HTTP2Padding.headerBlock(count: payload.readableBytes, first: first, flags: flags) {
            case .success(let fragment):
                payload.moveWriterIndex(to: payload.readerIndex + fragment.upperBound)
                payload.moveReaderIndex(forwardBy: fragment.lowerBound)
            case .failure(.frameSizeError):
                throw ConnectionError(code: .frameSizeError, reason: "HEADERS too short for its priority")
            case .failure(let code):
                throw ConnectionError(code: code, reason: "padding longer than the frame")
            }
            block = HeaderBlock(stream: stream, endStream: flags.contains(.endStream), bytes: payload, frames: 1)
            return flags.contains(.endHeaders) ? try headerBlockEnded(now: now) : nil
        case .continuation:
            guard var current = block else { throw ConnectionError(code: .protocolError, reason: "CONTINUATION without HEADERS") }
            current.frames += 1
            guard current.frames <= limits.maxContinuationFrames, current.bytes.readableBytes + payload.readableBytes <= limits.maxHeaderBlockBytes
            else {
                throw ConnectionError(
                    code: .enhanceYourCalm,
                    reason: "a header block over \(limits.maxHeaderBlockBytes) bytes or \(limits.maxContinuationFrames) frames")
            }
            current.bytes.writeBuffer(&payload)
            block = current
            return flags.contains(.endHeaders) ? try headerBlockEnded(now: now) : nil
        case .priority:
            guard stream != 0 else { throw ConnectionError(code: .protocolError, reason: "PRIORITY on stream 0") }
            guard payload.readableBytes == 5 else {
                throw ConnectionError(code: .frameSizeError, reason: "PRIORITY of \(payload.readableBytes) bytes")
            }
            try cost(now)
            return nil
        case .rstStream:
            guard stream != 0, stream <= highestStreamID else {
                throw ConnectionError(code: .protocolError, reason: "RST_STREAM on idle stream \(stream)")
            }
            guard payload.readableBytes == 4 else {
                throw ConnectionError(code: .frameSizeError, reason: "RST_STREAM of \(payload.readableBytes) bytes")
            }
            try countReset(now)
            guard streams.removeValue(forKey: stream) != nil else { return nil }
            closedStreams.insert(stream)
            unblock(stream)
            return .reset(HTTP2StreamID(Int(stream)))
        case .settings:
            try settings(flags: flags, stream: stream, payload: &payload, now: now)
            return nil
        case .pushPromise:
            throw ConnectionError(code: .protocolError, reason: "PUSH_PROMISE from a client")
        case .ping:
            guard stream == 0 else { throw ConnectionError(code: .protocolError, reason: "PING on stream \(stream)") }
            guard payload.readableBytes == 8 else { throw ConnectionError(code: .frameSizeError, reason: "PING of \(payload.readableBytes) bytes") }
            try cost(now)
            if !flags.contains(.ack) {
                writeFrameHeader(length: 8, type: .ping, flags: .ack, stream: 0)
                output.writeBuffer(&payload)
            }
            return nil
        case .goAway:
            guard stream == 0 else { throw ConnectionError(code: .protocolError, reason: "GOAWAY on stream \(stream)") }
            guard payload.readableBytes >= 8 else { throw ConnectionError(code: .frameSizeError, reason: "GOAWAY of \(payload.readableBytes) bytes") }
            return .goAway
        case .windowUpdate:
            return try windowUpdate(stream: stream, payload: &payload, now: now)
        }
    }

    private mutating func data(flags: HTTP2FrameFlags, stream: UInt32, payload: inout ByteBuffer, now: NIODeadline) throws(ConnectionError) -> Event?
    {
        guard stream != 0 else { throw ConnectionError(code: .protocolError, reason: "DATA on stream 0") }
        guard stream <= highestStreamID else { throw ConnectionError(code: .protocolError, reason: "DATA on idle stream \(stream)") }
        let length = payload.readableBytes
        inboundWindow -= length
        guard inboundWindow >= 0 else { throw ConnectionError(code: .flowControlError, reason: "DATA beyond the connection window") }
        let endStream = flags.contains(.endStream)
        guard var state = streams[stream] else {
            // In flight when our reset left: ignored, at a cost (counted in the connection window above).
            guard resetByUs.contains(stream) else { throw closedStreamError(stream, "DATA") }
            try cost(now)
            return nil
        }
        switch state.phase.advance(.clientData(endStream: endStream)) {
        case .deliver:
            break
        case .streamError(let code):
            return try streamError(stream, code, now: now)
        case .closed:
            closeNormally(stream)
            return nil
        case .drop:
            state.receiveWindow -= length
            if state.receiveWindow < 0 {
                streams[stream] = nil
                try provokedReset(stream, .flowControlError, now: now)
            } else if state.receiveWindow == 0 {
                // Window exhausted: the client would wait for a WINDOW_UPDATE that never comes.
                streams[stream] = nil
                writeReset(stream, .noError)
            } else {
                if length == 0 { try cost(now) }
                streams[stream] = state
            }
            return nil
        case .send, .resetAfterAnswer, .discardRest, .ignored:
            return nil  // not outcomes of the client's DATA
        }
        try removePadding(flags: flags, payload: &payload)
        state.receiveWindow -= length
        guard state.receiveWindow >= 0 else { return try streamError(stream, .flowControlError, now: now) }
        let padding = length - payload.readableBytes
        if padding > 0 {
            // Padding is flow-controlled but carries nothing: the stream gets it back at once.
            state.receiveWindow += padding
            writeWindowUpdate(stream, padding)
        }
        if payload.readableBytes == 0, !endStream { try cost(now) }
        streams[stream] = state
        return .data(HTTP2StreamID(Int(stream)), payload, endStream: endStream)
    }

    private mutating func headerBlockEnded(now: NIODeadline) throws(ConnectionError) -> Event? {
        guard var current = block else { return nil }
        block = nil
        let headers: HPACKHeaders
        do {
            headers = try decoder.decodeHeaders(from: &current.bytes)
        } catch {
            throw ConnectionError(code: .compressionError, reason: "a header block that does not decode: \(error)")
        }
        let id = current.stream
        let streamID = HTTP2StreamID(Int(id))
        if var state = streams[id] {
            // Trailers; ``HTTP2RequestStateMachine`` decides what they may hold.
            switch state.phase.advance(.clientHeaders(endStream: current.endStream)) {
            case .deliver:
                streams[id] = state
                return .headers(streamID, headers, endStream: current.endStream)
            case .streamError(let code):
                return try streamError(id, code, now: now)
            case .closed:
                closeNormally(id)
                return nil
            case .drop, .send, .resetAfterAnswer, .discardRest, .ignored:
                return nil  // not outcomes of the client's HEADERS
            }
        }
        guard id > highestStreamID else {
            // A stream this side reset may still get the trailers the client sent before it knew;
            // any other identifier not above the highest is reused or skipped (RFC 9113 §5.1.1).
            guard resetByUs.contains(id) else { throw closedStreamError(id, "HEADERS") }
            try cost(now)
            return nil
        }
        highestStreamID = id
        guard streams.count < limits.maxConcurrentStreams else {
            guard !settingsAcknowledged else {
                throw ConnectionError(
                    code: .protocolError, reason: "stream \(id) over the \(limits.maxConcurrentStreams) concurrent streams of our SETTINGS")
            }
            try provokedReset(id, .refusedStream, now: now)
            return nil
        }
        streams[id] = Stream(phase: .requesting(clientEnded: current.endStream), sendWindow: peerInitialWindow, receiveWindow: Self.defaultWindow)
        return .headers(streamID, headers, endStream: current.endStream)
    }

    private mutating func settings(flags: HTTP2FrameFlags, stream: UInt32, payload: inout ByteBuffer, now: NIODeadline) throws(ConnectionError) {
        guard stream == 0 else { throw ConnectionError(code: .protocolError, reason: "SETTINGS on stream \(stream)") }
        if flags.contains(.ack) {
            guard payload.readableBytes == 0 else { throw ConnectionError(code: .frameSizeError, reason: "a SETTINGS ACK with a payload") }
            settingsAcknowledged = true
            return
        }
        guard payload.readableBytes % 6 == 0 else {
            throw ConnectionError(code: .frameSizeError, reason: "SETTINGS of \(payload.readableBytes) bytes")
        }
        try cost(now)
        var windowChange = HTTP2InitialWindowChange()
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            switch HTTP2SettingID(rawValue: identifier) {
            case .headerTableSize:
                if value < 4_096 { tableSizeUpdatePending = true }
            case .enablePush:
                guard value <= 1 else { throw ConnectionError(code: .protocolError, reason: "ENABLE_PUSH \(value)") }
            case .initialWindowSize:
                guard windowChange.record(value) else { throw ConnectionError(code: .flowControlError, reason: "INITIAL_WINDOW_SIZE \(value)") }
            case .maxFrameSize:
                guard HTTP2Limits.maxFrameSizeRange.contains(value) else {
                    throw ConnectionError(code: .protocolError, reason: "MAX_FRAME_SIZE \(value)")
                }
                peerMaxFrameSize = Int(value)
            case .maxConcurrentStreams, .maxHeaderListSize, nil:
                break  // they change nothing here, nor do unknown settings
            }
        }
        // Every stream's window moves once per frame, however often the frame repeats the setting.
        if let initial = windowChange.last {
            for state in streams.values where !windowChange.keepsWithinLimit(window: state.sendWindow, current: peerInitialWindow) {
                throw ConnectionError(code: .flowControlError, reason: "a stream window over 2^31-1")
            }
            let delta = initial - peerInitialWindow
            peerInitialWindow = initial
            if delta != 0 { for id in Array(streams.keys) { streams[id]!.sendWindow += delta } }
        }
        writeFrameHeader(length: 0, type: .settings, flags: .ack, stream: 0)
        if !blocked.isEmpty { sendQueued() }
    }

    /// A stream's WINDOW_UPDATE of 0 or past 2^31-1 resets it (a stream error the client provoked,
    /// reported to the request layer like any other reset).
    private mutating func windowUpdate(stream: UInt32, payload: inout ByteBuffer, now: NIODeadline) throws(ConnectionError) -> Event? {
        guard payload.readableBytes == 4, let raw = payload.readInteger(as: UInt32.self) else {
            throw ConnectionError(code: .frameSizeError, reason: "WINDOW_UPDATE of \(payload.readableBytes) bytes")
        }
        let increment = Int(raw & 0x7FFF_FFFF)
        if stream == 0 {
            guard increment > 0 else { throw ConnectionError(code: .protocolError, reason: "a WINDOW_UPDATE of 0 on the connection") }
            sendWindow += increment
            guard sendWindow <= Self.maxWindow else { throw ConnectionError(code: .flowControlError, reason: "the connection window over 2^31-1") }
        } else {
            guard stream <= highestStreamID else { throw ConnectionError(code: .protocolError, reason: "WINDOW_UPDATE on idle stream \(stream)") }
            guard var state = streams[stream] else { return nil }
            guard increment > 0, state.sendWindow + increment <= Self.maxWindow else {
                return try streamError(stream, increment == 0 ? .protocolError : .flowControlError, now: now)
            }
            state.sendWindow += increment
            streams[stream] = state
        }
        guard !blocked.isEmpty else { return nil }
        if stream != 0 {
            if blockedSet.contains(stream) { sendData(stream) }  // only this stream's window moved
            return nil
        }
        // Red team W1 (threat-model.md): a connection update walks every waiting answer. One that lets nothing out
        // (the client holds every stream window at 0 and repeats connection updates of 1) is work
        // without progress, and counted as such; a stream's update is one lookup, and never is.
        let written = output.writerIndex
        sendQueued()
        if output.writerIndex == written { try cost(now) }
        return nil
    }

    private func removePadding(flags: HTTP2FrameFlags, payload: inout ByteBuffer) throws(ConnectionError) {
        guard flags.contains(.padded) else { return }
        let first = payload.getInteger(at: payload.readerIndex, as: UInt8.self)
        guard let content = HTTP2Padding.content(count: payload.readableBytes, first: first, flags: flags) else {
            throw ConnectionError(code: .protocolError, reason: "padding longer than the frame")
        }
        payload.moveWriterIndex(to: payload.readerIndex + content.upperBound)
        payload.moveReaderIndex(forwardBy: content.lowerBound)
    }

    /// One more stream reset, by the client or provoked by it: past ``Limits/maxResets`` within the
    /// sliding ``Limits/window``, the connection ends.
    private mutating func countReset(_ now: NIODeadline) throws(ConnectionError) {
        guard resets.record(now, window: limits.window, limit: limits.maxResets) else {
            throw ConnectionError(
                code: .enhanceYourCalm, reason: "more than \(limits.maxResets) streams reset in \(limits.window.nanoseconds / 1_000_000_000) s")
        }
    }

    /// RST_STREAM for an error of the client's, counted as a reset.
    private mutating func provokedReset(_ stream: UInt32, _ code: HTTP2ErrorCode, now: NIODeadline) throws(ConnectionError) {
        writeReset(stream, code)
        try countReset(now)
    }

    /// The stream ended normally (both sides done): it leaves the table, and a frame on it later is
    /// STREAM_CLOSED.
    private mutating func closeNormally(_ stream: UInt32) {
        streams[stream] = nil
        closedStreams.insert(stream)
    }

    /// A stream error of the client's making (RFC 9113 §5.4.2): the stream leaves the table, RST_STREAM
    /// goes out and counts as a reset, and the request layer hears of it.
    private mutating func streamError(_ stream: UInt32, _ code: HTTP2ErrorCode, now: NIODeadline) throws(ConnectionError) -> Event {
        streams[stream] = nil
        unblock(stream)
        try provokedReset(stream, code, now: now)
        return .reset(HTTP2StreamID(Int(stream)))
    }

    /// A frame on a stream that is closed, or whose identifier is not above the highest used.
    private func closedStreamError(_ stream: UInt32, _ frame: String) -> ConnectionError {
        closedStreams.contains(stream)
            ? ConnectionError(code: .streamClosed, reason: "\(frame) on closed stream \(stream)")
            : ConnectionError(code: .protocolError, reason: "\(frame) on stream \(stream), not above the highest stream \(highestStreamID)")
    }

    private mutating func cost(_ now: NIODeadline) throws(ConnectionError) {
        if costly.count(now, window: limits.window) > limits.maxCostlyFrames {
            throw ConnectionError(code: .enhanceYourCalm, reason: "more than \(limits.maxCostlyFrames) control or empty frames")
        }
    }

    // MARK: Writing

    /// Whether the stream is open and its response not yet begun.
    func canRespond(_ id: HTTP2StreamID) -> Bool {
        guard let state = streams[UInt32(Int32(id))] else { return false }
        return !state.phase.isAnswered
    }

    /// A whole response: HEADERS (END_STREAM when there is no body), then the body as DATA within
    /// the windows (the rest queued until WINDOW_UPDATE). When the client has not finished its
    /// request, what it still sends within the stream's window is dropped and its END_STREAM closes
    /// the stream; RST_STREAM NO_ERROR (RFC 9113 §8.1) once that window is used up, or right after the
    /// response with `abortUnfinished` (a request that timed out). Resetting at once made libcurl
    /// 7.88 fail an early 413 with "stream error" in about 1 of 4 small POSTs. The frame layer adds
    /// `content-length` (the body's) and, when given, `date`.
    mutating func respond(
        _ id: HTTP2StreamID, status: Int, headers: [(String, String)], body: ByteBuffer, date: String? = nil, abortUnfinished: Bool = false
    ) {
        let stream = UInt32(Int32(id))
        guard var state = streams[stream], state.phase.advance(.answer(body: body, abortUnfinished: abortUnfinished)) == .send else { return }
        writeHeaders(stream, status: status, headers: headers, contentLength: body.readableBytes, date: date, endStream: body.readableBytes == 0)
        streams[stream] = state
        sendData(stream)
    }

    /// RST_STREAM for a stream the connection gives up on (a malformed request: the client's
    /// doing, so it counts as a reset; past the limit the next read ends the connection).
    mutating func reset(_ id: HTTP2StreamID, _ code: HTTP2ErrorCode, now: NIODeadline) {
        let stream = UInt32(Int32(id))
        streams[stream] = nil
        unblock(stream)
        do throws(ConnectionError) {
            try provokedReset(stream, code, now: now)
        } catch {
            pendingError = error
        }
    }

    mutating func windowUpdate(_ id: HTTP2StreamID, _ increment: Int) {
        let stream = UInt32(Int32(id))
        guard increment > 0 else { return }
        if stream == 0 {
            guard inboundWindow + increment <= Self.maxWindow else { return }
            inboundWindow += increment
        } else {
            guard var state = streams[stream], state.receiveWindow + increment <= Self.maxWindow else { return }
            state.receiveWindow += increment
            streams[stream] = state
        }
        writeWindowUpdate(stream, increment)
    }

    /// GOAWAY naming the highest stream the client opened (its requests are answered or reset; none
    /// after it will be), with `reason` as debug data.
    mutating func goAway(_ code: HTTP2ErrorCode, reason: String = "") {
        let debug = Array(reason.utf8.prefix(256))
        writeFrameHeader(length: 8 + debug.count, type: .goAway, stream: 0)
        output.writeInteger(highestStreamID)
        output.writeInteger(code.rawValue)
        output.writeBytes(debug)
    }

    /// DATA of the stream's answer while both windows allow, END_STREAM on the last; then the stream
    /// closes, is reset, or waits to drop the rest of the client's body, as its phase says.
    private mutating func sendData(_ stream: UInt32) {
        guard var state = streams[stream], case .answering(var unsent, let ended, let abort) = state.phase else { return }
        while unsent.readableBytes > 0 {
            let room = min(sendWindow, state.sendWindow, peerMaxFrameSize)
            guard room > 0 else {
                state.phase = .answering(unsent: unsent, clientEnded: ended, abortUnfinished: abort)
                streams[stream] = state
                if blockedSet.insert(stream).inserted { blocked.append(stream) }
                return
            }
            let count = min(room, unsent.readableBytes)
            var chunk = unsent.readSlice(length: count)!
            sendWindow -= count
            state.sendWindow -= count
            writeFrameHeader(length: count, type: .data, flags: unsent.readableBytes == 0 ? .endStream : [], stream: stream)
            output.writeBuffer(&chunk)
        }
        unblock(stream)
        switch state.phase.advance(.answerSent(windowLeft: state.receiveWindow > 0)) {
        case .closed:
            closeNormally(stream)
        case .resetAfterAnswer:
            streams[stream] = nil
            resetByUs.insert(stream)  // what arrives before the reset is written is ignored too
            resetsAfterAnswers.append(stream)  // written by `takeOutput`, in a record after the answer's
        case .discardRest:
            streams[stream] = state
        case .deliver, .drop, .streamError, .send, .ignored:
            break  // not outcomes of a sent answer
        }
    }

    /// Sends what the windows now allow of every waiting answer, oldest first; a stream whose own
    /// window is shut is passed over without touching its state.
    private mutating func sendQueued() {
        for stream in blocked where sendWindow > 0 && (streams[stream]?.sendWindow ?? 0) > 0 { sendData(stream) }
    }

    private mutating func unblock(_ stream: UInt32) {
        guard blockedSet.remove(stream) != nil, let index = blocked.firstIndex(of: stream) else { return }
        blocked.remove(at: index)
    }

    /// The answer's header block, written straight after its frame header in `output` (one frame:
    /// an answer's fields are far below any peer's frame size); a block over the peer's frame size is
    /// moved out and written again as HEADERS and CONTINUATION frames.
    private mutating func writeHeaders(
        _ stream: UInt32, status: Int, headers: [(String, String)], contentLength: Int, date: String?, endStream: Bool
    ) {
        let frameStart = output.writerIndex
        writeFrameHeader(length: 0, type: .headers, stream: stream)
        let blockStart = output.writerIndex
        let tableSizeUpdate = tableSizeUpdatePending
        tableSizeUpdatePending = false
        let bound = HPACKLiteralWriter.bound(headers: headers, date: date)
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: bound) { bytes in
            // Exactly the room the bound promises: a bound too low traps here (and in the ASan
            // fuzz target, Fuzz/HPACKWriterFuzzer.swift) rather than passing on spare capacity.
            var block = HPACKLiteralWriter(UnsafeMutableRawBufferPointer(rebasing: bytes[..<bound]))
            if tableSizeUpdate { block.byte(0x20) }  // a dynamic table size update to 0
            block.status(status)
            for (name, value) in headers { block.field(name: name, value: value) }
            block.contentLength(contentLength)
            if let date { block.field(name: "date", value: date) }
            return block.count
        }
        let length = output.writerIndex - blockStart
        if length <= peerMaxFrameSize {
            let flags: HTTP2FrameFlags = endStream ? [.endHeaders, .endStream] : .endHeaders
            output.setInteger(UInt32(length) << 8 | UInt32(HTTP2FrameType.headers.rawValue), at: frameStart)
            output.setInteger(flags.rawValue, at: frameStart + 4)
            return
        }
        var block = output.getSlice(at: blockStart, length: length)!
        output.moveWriterIndex(to: frameStart)
        var first = true
        repeat {
            let count = min(block.readableBytes, peerMaxFrameSize)
            var piece = block.readSlice(length: count)!
            let last = block.readableBytes == 0
            var flags: HTTP2FrameFlags = last ? .endHeaders : []
            if first, endStream { flags.insert(.endStream) }
            writeFrameHeader(length: count, type: first ? .headers : .continuation, flags: flags, stream: stream)
            output.writeBuffer(&piece)
            first = false
        } while block.readableBytes > 0
    }

    private mutating func writeReset(_ stream: UInt32, _ code: HTTP2ErrorCode) {
        resetByUs.insert(stream)
        writeResetFrame(stream, code)
    }

    private mutating func writeResetFrame(_ stream: UInt32, _ code: HTTP2ErrorCode) {
        writeFrameHeader(length: 4, type: .rstStream, stream: stream)
        output.writeInteger(code.rawValue)
    }

    private mutating func writeWindowUpdate(_ stream: UInt32, _ increment: Int) {
        writeFrameHeader(length: 4, type: .windowUpdate, stream: stream)
        output.writeInteger(UInt32(increment))
    }

    private mutating func writeFrameHeader(length: Int, type: HTTP2FrameType, flags: HTTP2FrameFlags = [], stream: UInt32) {
        output.writeInteger(UInt32(length) << 8 | UInt32(type.rawValue))
        output.writeInteger(flags.rawValue)
        output.writeInteger(stream)
    }
}

/// A stream's state as the frame layer sees it (RFC 9113 §5.1), from the request's HEADERS until the
/// stream closes (then it leaves the table). Every transition is in ``advance(_:)``; flow-control
/// windows are the stream's, not the phase's.
enum StreamPhase: Equatable {
    /// No answer begun. `clientEnded`: the client has sent END_STREAM ("half-closed (remote)").
    case requesting(clientEnded: Bool)
    /// The answer's HEADERS are written; its DATA in `unsent` waits for window (END_STREAM on the last
    /// frame). `abortUnfinished`: once it is sent, a client still sending is reset (a request that timed
    /// out, a body that could never fit) instead of let finish.
    case answering(unsent: ByteBuffer, clientEnded: Bool, abortUnfinished: Bool)
    /// Answered while the client was still sending: its DATA is dropped (the connection window takes it
    /// back, the stream's is never refilled: at most one window more), and its END_STREAM closes the
    /// stream without a reset.
    case discarding

    enum Input: Equatable {
        /// A header block from the client on the open stream (trailers).
        case clientHeaders(endStream: Bool)
        case clientData(endStream: Bool)
        /// This side's answer begins (its HEADERS are written); `body` is to follow as DATA.
        case answer(body: ByteBuffer, abortUnfinished: Bool)
        /// The answer's last byte is written. `windowLeft`: the client may still send within the
        /// stream's receive window (none left: it would wait for a WINDOW_UPDATE that never comes).
        case answerSent(windowLeft: Bool)
    }

    enum Outcome: Equatable {
        /// Hand the frame to the request layer.
        case deliver
        /// Drop the frame (what an answered client still sends).
        case drop
        /// A frame the stream's state does not allow: a stream error (the client's, so counted as a reset).
        case streamError(HTTP2ErrorCode)
        /// Send the answer's DATA as the windows allow.
        case send
        /// The stream has closed normally.
        case closed
        /// RST_STREAM NO_ERROR after the answer's bytes (RFC 9113 §8.1): the client is not let finish.
        case resetAfterAnswer
        /// The answer is sent; the stream stays open to drop what the client still sends.
        case discardRest
        /// The stream's phase ignores the input (a second answer; a send report for a stream not sending).
        case ignored
    }

    /// The one place a stream's phase changes.
    mutating func advance(_ input: Input) -> Outcome {
        switch (self, input) {
        // The client ended its side; anything more from it is a stream error (RFC 9113 §5.1, "half-closed (remote)").
        case (.requesting(clientEnded: true), .clientHeaders), (.requesting(clientEnded: true), .clientData),
            (.answering(_, clientEnded: true, _), .clientHeaders), (.answering(_, clientEnded: true, _), .clientData):
            return .streamError(.streamClosed)
        case (.requesting(clientEnded: false), .clientHeaders(let end)), (.requesting(clientEnded: false), .clientData(let end)):
            self = .requesting(clientEnded: end)
            return .deliver
        case (.answering(let unsent, clientEnded: false, let abort), .clientHeaders(let end)),
            (.answering(let unsent, clientEnded: false, let abort), .clientData(let end)):
            self = .answering(unsent: unsent, clientEnded: end, abortUnfinished: abort)
            return .deliver
        // Trailers end an answered request; trailers that do not end it break it.
        case (.discarding, .clientHeaders(let end)):
            return end ? .closed : .streamError(.protocolError)
        case (.discarding, .clientData(let end)):
            return end ? .closed : .drop
        case (.requesting(let ended), .answer(let body, let abort)):
            self = .answering(unsent: body, clientEnded: ended, abortUnfinished: abort)
            return .send
        case (.answering(_, let ended, let abort), .answerSent(let windowLeft)):
            if ended { return .closed }
            if abort || !windowLeft { return .resetAfterAnswer }
            self = .discarding
            return .discardRest
        case (.answering, .answer), (.discarding, .answer), (.requesting, .answerSent), (.discarding, .answerSent):
            return .ignored
        }
    }

    var isAnswered: Bool {
        if case .requesting = self { false } else { true }
    }
}

/// Counts events in a window of time: the window restarts when it has passed.
struct RateWindow {
    private var start: NIODeadline?
    private var events = 0

    /// Counts one event at `now`; returns the count in the current window.
    mutating func count(_ now: NIODeadline, window: TimeAmount) -> Int {
        if let start, now - start < window {
            events += 1
        } else {
            start = now
            events = 1
        }
        return events
    }
}

/// Counts events in a sliding window of time (NIOHTTP2's `DOSHeuristics` keeps one too): at most
/// `limit` within any stretch of `window`. The timestamps of the last `limit` events are kept in a
/// ring, allocated as events come, so a connection that never resets holds none.
struct SlidingWindowCount {
    private var times: [NIODeadline] = []
    /// Once the ring is full: where the oldest of the last `limit` events is.
    private var oldest = 0

    /// Records an event at `now`.
    /// - Parameters:
    ///   - now: when the event happened (never earlier than the last one recorded).
    ///   - window: the stretch of time the limit applies to.
    ///   - limit: events allowed within any `window`.
    /// - Returns: false when this event is one more than `limit` within `window` (it is not recorded).
    mutating func record(_ now: NIODeadline, window: TimeAmount, limit: Int) -> Bool {
        guard limit > 0 else { return false }
        if times.count < limit {
            times.append(now)
            return true
        }
        guard now - times[oldest] >= window else { return false }
        times[oldest] = now
        oldest = (oldest + 1) % limit
        return true
    }
}

/// The last ``capacity`` stream IDs put in, oldest forgotten first: bounded memory for a rule that
/// only matters for the frames in flight when a reset was sent.
struct RecentStreams {
    static let capacity = 64
    private var ids: [UInt32] = []
    private var next = 0

    mutating func insert(_ id: UInt32) {
        if ids.count < Self.capacity {
            ids.append(id)
        } else {
            ids[next] = id
            next = (next + 1) % Self.capacity
        }
    }

    func contains(_ id: UInt32) -> Bool { ids.contains(id) }
}
