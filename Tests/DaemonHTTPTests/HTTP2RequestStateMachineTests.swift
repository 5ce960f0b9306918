import NIOCore
import NIOHPACK
import Testing

import struct NIOHTTP2.HTTP2StreamID

@testable import DaemonHTTP

@Suite struct HTTP2RequestStateMachineTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func connection(maxBody: Int = 65_535) -> HTTP2RequestStateMachine {
        HTTP2RequestStateMachine(configuration: .init(maxBodyBytes: maxBody), now: start)
    }

    static func request(_ method: String = "GET", path: String = "/dns-query?dns=AAAB", extra: [(String, String)] = []) -> HPACKHeaders {
        HPACKHeaders([(":method", method), (":scheme", "https"), (":authority", "localhost"), (":path", path)] + extra)
    }

    static let post = request("POST", path: "/dns-query", extra: [("content-type", "application/dns-message")])

    func stream(_ id: Int) -> HTTP2StreamID { HTTP2StreamID(id) }

    @Test func aGETIsDispatchedWithItsHeaders() {
        var connection = connection()
        guard case let .dispatch(id, request) = connection.receivedHeaders(stream(1), Self.request(), endStream: true, now: start) else {
            Issue.record("expected a dispatch")
            return
        }
        #expect(id == stream(1))
        #expect(request.head.method == "GET")
        #expect(request.head.path == "/dns-query?dns=AAAB")
        #expect(request.body == nil)
        #expect(connection.isAwaitingResponse(stream(1)))
        #expect(connection.requestEnded(stream(1)))
        let closes = connection.responded(stream(1), now: start)
        #expect(!closes)
        #expect(connection.openStreams == 0)
    }

    @Test func aPOSTBodyIsGatheredAcrossDataFrames() {
        var connection = connection()
        #expect(isNone(connection.receivedHeaders(stream(1), Self.post, endStream: false, now: start)))
        #expect(isNone(connection.receivedData(stream(1), ByteBuffer(bytes: [1, 2, 3]), endStream: false)))
        guard case let .dispatch(_, request) = connection.receivedData(stream(1), ByteBuffer(bytes: [4, 5]), endStream: true) else {
            Issue.record("expected a dispatch")
            return
        }
        #expect(request.body.map { Array(buffer: $0) } == [1, 2, 3, 4, 5])
    }

    @Test func aDeclaredBodyOverTheLimitIsRefusedAtOnce() {
        var connection = connection(maxBody: 100)
        let headers = Self.request("POST", path: "/dns-query", extra: [("content-type", "application/dns-message"), ("content-length", "70000")])
        guard case let .respond(_, status, _, reset) = connection.receivedHeaders(stream(1), headers, endStream: false, now: start) else {
            Issue.record("expected an early 413")
            return
        }
        #expect(status == 413)
        #expect(reset, "70,000 bytes cannot fit the stream's window: RST_STREAM NO_ERROR follows")
        // What the client sends after the answer is ignored.
        #expect(isNone(connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 1000), endStream: false)))
        // A declared body that fits the window is let finish (dropped): no reset.
        let small = Self.request("POST", path: "/dns-query", extra: [("content-type", "application/dns-message"), ("content-length", "700")])
        guard case let .respond(_, smallStatus, _, smallReset) = connection.receivedHeaders(stream(3), small, endStream: false, now: start) else {
            Issue.record("expected an early 413")
            return
        }
        #expect(smallStatus == 413 && !smallReset)
    }

    @Test func aBodyWithoutLengthIsRefusedOnceItPassesTheLimitWhateverTheWindows() {
        // The limit equals the initial stream window: the stream's window must be given back as
        // the body arrives, or the byte over the limit could never be sent.
        var connection = connection(maxBody: 65_535)
        _ = connection.receivedHeaders(stream(1), Self.post, endStream: false, now: start)
        #expect(isNone(connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 16_384), endStream: false)))
        let updates = connection.readComplete(connectionWindow: 65_535)
        #expect(updates.contains { $0.0 == stream(1) && $0.1 == 16_384 }, "\(updates)")
        for _ in 0..<3 { _ = connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 16_383), endStream: false) }
        _ = connection.readComplete(connectionWindow: 65_535)
        guard case let .respond(_, status, _, _) = connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 3), endStream: false) else {
            Issue.record("expected 413 at 65,536 bytes")
            return
        }
        #expect(status == 413)
        #expect(connection.readComplete(connectionWindow: 65_535).allSatisfy { $0.0 != stream(1) }, "no window for a refused stream")
    }

    @Test func malformedHeaderBlocksAreStreamErrors() {
        let base: [(String, String)] = [(":method", "GET"), (":scheme", "https"), (":path", "/healthz")]
        let cases: [(String, [(String, String)])] = [
            ("no :method", [(":scheme", "https"), (":path", "/")]),
            ("no :path", [(":method", "GET"), (":scheme", "https")]),
            ("no :scheme", [(":method", "GET"), (":path", "/")]),
            ("duplicate :path", base + [(":path", "/readyz")]),
            ("duplicate :method", [(":method", "GET")] + base),
            ("unknown pseudo-header", base + [(":foo", "x")]),
            ("pseudo-header after a regular one", [(":method", "GET"), ("accept", "*/*"), (":scheme", "https"), (":path", "/")]),
            ("upper case name", base + [("Accept", "*/*")]),
            ("connection", base + [("connection", "close")]),
            ("transfer-encoding", base + [("transfer-encoding", "chunked")]),
            ("te: gzip", base + [("te", "gzip")]),
            ("CR LF in a value", base + [("x-a", "b\r\nc: d")]),
            ("space in a name", base + [("x a", "b")]),
            ("method not a token", [(":method", "G E T"), (":scheme", "https"), (":path", "/")]),
            ("empty path", [(":method", "GET"), (":scheme", "https"), (":path", "")]),
            ("relative path", [(":method", "GET"), (":scheme", "https"), (":path", "healthz")]),
            ("two content-lengths", base + [("content-length", "1"), ("content-length", "2")]),
            ("content-length not a number", base + [("content-length", "-1")]),
            ("content-length with a sign (docs/threat-model.md F12)", base + [("content-length", "+5")]),
            ("content-length with spaces", base + [("content-length", " 5")]),
            ("leading white space", base + [("x-a", " b")]),
        ]
        for (what, fields) in cases {
            var connection = connection()
            guard case .reset(_, .protocolError) = connection.receivedHeaders(stream(1), HPACKHeaders(fields), endStream: true, now: start) else {
                Issue.record("\(what): expected RST_STREAM PROTOCOL_ERROR")
                continue
            }
        }
        var connection = connection()
        if case .dispatch = connection.receivedHeaders(stream(1), Self.request(extra: [("te", "trailers")]), endStream: true, now: start) {
        } else {
            Issue.record("te: trailers is allowed")
        }
    }

    @Test func aBodyThatContradictsItsContentLengthIsReset() {
        var connection = connection()
        let headers = Self.request("POST", path: "/dns-query", extra: [("content-type", "application/dns-message"), ("content-length", "4")])
        _ = connection.receivedHeaders(stream(1), headers, endStream: false, now: start)
        guard case .reset(_, .protocolError) = connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 3), endStream: true) else {
            Issue.record("3 bytes for content-length 4")
            return
        }
        _ = connection.receivedHeaders(stream(3), headers, endStream: false, now: start)
        guard case .reset(_, .protocolError) = connection.receivedData(stream(3), ByteBuffer(repeating: 0, count: 5), endStream: false) else {
            Issue.record("5 bytes for content-length 4")
            return
        }
    }

    @Test func aBodyThatNeverEndsGets408() {
        var connection = connection()
        _ = connection.receivedHeaders(stream(1), Self.post, endStream: false, now: start)
        _ = connection.receivedData(stream(1), ByteBuffer(repeating: 0, count: 10), endStream: false)
        #expect(connection.tick(now: start + .seconds(9)).responses.isEmpty)
        let late = connection.tick(now: start + .seconds(10))
        #expect(late.responses.map(\.status) == [408])
        #expect(connection.isAwaitingResponse(stream(1)))
        #expect(!connection.requestEnded(stream(1)))
    }

    @Test func unfinishedBodiesOverTheBudgetStopTheConnectionWindow() {
        var connection = HTTP2RequestStateMachine(configuration: .init(bodyBudget: 64 * 1024), now: start)
        // A client that opens streams and never finishes them: it may send only what the
        // connection window allows, and the window is topped up only while under the budget.
        var window = 65_535, sent = 0
        for index in 0..<20 where window >= 16_000 {
            let id = stream(2 * index + 1)
            _ = connection.receivedHeaders(id, Self.post, endStream: false, now: start)
            _ = connection.receivedData(id, ByteBuffer(repeating: 0, count: 16_000), endStream: false)
            window -= 16_000
            sent += 16_000
            window += connection.readComplete(connectionWindow: window).filter { $0.0 == .rootStream }.map(\.1).reduce(0, +)
        }
        #expect(sent <= 64 * 1024 + 65_535, "\(sent) bytes held")
        #expect(window < 16_000, "the client is stalled")
        // Finishing the bodies (here: the client resets them) releases the budget.
        for index in 0..<10 { connection.streamClosed(stream(2 * index + 1), now: start) }
        #expect(connection.readComplete(connectionWindow: 1_000).contains { $0.0 == .rootStream && $0.1 == 64_535 })
    }

    @Test func anIdleConnectionIsToldToGoAwayAndClosed() {
        var connection = connection()
        // No stream within the first-request timeout.
        let first = connection.tick(now: start + .seconds(10))
        #expect(first.goAway)
        #expect(first.close)

        var used = self.connection()
        _ = used.receivedHeaders(stream(1), Self.request(), endStream: true, now: start)
        _ = used.responded(stream(1), now: start + .seconds(1))
        #expect(used.tick(now: start + .seconds(60)).goAway == false, "PINGs aside, 59 s idle is fine")
        let idle = used.tick(now: start + .seconds(121))
        #expect(idle.goAway)
        #expect(idle.close)
    }

    @Test func aDrainingConnectionRefusesNewStreamsAndClosesWhenAnswered() {
        var connection = connection()
        _ = connection.receivedHeaders(stream(1), Self.request(), endStream: true, now: start)
        let started = connection.startDraining(now: start)
        let again = connection.startDraining(now: start)
        #expect(started)
        #expect(!again, "once")
        guard case .reset(_, .refusedStream) = connection.receivedHeaders(stream(3), Self.request(), endStream: true, now: start) else {
            Issue.record("a new stream on a draining connection is refused")
            return
        }
        let closes = connection.responded(stream(1), now: start)
        #expect(closes, "the last answer closes it")
        #expect(connection.isClosed)
    }

    @Test func aDrainThatTakesTooLongIsCutShort() {
        var connection = connection()
        _ = connection.receivedHeaders(stream(1), Self.post, endStream: false, now: start)
        _ = connection.startDraining(now: start)
        #expect(!connection.tick(now: start + .seconds(4)).close)
        #expect(connection.tick(now: start + .seconds(5)).close)
    }

    private func isNone(_ action: HTTP2RequestStateMachine.Action) -> Bool {
        if case .none = action { return true }
        return false
    }
}
