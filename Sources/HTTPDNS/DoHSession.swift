import DNSCore
import HTTP2Wire

/// The client side of one HTTP/2 connection (RFC 9113) carrying DoH requests (RFC 8484): each query
/// a stream, its answer that stream's response. Pure — bytes in, bytes and events out — and driven
/// by a ``PipelineClient`` worker, which owns the socket.
///
/// Requests are written with literal fields only (``HPACKRequestFields``); responses are read with a
/// whole HPACK decoder. The checks a DoH answer must pass before anyone sees it are the HTTP ones:
/// status 200, `application/dns-message`, the size cap; the DNS ones (ID, question, chain) are the
/// caller's, as on every other path.
struct DoHSession: PipelineFraming {
    /// Where requests go: the `:authority` and the path (with any query) of the endpoint's URL.
    struct Target: Sendable {
        enum Method: Sendable { case get, post }

        var authority: [UInt8]
        var path: [UInt8]
        var method: Method
    }

    struct Stream {
        var status: Int?
        var contentType: String?
        var body: [UInt8] = []
        /// What the server's window lets this stream send (a POST's body).
        var sendWindow: Int
        /// A POST body waiting for window.
        var pendingBody: ArraySlice<UInt8>?
    }

    static var rewritesIDs: Bool { false }
    /// Streams this client opens at once at most, whatever the server allows.
    static let maxStreams = 128
    /// The frame size this side reads (SETTINGS_MAX_FRAME_SIZE's default, never raised).
    static let maxFrameSize = HTTP2Limits.defaultMaxFrameSize
    /// The stream window this side advertises: a whole DNS message and its frames' padding.
    static let streamWindow = 262_144
    /// The connection window, opened once at the start and topped up as answers are read.
    static let connectionWindow = 16 << 20
    /// The most a header block may hold (HEADERS and CONTINUATIONs).
    static let maxHeaderBlock = 65_536
    /// HEADERS and CONTINUATION frames one header block may take (the daemon's server allows 64 too).
    static let maxHeaderFrames = 64
    /// Acknowledgements (PING, SETTINGS) waiting to be written past this: the server sends them
    /// faster than it reads, and the connection ends rather than buffer without bound.
    static let maxPendingOutput = 1 << 20

    let target: Target
    let maxResponseBytes: Int
    var decoder = HPACKDecoder()
    /// RFC 9113 §3.4: the server's first frame is SETTINGS; anything else is not HTTP/2.
    var settingsSeen = false
    var nextStreamID: UInt32 = 1
    var peerMaxStreams = 100
    var peerInitialWindow = HTTP2Limits.defaultWindow
    var peerMaxFrameSize = HTTP2Limits.defaultMaxFrameSize
    var connectionSendWindow = HTTP2Limits.defaultWindow
    var streams: [UInt32: Stream] = [:]
    /// A header block being continued: its stream, its bytes so far, and whether it ends the stream.
    var continuation: (stream: UInt32, block: [UInt8], endStream: Bool, frames: Int)?
    var goingAway = false
    /// Streams this client gave up on whose end has not come yet (at most ``maxCancelled``): their
    /// end is reported as ``PipelineEvent/late(_:)``, once.
    var cancelled: Set<UInt32> = []
    static let maxCancelled = 1_024
    /// DATA bytes read since the connection window was last topped up.
    var unacknowledged = 0

    init(target: Target, maxResponseBytes: Int) {
        self.target = target
        self.maxResponseBytes = maxResponseBytes
    }

    var capacity: Int { isDraining ? 0 : min(peerMaxStreams, Self.maxStreams) }
    var isDraining: Bool { goingAway || nextStreamID >= 0x7fff_fff0 }

    func start(into output: inout [UInt8]) {
        output.append(contentsOf: HTTP2Limits.preface)
        let settings: [(HTTP2SettingID, UInt32)] = [
            (.enablePush, 0), (.initialWindowSize, UInt32(Self.streamWindow)), (.maxHeaderListSize, UInt32(Self.maxHeaderBlock)),
        ]
        output.appendFrameHeader(length: settings.count * 6, type: .settings, stream: 0)
        for (identifier, value) in settings {
            output.appendHTTP2UInt16(identifier.rawValue)
            output.appendHTTP2UInt32(value)
        }
        Self.appendWindowUpdate(stream: 0, increment: UInt32(Self.connectionWindow - HTTP2Limits.defaultWindow), to: &output)
    }

    mutating func send(_ query: [UInt8], into output: inout [UInt8], isTaken: (UInt32) -> Bool) -> UInt32 {
        let id = nextStreamID
        nextStreamID += 2
        var block: [UInt8] = []
        block.reserveCapacity(64 + target.authority.count + target.path.count + query.count * 4 / 3)
        switch target.method {
        case .get:
            block.append(HPACKRequestFields.methodGET)
            block.append(HPACKRequestFields.schemeHTTPS)
            var path = target.path
            path.append(path.contains(UInt8(ascii: "?")) ? UInt8(ascii: "&") : UInt8(ascii: "?"))
            path.append(contentsOf: "dns=".utf8)
            path.append(contentsOf: DoHWire.encodeBase64URL(query).utf8)
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.path, value: path, to: &block)
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.authority, value: target.authority, to: &block)
        case .post:
            block.append(HPACKRequestFields.methodPOST)
            block.append(HPACKRequestFields.schemeHTTPS)
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.path, value: target.path, to: &block)
            // Pseudo-fields come before the others (RFC 9113 §8.3).
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.authority, value: target.authority, to: &block)
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.contentType, value: DoHWire.mediaType.utf8, to: &block)
            // BIND resets a POST without one.
            HPACKRequestFields.append(nameIndex: HPACKRequestFields.contentLength, value: String(query.count).utf8, to: &block)
        }
        HPACKRequestFields.append(nameIndex: HPACKRequestFields.accept, value: DoHWire.mediaType.utf8, to: &block)
        appendHeaderBlock(block, stream: id, endStream: target.method == .get, to: &output)
        var stream = Stream(sendWindow: peerInitialWindow)
        if target.method == .post { stream.pendingBody = query[...] }
        streams[id] = stream
        if target.method == .post { sendBody(of: id, into: &output) }
        return id
    }

    mutating func abandon(_ key: UInt32, into output: inout [UInt8]) {
        guard streams.removeValue(forKey: key) != nil else { return }
        if cancelled.count >= Self.maxCancelled { cancelled.removeAll() }  // their ends are no longer told apart
        cancelled.insert(key)
        Self.appendReset(stream: key, code: .cancel, to: &output)
    }

    /// HEADERS, and CONTINUATIONs when the block is larger than the server's frame size.
    func appendHeaderBlock(_ block: [UInt8], stream: UInt32, endStream: Bool, to output: inout [UInt8]) {
        var start = 0
        repeat {
            let end = min(block.count, start + peerMaxFrameSize)
            var flags: HTTP2FrameFlags = end == block.count ? .endHeaders : []
            if start == 0, endStream { flags.insert(.endStream) }
            output.appendFrameHeader(length: end - start, type: start == 0 ? .headers : .continuation, flags: flags, stream: stream)
            output.append(contentsOf: block[start..<end])
            start = end
        } while start < block.count
    }

    /// Writes as much of a POST body as the windows allow; the last DATA ends the stream.
    mutating func sendBody(of id: UInt32, into output: inout [UInt8]) {
        guard var stream = streams[id], var body = stream.pendingBody else { return }
        while !body.isEmpty {
            let length = min(body.count, stream.sendWindow, connectionSendWindow, peerMaxFrameSize)
            guard length > 0 else { break }
            let last = length == body.count
            output.appendFrameHeader(length: length, type: .data, flags: last ? .endStream : [], stream: id)
            output.append(contentsOf: body.prefix(length))
            body = body.dropFirst(length)
            stream.sendWindow -= length
            connectionSendWindow -= length
        }
        stream.pendingBody = body.isEmpty ? nil : body
        streams[id] = stream
    }

    mutating func receive(_ input: inout [UInt8], into output: inout [UInt8], events: inout [PipelineEvent]) {
        var offset = 0
        defer { input.removeFirst(min(offset, input.count)) }
        while let header = HTTP2FrameHeader(parsing: input[offset...]) {
            let (length, type, flags, stream) = (header.length, header.type, header.flags, header.stream)
            if !settingsSeen {
                guard type == .settings, !flags.contains(.ack), stream == 0, length % 6 == 0 else {
                    events.append(
                        .refused(
                            DNSError(
                                .malformedResponse, "the server does not speak HTTP/2 on this connection (its first bytes are not a SETTINGS frame)"))
                    )
                    offset = input.count
                    return
                }
                settingsSeen = true
            }
            guard length <= Self.maxFrameSize else {
                return breakConnection(
                    .frameSizeError, "a \(length)-byte frame is larger than the \(Self.maxFrameSize) allowed", &output, &events, &offset, input.count)
            }
            let size = HTTP2Limits.frameHeaderSize
            guard input.count - offset - size >= length else { return }
            let payload = input[offset + size..<offset + size + length]
            offset += size + length
            if let continuation, type != .continuation || stream != continuation.stream {
                return breakConnection(.protocolError, "a header block was interrupted by another frame", &output, &events, &offset, input.count)
            }
            if let failure = frame(type: type, flags: flags, stream: stream, payload: payload, into: &output, events: &events) {
                return breakConnection(failure.code, failure.reason, &output, &events, &offset, input.count)
            }
            guard output.count <= Self.maxPendingOutput else {
                return breakConnection(
                    .protocolError, "more than \(Self.maxPendingOutput) bytes of replies unread by the server", &output, &events, &offset, input.count
                )
            }
        }
    }

    struct ConnectionError: Error {
        var code: HTTP2ErrorCode
        var reason: String
    }

    /// Handles one whole frame; a connection error is returned.
    mutating func frame(
        type: HTTP2FrameType?, flags: HTTP2FrameFlags, stream: UInt32, payload: ArraySlice<UInt8>, into output: inout [UInt8],
        events: inout [PipelineEvent]
    ) -> ConnectionError? {
        switch type {
        case .data:
            guard stream != 0 else { return ConnectionError(code: .protocolError, reason: "DATA on stream 0") }
            unacknowledged += payload.count
            if unacknowledged >= Self.connectionWindow / 2 {
                Self.appendWindowUpdate(stream: 0, increment: UInt32(unacknowledged), to: &output)
                unacknowledged = 0
            }
            guard let data = Self.unpadded(payload, flags: flags) else {
                return ConnectionError(code: .protocolError, reason: "DATA padding longer than the frame")
            }
            // The body grows in place (red team W3: a copy of the stream's state made every DATA
            // frame, even an empty one, copy the whole body so far).
            guard let received = streams[stream].map({ $0.status == nil ? nil : $0.body.count }) else {
                if flags.contains(.endStream) { ended(stream, events: &events) }
                return closedStreamFrame(stream, "DATA")
            }
            guard let received else { return ConnectionError(code: .protocolError, reason: "DATA before the response's HEADERS") }
            guard received + data.count <= maxResponseBytes else {
                streams[stream] = nil
                Self.appendReset(stream: stream, code: .cancel, to: &output)
                events.append(.failed(stream, DNSError(.responseTooLarge, "the response is larger than \(maxResponseBytes) bytes")))
                return nil
            }
            if !data.isEmpty { streams[stream]!.body.append(contentsOf: data) }
            if flags.contains(.endStream) { complete(stream, events: &events) }
        case .headers:
            guard stream != 0 else { return ConnectionError(code: .protocolError, reason: "HEADERS on stream 0") }
            let fragment: ArraySlice<UInt8>
            switch HTTP2Padding.headerBlock(count: payload.count, first: payload.first, flags: flags) {
            case .success(let range): fragment = payload[payload.startIndex + range.lowerBound..<payload.startIndex + range.upperBound]
            case .failure(.frameSizeError): return ConnectionError(code: .frameSizeError, reason: "HEADERS too short for its priority")
            case .failure(let code): return ConnectionError(code: code, reason: "HEADERS padding longer than the frame")
            }
            guard stream < nextStreamID, stream & 1 == 1 else {
                return ConnectionError(code: .protocolError, reason: "HEADERS on stream \(stream), which this client did not open")
            }
            if !flags.contains(.endHeaders) {
                continuation = (stream, Array(fragment), flags.contains(.endStream), 1)
                return nil
            }
            return headers(Array(fragment), stream: stream, endStream: flags.contains(.endStream), events: &events)
        case .continuation:
            guard continuation?.stream == stream else {
                return ConnectionError(code: .protocolError, reason: "CONTINUATION without a header block to continue")
            }
            // In place, and a bounded number of frames (red team W3: a copy of the pending block per
            // frame, empty ones included, made each 9-byte frame cost a copy of up to 64 KiB).
            continuation!.frames += 1
            guard continuation!.frames <= Self.maxHeaderFrames else {
                return ConnectionError(code: .protocolError, reason: "a header block in more than \(Self.maxHeaderFrames) frames")
            }
            continuation!.block.append(contentsOf: payload)
            guard continuation!.block.count <= Self.maxHeaderBlock else {
                return ConnectionError(code: .protocolError, reason: "a header block larger than \(Self.maxHeaderBlock) bytes")
            }
            guard flags.contains(.endHeaders), let pending = continuation else { return nil }
            continuation = nil
            return headers(pending.block, stream: stream, endStream: pending.endStream, events: &events)
        case .rstStream:
            guard stream != 0, payload.count == 4 else { return ConnectionError(code: .protocolError, reason: "a malformed RST_STREAM") }
            guard streams.removeValue(forKey: stream) != nil else {
                ended(stream, events: &events)
                return nil
            }
            let code = Self.read32(payload, at: payload.startIndex)
            if code == HTTP2ErrorCode.refusedStream.rawValue {
                events.append(.unprocessed(stream))
            } else {
                events.append(.failed(stream, DNSError(.malformedResponse, "the server reset the request (HTTP/2 error code \(code))")))
            }
        case .settings:
            guard stream == 0 else { return ConnectionError(code: .protocolError, reason: "SETTINGS on a stream") }
            if flags.contains(.ack) {
                guard payload.isEmpty else { return ConnectionError(code: .frameSizeError, reason: "a SETTINGS acknowledgement with a payload") }
                return nil
            }
            guard payload.count % 6 == 0 else { return ConnectionError(code: .frameSizeError, reason: "a SETTINGS frame of \(payload.count) bytes") }
            var windowChange = HTTP2InitialWindowChange()
            var index = payload.startIndex
            while index < payload.endIndex {
                let identifier = UInt16(payload[index]) << 8 | UInt16(payload[index + 1])
                let value = Self.read32(payload, at: index + 2)
                index += 6
                switch HTTP2SettingID(rawValue: identifier) {
                case .maxConcurrentStreams: peerMaxStreams = Int(value)
                case .initialWindowSize:
                    guard windowChange.record(value) else {
                        return ConnectionError(code: .flowControlError, reason: "an initial window above 2^31-1")
                    }
                case .maxFrameSize:
                    guard HTTP2Limits.maxFrameSizeRange.contains(value) else {
                        return ConnectionError(code: .protocolError, reason: "a maximum frame size of \(value)")
                    }
                    peerMaxFrameSize = Int(value)
                default: break
                }
            }
            // Every stream's window moves once per frame, however often the frame repeats the setting.
            if let initial = windowChange.last, initial != peerInitialWindow {
                let delta = initial - peerInitialWindow
                peerInitialWindow = initial
                streams = streams.mapValues { stream in
                    var stream = stream
                    stream.sendWindow += delta
                    return stream
                }
            }
            output.appendFrameHeader(length: 0, type: .settings, flags: .ack, stream: 0)
            flushBodies(into: &output)
        case .pushPromise:  // refused in SETTINGS
            return ConnectionError(code: .protocolError, reason: "PUSH_PROMISE after push was disabled")
        case .ping:
            guard stream == 0, payload.count == 8 else { return ConnectionError(code: .protocolError, reason: "a malformed PING") }
            if !flags.contains(.ack) {
                output.appendFrameHeader(length: 8, type: .ping, flags: .ack, stream: 0)
                output.append(contentsOf: payload)
            }
        case .goAway:
            guard stream == 0, payload.count >= 8 else { return ConnectionError(code: .protocolError, reason: "a malformed GOAWAY") }
            let last = Self.read32(payload, at: payload.startIndex) & 0x7fff_ffff
            goingAway = true
            for id in streams.keys.sorted() where id > last {
                streams[id] = nil
                events.append(.unprocessed(id))
            }
        case .windowUpdate:
            guard payload.count == 4 else { return ConnectionError(code: .frameSizeError, reason: "a WINDOW_UPDATE of \(payload.count) bytes") }
            let increment = Int(Self.read32(payload, at: payload.startIndex) & 0x7fff_ffff)
            if stream == 0 {
                guard increment > 0 else { return ConnectionError(code: .protocolError, reason: "a connection WINDOW_UPDATE of 0") }
                connectionSendWindow += increment
                guard connectionSendWindow <= HTTP2Limits.maxWindow else {
                    return ConnectionError(code: .flowControlError, reason: "the connection window above 2^31-1")
                }
            } else if var state = streams[stream] {
                state.sendWindow += increment
                guard increment > 0, state.sendWindow <= HTTP2Limits.maxWindow else {
                    streams[stream] = nil
                    Self.appendReset(stream: stream, code: increment > 0 ? .flowControlError : .protocolError, to: &output)
                    events.append(.failed(stream, DNSError(.malformedResponse, "the server sent an invalid stream WINDOW_UPDATE")))
                    return nil
                }
                streams[stream] = state
            }
            flushBodies(into: &output)
        case .priority, nil:  // ignored, as unknown types are (RFC 9113 §4.1, §5.5)
            break
        }
        return nil
    }

    /// Decodes a whole header block: every block, even one for a stream given up, keeps the HPACK
    /// table in step with the server's.
    mutating func headers(_ block: [UInt8], stream: UInt32, endStream: Bool, events: inout [PipelineEvent]) -> ConnectionError? {
        let fields: [HPACKDecoder.Field]
        do { fields = try decoder.decode(block[...], maxListSize: Self.maxHeaderBlock) } catch {
            return ConnectionError(code: .compressionError, reason: "an undecodable header block: \(error.reason)")
        }
        guard var state = streams[stream] else {
            if endStream { ended(stream, events: &events) }
            return nil
        }
        if state.status == nil {
            guard let text = fields.first(where: { $0.name == ":status" })?.value, let status = Int(text), (100...599).contains(status) else {
                streams[stream] = nil
                events.append(.failed(stream, DNSError(.malformedResponse, "a response without a valid :status")))
                return nil
            }
            // An interim (1xx) response is followed by the real one.
            if status >= 200 {
                state.status = status
                state.contentType = fields.first(where: { $0.name == "content-type" })?.value
            }
            streams[stream] = state
        }
        if endStream { complete(stream, events: &events) }
        return nil
    }

    /// The response is whole: the HTTP checks, then the body to the caller.
    mutating func complete(_ stream: UInt32, events: inout [PipelineEvent]) {
        guard let state = streams.removeValue(forKey: stream) else { return }
        if let failure = DoHWire.failure(status: state.status, contentType: state.contentType) {
            events.append(.failed(stream, failure))
            return
        }
        events.append(.answer(stream, state.body))
    }

    /// A stream given up on has ended on the wire.
    mutating func ended(_ stream: UInt32, events: inout [PipelineEvent]) {
        if cancelled.remove(stream) != nil { events.append(.late(stream)) }
    }

    /// A frame for a stream that is not open: one this client reset or gave up on (frames may still
    /// be under way), or one it never opened, which is the server's error (§5.1).
    func closedStreamFrame(_ stream: UInt32, _ kind: String) -> ConnectionError? {
        guard stream >= nextStreamID || stream & 1 == 0 else { return nil }
        return ConnectionError(code: .protocolError, reason: "\(kind) on stream \(stream), which this client did not open")
    }

    mutating func flushBodies(into output: inout [UInt8]) {
        guard target.method == .post else { return }
        for id in streams.keys.sorted() where streams[id]?.pendingBody != nil { sendBody(of: id, into: &output) }
    }

    /// Ends the connection: GOAWAY with the code, the reason to every query on it.
    func breakConnection(
        _ code: HTTP2ErrorCode, _ reason: String, _ output: inout [UInt8], _ events: inout [PipelineEvent], _ offset: inout Int, _ end: Int
    ) {
        output.appendFrameHeader(length: 8, type: .goAway, stream: 0)
        output.appendHTTP2UInt32(0)  // no server-initiated stream was processed
        output.appendHTTP2UInt32(code.rawValue)
        events.append(.broken(DNSError(.malformedResponse, "HTTP/2: \(reason)")))
        offset = end
    }

    /// A padded frame's content (a HEADERS frame's still with its priority fields); nil when the
    /// padding does not fit (§6.1, §6.2).
    static func unpadded(_ payload: ArraySlice<UInt8>, flags: HTTP2FrameFlags) -> ArraySlice<UInt8>? {
        guard let range = HTTP2Padding.content(count: payload.count, first: payload.first, flags: flags) else { return nil }
        return payload[payload.startIndex + range.lowerBound..<payload.startIndex + range.upperBound]
    }

    static func appendWindowUpdate(stream: UInt32, increment: UInt32, to output: inout [UInt8]) {
        output.appendFrameHeader(length: 4, type: .windowUpdate, stream: stream)
        output.appendHTTP2UInt32(increment)
    }

    static func appendReset(stream: UInt32, code: HTTP2ErrorCode, to output: inout [UInt8]) {
        output.appendFrameHeader(length: 4, type: .rstStream, stream: stream)
        output.appendHTTP2UInt32(code.rawValue)
    }

    static func read32(_ bytes: ArraySlice<UInt8>, at index: Int) -> UInt32 {
        UInt32(bytes[index]) << 24 | UInt32(bytes[index + 1]) << 16 | UInt32(bytes[index + 2]) << 8 | UInt32(bytes[index + 3])
    }
}
