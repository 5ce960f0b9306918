import HTTP2Wire
import NIOCore
import NIOHPACK
import TestSupport
import Testing

import struct NIOHTTP2.HTTP2StreamID

@testable import DaemonHTTP

/// The frame layer alone: bytes from ``H2Wire`` in, events and frames out, time given.
@Suite struct HTTP2FrameLayerTests {
    struct Harness {
        var session: HTTP2FrameLayer
        var wire = H2Wire()
        var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var held = ByteBuffer()

        init(limits: HTTP2FrameLayer.Limits = .init(), settings: [(UInt16, UInt32)] = []) throws {
            session = HTTP2FrameLayer(limits: limits)
            let ours = wire.frames(session.takeOutput(allocator: .init())!)
            #expect(ours.map(\.type) == [H2Wire.Kind.settings])
            let events = try feed(H2Wire.preface(settings: settings))
            #expect(events.isEmpty)
            #expect(output().map(\.flags) == [1], "the client's SETTINGS acknowledged")
        }

        /// Every event `bytes` produces (a partial frame is kept for the next call).
        mutating func feed(_ bytes: ByteBuffer) throws(HTTP2FrameLayer.ConnectionError) -> [HTTP2FrameLayer.Event] {
            var bytes = bytes
            held.writeBuffer(&bytes)
            var events: [HTTP2FrameLayer.Event] = []
            let now = self.now
            while let event = try session.next(from: &held, now: now) { events.append(event) }
            held.discardReadBytes()
            return events
        }

        mutating func output() -> [H2Wire.Frame] {
            var frames: [H2Wire.Frame] = []
            while let bytes = session.takeOutput(allocator: .init()) { frames += wire.frames(bytes) }
            return frames
        }

        mutating func request(_ stream: UInt32, endStream: Bool = true) -> ByteBuffer {
            wire.headers(
                stream, HPACKHeaders([(":method", "GET"), (":scheme", "https"), (":path", "/x"), (":authority", "a.test")]), endStream: endStream)
        }

        /// The connection error `bytes` cause, if any.
        mutating func error(_ bytes: ByteBuffer) -> HTTP2FrameLayer.ConnectionError? {
            do {
                _ = try feed(bytes)
                return nil
            } catch {
                return error
            }
        }
    }

    static func streams(_ events: [HTTP2FrameLayer.Event]) -> [Int] {
        events.compactMap { if case let .headers(id, _, _) = $0 { Int(id) } else { nil } }
    }

    /// Every transition of a stream's phase: what each input does in each phase (RFC 9113 §5.1).
    @Test func streamPhasesChangeOnlyAsTheStateMachineSays() {
        let body = ByteBuffer(string: "answer")
        func answering(ended: Bool, abort: Bool = false) -> StreamPhase {
            .answering(unsent: body, clientEnded: ended, abortUnfinished: abort)
        }
        let open = StreamPhase.requesting(clientEnded: false), ended = StreamPhase.requesting(clientEnded: true)
        let answer = StreamPhase.Input.answer(body: body, abortUnfinished: false)
        let table: [(StreamPhase, StreamPhase.Input, StreamPhase.Outcome, StreamPhase)] = [
            (open, .clientData(endStream: false), .deliver, open),
            (open, .clientData(endStream: true), .deliver, ended),
            (open, .clientHeaders(endStream: true), .deliver, ended),
            (open, .answerSent(windowLeft: true), .ignored, open),
            (open, answer, .send, answering(ended: false)),
            (ended, .clientData(endStream: false), .streamError(.streamClosed), ended),
            (ended, .clientHeaders(endStream: true), .streamError(.streamClosed), ended),
            (ended, answer, .send, answering(ended: true)),
            (answering(ended: false), .clientData(endStream: true), .deliver, answering(ended: true)),
            (answering(ended: false), .clientHeaders(endStream: false), .deliver, answering(ended: false)),
            (answering(ended: true), .clientData(endStream: false), .streamError(.streamClosed), answering(ended: true)),
            (answering(ended: false), answer, .ignored, answering(ended: false)),
            (answering(ended: true), .answerSent(windowLeft: true), .closed, answering(ended: true)),
            (answering(ended: true, abort: true), .answerSent(windowLeft: false), .closed, answering(ended: true, abort: true)),
            (answering(ended: false), .answerSent(windowLeft: true), .discardRest, .discarding),
            (answering(ended: false), .answerSent(windowLeft: false), .resetAfterAnswer, answering(ended: false)),
            (answering(ended: false, abort: true), .answerSent(windowLeft: true), .resetAfterAnswer, answering(ended: false, abort: true)),
            (.discarding, .clientData(endStream: false), .drop, .discarding),
            (.discarding, .clientData(endStream: true), .closed, .discarding),
            (.discarding, .clientHeaders(endStream: true), .closed, .discarding),
            (.discarding, .clientHeaders(endStream: false), .streamError(.protocolError), .discarding),
            (.discarding, answer, .ignored, .discarding),
            (.discarding, .answerSent(windowLeft: true), .ignored, .discarding),
        ]
        for (index, (start, input, outcome, end)) in table.enumerated() {
            var phase = start
            let result = phase.advance(input)
            #expect(result == outcome, "row \(index): \(start) + \(input)")
            #expect(phase == end, "row \(index): \(start) + \(input)")
        }
    }

    @Test func requestsArriveWhateverTheReadBoundaries() throws {
        var harness = try Harness()
        var bytes = harness.request(1)
        bytes.writeImmutableBuffer(harness.request(3))
        var events: [HTTP2FrameLayer.Event] = []
        // One byte at a time: frames are assembled across reads.
        while let byte = bytes.readSlice(length: 1) { events += try harness.feed(byte) }
        #expect(Self.streams(events) == [1, 3])
        guard case let .headers(_, headers, endStream) = events.first else { return }
        #expect(headers.first(name: ":path") == "/x")
        #expect(endStream)
    }

    @Test func theFirstFrameMustBeSettingsAndThePrefaceExact() {
        var session = HTTP2FrameLayer()
        var bad = ByteBuffer(string: "GET / HTTP/1.1\r\n\r\n....................")
        #expect(throws: HTTP2FrameLayer.ConnectionError.self) { _ = try session.next(from: &bad, now: .now()) }
        var session2 = HTTP2FrameLayer()
        var noSettings = ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        noSettings.writeImmutableBuffer(H2Wire.ping())
        do {
            _ = try session2.next(from: &noSettings, now: .now())
            Issue.record("PING before SETTINGS accepted")
        } catch {
            #expect(error.code == .protocolError)
        }
    }

    @Test func aResponseLargerThanTheWindowWaitsForWindowUpdates() throws {
        var harness = try Harness(settings: [(4, 100)])  // INITIAL_WINDOW_SIZE 100
        _ = try harness.feed(harness.request(1))
        harness.session.respond(1, status: 200, headers: [("content-type", "x/y")], body: ByteBuffer(repeating: 7, count: 250))
        var frames = harness.output()
        #expect(frames.map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data])
        #expect(frames.last?.payload.readableBytes == 100)
        #expect(frames.last?.endStream == false)
        // The stream's window opens by 100: 100 more. Then the connection's is still wide open.
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 1, H2Wire.word(100)))
        frames = harness.output()
        #expect(frames.map { $0.payload.readableBytes } == [100])
        // SETTINGS raising the initial window applies to open streams (RFC 9113 §6.9.2): the rest.
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, settingsPayload([(4, 1_000)])))
        frames = harness.output()
        #expect(frames.map(\.type) == [H2Wire.Kind.settings, H2Wire.Kind.data])
        #expect(frames.last?.payload.readableBytes == 50)
        #expect(frames.last?.endStream == true)
        #expect(harness.session.openStreams == 0)
    }

    /// Red team N2: a SETTINGS frame repeating INITIAL_WINDOW_SIZE (2,730 entries fill one frame)
    /// moves every open stream's window once, to the last value; an entry that takes a window past
    /// 2^31-1 on the way is a FLOW_CONTROL_ERROR, as it would be entry by entry.
    @Test func repeatedInitialWindowEntriesMoveEachWindowOnce() throws {
        var harness = try Harness(settings: [(4, 100)])
        _ = try harness.feed(harness.request(1))
        harness.session.respond(1, status: 200, headers: [("content-type", "x/y")], body: ByteBuffer(repeating: 7, count: 250))
        #expect(harness.output().last?.payload.readableBytes == 100)
        let entries = (0..<2_730).map { (UInt16(4), UInt32($0 % 2 == 0 ? 1_000_000 : 150)) }  // ends on 150
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, settingsPayload(entries)))
        let frames = harness.output()
        #expect(frames.map(\.type) == [H2Wire.Kind.settings, H2Wire.Kind.data])
        #expect(frames.last?.payload.readableBytes == 50, "the window moved once, by 150 - 100")
        var other = try Harness()
        _ = try other.feed(other.request(1))
        _ = try other.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 1, H2Wire.word(10)))  // 65,545
        let passing = other.error(H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, settingsPayload([(4, 0x7fff_ffff), (4, 0)])))
        #expect(passing?.code == .flowControlError, "past 2^31-1 on the way, back below at the end")
    }

    /// The header block of a HEADERS frame with PADDED and PRIORITY: padding that fits only if the
    /// priority fields are not counted is a PROTOCOL_ERROR (RFC 9113 §6.2); an unpadded frame too
    /// short for its priority fields a FRAME_SIZE_ERROR.
    @Test func paddingThatEatsThePriorityFieldsIsAProtocolError() throws {
        var harness = try Harness()
        // Pad length 1, then 5 bytes: the one byte of padding would be the last priority byte.
        let payload = ByteBuffer(bytes: [1, 0, 0, 0, 0, 0x10])
        #expect(harness.error(H2Wire.frame(H2Wire.Kind.headers, flags: 0x4 | 0x8 | 0x20, stream: 1, payload))?.code == .protocolError)
        var short = try Harness()
        #expect(short.error(H2Wire.frame(H2Wire.Kind.headers, flags: 0x4 | 0x20, stream: 1, ByteBuffer(bytes: [0, 0, 0])))?.code == .frameSizeError)
    }

    /// Red team W1: answers waiting on stream windows the client holds at 0, and connection
    /// WINDOW_UPDATEs of 1 repeated — each walked every waiting answer and let nothing out, uncounted
    /// (one connection kept the daemon at a full core). Updates that let no DATA out are now costly
    /// frames; updates that do let DATA out are not.
    @Test func windowUpdatesThatLetNothingOutAreCostly() throws {
        var harness = try Harness(limits: .init(maxCostlyFrames: 50), settings: [(4, 0)])  // INITIAL_WINDOW_SIZE 0
        for stream in stride(from: UInt32(1), through: 199, by: 2) {
            _ = try harness.feed(harness.request(stream))
            harness.session.respond(HTTP2StreamID(Int(stream)), status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 100))
        }
        #expect(harness.output().of(type: H2Wire.Kind.data).isEmpty, "every answer waits for its stream's window")
        #expect(harness.session.longestWaitingStream == 1)
        var error: HTTP2FrameLayer.ConnectionError?
        var sent = 0
        while error == nil, sent < 10_000 {
            error = harness.error(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 0, H2Wire.word(1)))
            sent += 1
        }
        #expect(error?.code == .enhanceYourCalm)
        #expect(sent <= 50, "cut at the costly-frame limit (the client's SETTINGS counts too): \(sent)")

        // Updates that let DATA out are progress: 60 stream updates of 1 byte, none counted.
        var steady = try Harness(limits: .init(maxCostlyFrames: 10), settings: [(4, 0)])
        _ = try steady.feed(steady.request(1))
        steady.session.respond(1, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 60))
        for _ in 0..<60 { _ = try steady.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 1, H2Wire.word(1))) }
        let data = steady.output().of(type: H2Wire.Kind.data)
        #expect(data.map { $0.payload.readableBytes }.reduce(0, +) == 60)
        #expect(data.last?.endStream == true)
        #expect(steady.session.openStreams == 0)
        // Stream updates are one lookup each and never costly (red team W5: a client raising each
        // new stream's window ahead was cut off): 60 for a stream that waits on nothing.
        var proactive = try Harness(limits: .init(maxCostlyFrames: 10), settings: [(4, 0)])
        _ = try proactive.feed(proactive.request(1))
        proactive.session.respond(1, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 10))
        _ = try proactive.feed(proactive.request(3, endStream: false))
        for _ in 0..<60 { _ = try proactive.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 3, H2Wire.word(1))) }
        #expect(proactive.session.longestWaitingStream == 1)
        // An update for a stream that waits on nothing else lets only that stream out: stream 3's
        // update moves stream 3, not stream 1 (whose window stays shut).
        var two = try Harness(settings: [(4, 0)])
        _ = try two.feed(two.request(1))
        _ = try two.feed(two.request(3))
        two.session.respond(1, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 10))
        two.session.respond(3, status: 200, headers: [], body: ByteBuffer(repeating: 3, count: 10))
        _ = two.output()
        _ = try two.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 3, H2Wire.word(10)))
        #expect(two.output().of(type: H2Wire.Kind.data).map(\.stream) == [3])
        #expect(two.session.longestWaitingStream == 1)
    }

    @Test func theConnectionWindowIsSharedAndHonoured() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1))
        _ = try harness.feed(harness.request(3))
        harness.session.respond(1, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 60_000))
        harness.session.respond(3, status: 200, headers: [], body: ByteBuffer(repeating: 3, count: 10_000))
        let frames = harness.output()
        let sent = frames.of(type: H2Wire.Kind.data).reduce(0) { $0 + $1.payload.readableBytes }
        #expect(sent == 65_535, "the connection's initial window, no more")
        #expect(frames.of(type: H2Wire.Kind.data).allSatisfy { $0.payload.readableBytes <= 16_384 })
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 0, H2Wire.word(10_000)))
        let rest = harness.output()
        #expect(rest.map { $0.payload.readableBytes }.reduce(0, +) == 4_465)
        #expect(rest.last?.endStream == true)
        #expect(rest.last?.stream == 3)
    }

    @Test func headerBlocksContinueAndAreBounded() throws {
        var harness = try Harness()
        let block = harness.wire.block(
            HPACKHeaders([(":method", "GET"), (":scheme", "https"), (":path", "/long"), ("x-pad", String(repeating: "p", count: 300))]))
        let first = block.getSlice(at: block.readerIndex, length: 100)!
        let rest = block.getSlice(at: block.readerIndex + 100, length: block.readableBytes - 100)!
        var bytes = H2Wire.frame(H2Wire.Kind.headers, flags: 0x1, stream: 1, first)
        bytes.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.continuation, flags: 0x4, stream: 1, rest))
        let events = try harness.feed(bytes)
        #expect(Self.streams(events) == [1])

        // A CONTINUATION flood: the 65th frame of one block ends the connection.
        var flood = H2Wire.frame(H2Wire.Kind.headers, flags: 0, stream: 3, ByteBuffer(bytes: [0x82]))
        for _ in 0..<64 { flood.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.continuation, flags: 0, stream: 3, ByteBuffer(bytes: [0x82]))) }
        #expect(harness.error(flood)?.code == .enhanceYourCalm)

        // Another frame in the middle of a block is a protocol error.
        var other = try Harness()
        var interrupted = H2Wire.frame(H2Wire.Kind.headers, flags: 0, stream: 1, ByteBuffer(bytes: [0x82]))
        interrupted.writeImmutableBuffer(H2Wire.ping())
        #expect(other.error(interrupted)?.code == .protocolError)
    }

    @Test func paddingIsRemovedAndPriorityFieldsSkipped() throws {
        var harness = try Harness()
        var payload = ByteBuffer()
        payload.writeInteger(UInt8(4))  // pad length
        payload.writeInteger(UInt32(0))  // stream dependency
        payload.writeInteger(UInt8(15))  // weight
        var block = harness.wire.block(HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":path", "/p")]))
        payload.writeBuffer(&block)
        payload.writeBytes([0, 0, 0, 0])
        var bytes = H2Wire.frame(H2Wire.Kind.headers, flags: 0x4 | 0x8 | 0x20, stream: 1, payload)
        var data = ByteBuffer()
        data.writeInteger(UInt8(3))
        data.writeString("body")
        data.writeBytes([0, 0, 0])
        bytes.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.data, flags: 0x1 | 0x8, stream: 1, data))
        let events = try harness.feed(bytes)
        #expect(Self.streams(events) == [1])
        guard case let .data(_, body, endStream) = events.last else {
            Issue.record("\(events)")
            return
        }
        #expect(String(buffer: body) == "body")
        #expect(endStream)
        // The padding's share of the window (1 + 3 bytes) comes back at once.
        #expect(harness.output().map { $0.firstWord } == [4])
    }

    @Test func streamsBeyondTheLimitAreRefused() throws {
        var harness = try Harness(limits: .init(maxConcurrentStreams: 2))
        var bytes = ByteBuffer()
        for stream in [UInt32(1), 3, 5] { bytes.writeImmutableBuffer(harness.request(stream)) }
        let events = try harness.feed(bytes)
        #expect(Self.streams(events) == [1, 3])
        let frames = harness.output()
        #expect(frames.map(\.type) == [H2Wire.Kind.rstStream])
        #expect(frames.first?.stream == 5)
        #expect(frames.first?.errorCode == H2Wire.Code.refusedStream)
        // An answered stream frees its place.
        harness.session.respond(1, status: 204, headers: [], body: ByteBuffer())
        _ = harness.output()
        #expect(Self.streams(try harness.feed(harness.request(7))) == [7])
    }

    @Test func dataOnAClosedStreamIsResetAndDataOnAnIdleOneEndsTheConnection() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1))
        // The client had ended the stream: the request is given up (its answer will not be sent).
        let events = try harness.feed(H2Wire.data(1, ByteBuffer(string: "late"), endStream: false))
        guard case .reset(1) = events.first, events.count == 1 else {
            Issue.record("\(events)")
            return
        }
        #expect(!harness.session.canRespond(1))
        let frames = harness.output()
        #expect(frames.first?.type == H2Wire.Kind.rstStream)
        #expect(frames.first?.errorCode == H2Wire.Code.streamClosed)
        #expect(harness.error(H2Wire.data(9, ByteBuffer(string: "x"), endStream: true))?.code == .protocolError)
    }

    /// An early answer (a 413 on the head) while the client is still sending: the client may finish
    /// within the stream's window, its DATA dropped, and no reset follows (libcurl 7.88 failed about
    /// 1 in 4 such POSTs as a "stream error" when a reset came with the answer). Past the window:
    /// RST_STREAM NO_ERROR. An answer given up on (`abortUnfinished`, a 408) resets at once, and what
    /// was in flight then is ignored, not answered with STREAM_CLOSED.
    @Test func aClientStillSendingAfterAnEarlyAnswerMayFinishWithinItsWindow() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1, endStream: false))
        harness.session.respond(1, status: 413, headers: [], body: ByteBuffer(string: "too big\n"))
        #expect(harness.output().map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data], "no reset yet")
        var rest = H2Wire.data(1, ByteBuffer(repeating: 0, count: 700), endStream: false)
        rest.writeImmutableBuffer(H2Wire.data(1, ByteBuffer(), endStream: true))
        #expect(try harness.feed(rest).isEmpty)
        #expect(harness.output().isEmpty, "the client finished: no reset")
        #expect(harness.session.openStreams == 0)

        // A client that goes on past the window is reset when the window is used up (the
        // connection's window is refilled as the handler does).
        harness.session.windowUpdate(HTTP2StreamID(0), 700)
        _ = try harness.feed(harness.request(3, endStream: false))
        harness.session.respond(3, status: 413, headers: [], body: ByteBuffer(string: "too big\n"))
        _ = harness.output()
        var frames: [H2Wire.Frame] = []
        for size in [16_384, 16_384, 16_384, 16_383] {
            #expect(frames.isEmpty, "\(frames)")
            _ = try harness.feed(H2Wire.data(3, ByteBuffer(repeating: 0, count: size), endStream: false))
            harness.session.windowUpdate(HTTP2StreamID(0), size)
            frames = harness.output().filter { $0.type != H2Wire.Kind.windowUpdate }
        }
        let reset = frames
        #expect(reset.map(\.type) == [H2Wire.Kind.rstStream] && reset.first?.errorCode == H2Wire.Code.noError, "\(reset)")

        // One that ignores flow control after the answer: FLOW_CONTROL_ERROR for the stream, and the
        // connection goes on.
        harness.session.windowUpdate(HTTP2StreamID(0), 65_535)
        _ = harness.output()
        _ = try harness.feed(harness.request(5, endStream: false))
        harness.session.respond(5, status: 413, headers: [], body: ByteBuffer(string: "too big\n"))
        _ = harness.output()
        harness.session.windowUpdate(HTTP2StreamID(0), 1_000)
        _ = harness.output()
        for size in [16_384, 16_384, 16_384, 16_384] { _ = try harness.feed(H2Wire.data(5, ByteBuffer(repeating: 0, count: size), endStream: false)) }
        let violation = harness.output().filter { $0.type == H2Wire.Kind.rstStream }
        #expect(violation.map(\.errorCode) == [H2Wire.Code.flowControlError], "\(violation)")
        #expect(harness.session.openStreams == 0)
        harness.session.windowUpdate(HTTP2StreamID(0), 65_536)
        _ = harness.output()

        // Given up on: the reset follows the answer, and the frames in flight are ignored.
        _ = try harness.feed(harness.request(7, endStream: false))
        harness.session.respond(7, status: 408, headers: [], body: ByteBuffer(string: "late\n"), abortUnfinished: true)
        let answer = harness.output()
        #expect(answer.map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data, H2Wire.Kind.rstStream])
        #expect(answer.last?.errorCode == H2Wire.Code.noError)
        #expect(try harness.feed(H2Wire.data(7, ByteBuffer(repeating: 0, count: 100), endStream: true)).isEmpty)
        #expect(harness.output().isEmpty, "no second reset (STREAM_CLOSED)")
        #expect(Self.streams(try harness.feed(harness.request(11))) == [11], "the connection goes on")
        harness.session.respond(11, status: 204, headers: [], body: ByteBuffer())
        _ = harness.output()
        // Trailers without END_STREAM after an early answer: the request is malformed, reset.
        _ = try harness.feed(harness.request(13, endStream: false))
        harness.session.respond(13, status: 413, headers: [], body: ByteBuffer(string: "too big\n"))
        _ = harness.output()
        _ = try harness.feed(harness.wire.headers(13, HPACKHeaders([("x-trailer", "1")]), endStream: false))
        #expect(harness.output().map(\.errorCode) == [H2Wire.Code.protocolError])
        #expect(harness.session.openStreams == 0)
        // A stream this side did not reset, closed by both ends: DATA there ends the connection.
        #expect(harness.error(H2Wire.data(11, ByteBuffer(string: "x"), endStream: false))?.code == .streamClosed)
    }

    // MARK: h2spec's cases and the adversarial review's HTTP/2 findings (docs/threat-model.md)

    /// h2spec http2/5.1 #12: HEADERS on a stream both ends closed is a connection error
    /// STREAM_CLOSED (RFC 7540 §5.1; RFC 9113 §5.1.1 makes a reused identifier PROTOCOL_ERROR at
    /// least). The answer of the stream was out before.
    @Test func headersOnAClosedStreamEndTheConnection() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1))
        harness.session.respond(1, status: 200, headers: [], body: ByteBuffer(string: "ok"))
        #expect(harness.output().map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data])
        let error = harness.error(harness.request(1))
        #expect(error?.code == .streamClosed, "\(String(describing: error))")
    }

    /// h2spec http2/5.1.1 #2: a stream identifier lower than one already used is a connection
    /// error PROTOCOL_ERROR (RFC 9113 §5.1.1), whatever happened on the higher stream.
    @Test func aStreamIdentifierBelowTheHighestEndsTheConnection() throws {
        var harness = try Harness()
        #expect(Self.streams(try harness.feed(harness.request(5))) == [5])
        let error = harness.error(harness.request(3))
        #expect(error?.code == .protocolError, "\(String(describing: error))")
    }

    /// Trailers the client sent before our reset reached it are still ignored, never a connection
    /// error: the client could not know (libcurl's early 413).
    @Test func framesInFlightOnAStreamWeResetStayHarmless() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1, endStream: false))
        harness.session.respond(1, status: 408, headers: [], body: ByteBuffer(string: "late\n"), abortUnfinished: true)
        _ = harness.output()
        var late = H2Wire.data(1, ByteBuffer(string: "body"), endStream: false)
        late.writeImmutableBuffer(harness.wire.headers(1, HPACKHeaders([("x-trailer", "1")]), endStream: true))
        #expect(try harness.feed(late).isEmpty)
        #expect(harness.output().isEmpty)
        #expect(Self.streams(try harness.feed(harness.request(3))) == [3])
    }

    /// MadeYouReset (CVE-2025-8671; review F1): a WINDOW_UPDATE of 0 on a stream makes the server
    /// reset it. The reset reaches the request layer (the stream's place is free, its request
    /// forgotten), and resets the client provokes count like its own RST_STREAMs.
    @Test func resetsTheClientProvokesAreReportedAndCounted() throws {
        var harness = try Harness(limits: .init(maxResets: 5))
        for index in 0..<5 {
            let stream = UInt32(2 * index + 1)
            _ = try harness.feed(harness.request(stream, endStream: false))
            let events = try harness.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: stream, H2Wire.word(0)))
            guard case .reset(let id) = events.first, Int(id) == Int(stream) else {
                Issue.record("stream \(stream): \(events)")
                return
            }
            #expect(harness.output().map(\.errorCode) == [H2Wire.Code.protocolError])
        }
        #expect(harness.session.openStreams == 0)
        _ = try harness.feed(harness.request(11, endStream: false))
        let error = harness.error(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 11, H2Wire.word(0x7FFF_FFFF)))
        #expect(error?.code == .enhanceYourCalm, "the sixth provoked reset: \(String(describing: error))")
    }

    /// Malformed requests the connection layer resets count too (review F3): past the limit the
    /// next read ends the connection.
    @Test func resetsForMalformedRequestsAreCounted() throws {
        var harness = try Harness(limits: .init(maxResets: 3))
        for index in 0..<4 {
            let stream = UInt32(2 * index + 1)
            _ = try harness.feed(harness.request(stream, endStream: false))
            harness.session.reset(HTTP2StreamID(Int(stream)), .protocolError, now: harness.now)
        }
        #expect(harness.output().map(\.errorCode).count == 4)
        #expect(harness.error(H2Wire.ping())?.code == .enhanceYourCalm)
    }

    /// The reset count is a sliding window: the oldest reset leaves it exactly `window` later,
    /// not when a fixed period restarts (a burst across a period boundary is still a burst).
    @Test func theResetWindowSlides() {
        var count = SlidingWindowCount()
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        let window = TimeAmount.seconds(30)
        func record(_ second: Int64) -> Bool { count.record(start + .seconds(second), window: window, limit: 3) }
        let first = [record(0), record(1), record(2)]
        #expect(first == [true, true, true])
        let fourth = record(29)
        #expect(!fourth, "four within 30 s")
        let afterFirst = record(30)
        #expect(afterFirst, "the first left the window")
        let again = record(30)
        #expect(!again, "the second is still in it")
        let later = record(31)
        #expect(later)
    }

    /// Review F3: once the client acknowledged our SETTINGS it knows MAX_CONCURRENT_STREAMS, and a
    /// stream over it ends the connection (as nghttp2 and NIOHTTP2 do) instead of costing one
    /// REFUSED_STREAM after another.
    @Test func aStreamOverTheLimitAfterOurSettingsWereAcknowledgedEndsTheConnection() throws {
        var harness = try Harness(limits: .init(maxConcurrentStreams: 2))
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.settings, flags: 1, stream: 0))
        _ = try harness.feed(harness.request(1, endStream: false))
        _ = try harness.feed(harness.request(3, endStream: false))
        #expect(harness.error(harness.request(5))?.code == .protocolError)
    }

    /// Review F4: the session names the stream that has waited longest for the client's window;
    /// the handler's send timeout watches it.
    @Test func theSessionNamesTheStreamThatWaitedLongest() throws {
        var harness = try Harness(settings: [(4, 10)])  // INITIAL_WINDOW_SIZE 10
        _ = try harness.feed(harness.request(1))
        _ = try harness.feed(harness.request(3))
        harness.session.respond(1, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 25))
        harness.session.respond(3, status: 200, headers: [], body: ByteBuffer(repeating: 1, count: 25))
        _ = harness.output()
        #expect(harness.session.longestWaitingStream == 1)
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 3, H2Wire.word(100)))
        #expect(harness.session.longestWaitingStream == 1, "stream 3 went through; 1 still waits")
        _ = try harness.feed(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 1, H2Wire.word(100)))
        #expect(harness.session.longestWaitingStream == nil)
    }

    @Test func pingsAreAnsweredUntilTheyBecomeAFlood() throws {
        var harness = try Harness(limits: .init(maxCostlyFrames: 10))
        // With the client's SETTINGS, 10 costly frames.
        for _ in 0..<9 { _ = try harness.feed(H2Wire.ping(42)) }
        let acks = harness.output()
        #expect(acks.count == 9)
        #expect(
            acks.allSatisfy {
                $0.type == H2Wire.Kind.ping && $0.flags == 1 && $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt64.self) == 42
            })
        #expect(harness.error(H2Wire.ping())?.code == .enhanceYourCalm)
        // The window restarts once it has passed.
        var later = try Harness(limits: .init(maxCostlyFrames: 10, window: .seconds(1)))
        for _ in 0..<9 { _ = try later.feed(H2Wire.ping()) }  // with the SETTINGS, 10
        later.now = later.now + .seconds(2)
        #expect(later.error(H2Wire.ping()) == nil)
    }

    @Test func rapidResetIsBounded() throws {
        var harness = try Harness(limits: .init(maxResets: 50))
        var stream: UInt32 = 1
        var closed: HTTP2FrameLayer.ConnectionError?
        for _ in 0..<100 {
            var bytes = harness.request(stream, endStream: false)
            bytes.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.rstStream, flags: 0, stream: stream, H2Wire.word(8)))
            if let error = harness.error(bytes) {
                closed = error
                break
            }
            stream += 2
        }
        #expect(closed?.code == .enhanceYourCalm)
        #expect(stream == 101, "the 51st reset ends the connection")
    }

    @Test func anAnswersHeaderBlockDecodesToItsFieldsWithTheBodysLength() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1))
        _ = try harness.feed(harness.request(3))
        let date = "Fri, 27 Nov 2026 08:00:00 GMT"
        harness.session.respond(
            1, status: 200, headers: [("content-type", "application/dns-message"), ("cache-control", "max-age=300"), ("X-Odd", "é")],
            body: ByteBuffer(repeating: 1, count: 1234), date: date)
        harness.session.respond(3, status: 429, headers: [("retry-after", "1")], body: ByteBuffer(), date: nil)
        let frames = harness.output()
        let blocks = frames.filter { $0.type == H2Wire.Kind.headers }
        #expect(blocks.count == 2)
        var decoder = NIOHPACK.HPACKDecoder(allocator: .init())
        var first = blocks[0].payload
        let answer = try decoder.decodeHeaders(from: &first)
        #expect(
            answer.map { [$0.name, $0.value] } == [
                [":status", "200"], ["content-type", "application/dns-message"], ["cache-control", "max-age=300"], ["x-odd", "é"],
                ["content-length", "1234"], ["date", date],
            ])
        var second = blocks[1].payload
        let refusal = try decoder.decodeHeaders(from: &second)
        #expect(refusal.map { [$0.name, $0.value] } == [[":status", "429"], ["retry-after", "1"], ["content-length", "0"]])
        #expect(blocks[1].endStream, "no body: END_STREAM on the HEADERS")
    }

    @Test func aHeaderBlockOverThePeersFrameSizeGoesOutAsContinuations() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(1))
        let long = String(repeating: "v", count: 40_000)
        harness.session.respond(1, status: 200, headers: [("link", long)], body: ByteBuffer(string: "ok"))
        let frames = harness.output()
        #expect(frames.map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.continuation, H2Wire.Kind.continuation, H2Wire.Kind.data])
        #expect(frames.prefix(3).map { $0.flags & 0x4 } == [0, 0, 0x4], "END_HEADERS on the last only")
        #expect(frames.prefix(2).allSatisfy { $0.payload.readableBytes == 16_384 })
        var block = ByteBuffer()
        for frame in frames.prefix(3) {
            var payload = frame.payload
            block.writeBuffer(&payload)
        }
        var decoder = NIOHPACK.HPACKDecoder(allocator: .init(), maxDynamicTableSize: 4096, maxHeaderListSize: 65_536)
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(headers.first(name: "link") == long)
        #expect(headers.first(name: "content-length") == "2")
    }

    @Test func aLowerHeaderTableSizeIsAcknowledgedInTheNextBlock() throws {
        var harness = try Harness(settings: [(1, 0)])
        _ = try harness.feed(harness.request(1))
        harness.session.respond(1, status: 200, headers: [("content-type", "a/b")], body: ByteBuffer())
        var frame = harness.output().first!
        #expect(frame.payload.readInteger(as: UInt8.self) == 0x20, "a dynamic table size update to 0 first")
        // And the block still decodes for a client whose table is 0.
        var decoder = NIOHPACK.HPACKDecoder(allocator: .init(), maxDynamicTableSize: 0)
        var block = frame.payload
        block.moveReaderIndex(to: frame.payload.readerIndex - 1)
        let headers = try decoder.decodeHeaders(from: &block)
        #expect(headers.first(name: ":status") == "200")
        #expect(headers.first(name: "content-type") == "a/b")
    }

    @Test func malformedFramesAreConnectionErrors() throws {
        let cases: [(ByteBuffer, HTTP2ErrorCode)] = [
            (H2Wire.frame(H2Wire.Kind.ping, flags: 0, stream: 0, ByteBuffer(bytes: [1, 2, 3])), .frameSizeError),
            (H2Wire.frame(H2Wire.Kind.ping, flags: 0, stream: 1, ByteBuffer(bytes: [0, 0, 0, 0, 0, 0, 0, 0])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, ByteBuffer(bytes: [0, 4, 0x80, 0, 0, 0])), .flowControlError),
            (H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, ByteBuffer(bytes: [0, 5, 0, 0, 0, 1])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, ByteBuffer(bytes: [0, 2])), .frameSizeError),
            (H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 0, H2Wire.word(0)), .protocolError),
            (H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: 0, H2Wire.word(0x7FFF_FFFF)), .flowControlError),
            (H2Wire.frame(H2Wire.Kind.headers, flags: 0x5, stream: 2, ByteBuffer(bytes: [0x82])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.headers, flags: 0x5, stream: 1, ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0xFF])), .compressionError),
            (H2Wire.frame(H2Wire.Kind.headers, flags: 0x5 | 0x8, stream: 1, ByteBuffer(bytes: [9, 0x82])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.pushPromise, flags: 0x4, stream: 1, ByteBuffer(bytes: [0, 0, 0, 2, 0x82])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.rstStream, flags: 0, stream: 11, H2Wire.word(0)), .protocolError),
            (H2Wire.frame(H2Wire.Kind.continuation, flags: 0x4, stream: 1, ByteBuffer(bytes: [0x82])), .protocolError),
            (H2Wire.frame(H2Wire.Kind.data, flags: 0, stream: 0, ByteBuffer()), .protocolError),
        ]
        for (bytes, code) in cases {
            var harness = try Harness()
            #expect(harness.error(bytes)?.code == code, "\(harness.wire.frames(bytes))")
        }
        // Larger than our SETTINGS_MAX_FRAME_SIZE: refused from its header alone.
        var harness = try Harness()
        var header = ByteBuffer()
        header.writeInteger(UInt32(16_385) << 8 | 0)
        header.writeInteger(UInt8(0))
        header.writeInteger(UInt32(1))
        #expect(harness.error(header)?.code == .frameSizeError)
    }

    @Test func goAwayCarriesTheLastStreamAndTheReason() throws {
        var harness = try Harness()
        _ = try harness.feed(harness.request(5))
        harness.session.goAway(.enhanceYourCalm, reason: "too much")
        let frame = harness.output().first!
        #expect(frame.type == H2Wire.Kind.goAway)
        #expect(frame.firstWord == 5)
        #expect(frame.errorCode == H2Wire.Code.enhanceYourCalm)
        #expect(String(buffer: frame.payload.getSlice(at: frame.payload.readerIndex + 8, length: frame.payload.readableBytes - 8)!) == "too much")
        let events = try harness.feed(H2Wire.frame(H2Wire.Kind.goAway, flags: 0, stream: 0, ByteBuffer(bytes: [0, 0, 0, 0, 0, 0, 0, 0])))
        guard case .goAway = events.first else {
            Issue.record("\(events)")
            return
        }
    }

    /// Random mutations of a valid client conversation (seeded, so a failure repeats): every input
    /// ends as events or a connection error — never a trap — and what the session keeps and writes
    /// stays bounded. The frame layer is NIO-typed, so it is fuzzed here rather than by libFuzzer.
    @Test func mutatedConversationsNeverTrapAndStayBounded() async throws {
        var seedWire = H2Wire()
        var conversation = H2Wire.preface(settings: [(4, 1_000), (1, 0)])
        for stream in stride(from: UInt32(1), through: 9, by: 2) {
            conversation.writeImmutableBuffer(
                seedWire.headers(stream, HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":path", "/dns-query")]), endStream: false))
            conversation.writeImmutableBuffer(H2Wire.data(stream, ByteBuffer(repeating: 0x41, count: 40), endStream: true))
            conversation.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: stream, H2Wire.word(500)))
        }
        conversation.writeImmutableBuffer(H2Wire.ping())
        conversation.writeImmutableBuffer(H2Wire.frame(H2Wire.Kind.rstStream, flags: 0, stream: 3, H2Wire.word(8)))
        let original = Array(buffer: conversation)
        var random = SplitMix64(state: 0x5EED_2026)
        var outcomes = (events: 0, errors: 0)
        for iteration in 0..<20_000 {
            // CPU-bound for seconds: let the other suites' tasks run on the two cooperative threads
            // (without it, lookups timed by other tests stalled for seconds on CI).
            if iteration % 200 == 0 { await Task.yield() }
            var bytes = original
            for _ in 0..<(1 + Int(random.next() % 4)) {
                let index = 24 + Int(random.next() % UInt64(bytes.count - 24))
                switch random.next() % 4 {
                case 0: bytes[index] ^= UInt8(1 << (random.next() % 8))
                case 1: bytes[index] = UInt8(truncatingIfNeeded: random.next())
                case 2: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: index)
                default: bytes.remove(at: index)
                }
            }
            var session = HTTP2FrameLayer()
            var input = ByteBuffer(bytes: bytes)
            var output = 0
            do {
                while let event = try session.next(from: &input, now: .uptimeNanoseconds(1)) {
                    outcomes.events += 1
                    // Answer what arrives, as the handler does, so the writing side is exercised too.
                    if case let .headers(id, _, _) = event, session.canRespond(id) {
                        session.respond(id, status: 200, headers: [("content-type", "a/b")], body: ByteBuffer(repeating: 1, count: 700))
                    }
                    output += session.takeOutput(allocator: .init())?.readableBytes ?? 0
                }
            } catch {
                outcomes.errors += 1
            }
            #expect(session.openStreams <= session.limits.maxConcurrentStreams)
            #expect(output <= 64 * 1_024, "output bounded by the requests and windows")
        }
        #expect(outcomes.errors > 1_000 && outcomes.events > 10_000, "both paths exercised: \(outcomes)")
    }

    func settingsPayload(_ settings: [(UInt16, UInt32)]) -> ByteBuffer {
        var payload = ByteBuffer()
        for (identifier, value) in settings {
            payload.writeInteger(identifier)
            payload.writeInteger(value)
        }
        return payload
    }
}
