import NIOCore
import NIOEmbedded
import NIOHPACK
import TestSupport
import Testing

import struct NIOHTTP2.HTTP2StreamID

@testable import DaemonHTTP

/// The HTTP/2 handler in an embedded pipeline: bytes in, bytes out (read back as frames by
/// ``H2Wire``), the requests answered by a recording fake (`RecordingHTTPHandler`). The daemon's
/// own routes through the same handler: `DaemonHTTPRoutingTests` in ResolverDaemonTests.
@Suite struct HTTP2ConnectionHandlerTests {
    static func get(_ path: String) -> HPACKHeaders {
        HPACKHeaders([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", path)])
    }

    /// A connection past the preface: our SETTINGS and the ACK of the client's already read.
    static func connect(
        _ handling: RecordingHTTPHandler, configuration: HTTP2RequestStateMachine.Configuration = .init()
    ) async throws -> H2TestConnection {
        let connection = try await H2TestConnection { channel in
            try channel.pipeline.syncOperations.addHandler(
                HTTP2ConnectionHandler(handling: handling, configuration: configuration, logger: .init(label: "test")))
        }
        #expect(connection.opening.map(\.type) == [H2Wire.Kind.settings, H2Wire.Kind.settings])
        #expect(connection.opening.map(\.flags) == [0, 1], "our SETTINGS, then the ACK of the client's")
        return connection
    }

    @Test func answersOfOneReadLeaveInOneFlushEachInItsOwnWrite() async throws {
        let handling = RecordingHTTPHandler()
        let connection = try await Self.connect(handling)
        let paths = ["/dns-query?dns=11", "/dns-query?dns=22", "/dns-query?dns=33"]
        for (index, path) in paths.enumerated() {
            let bytes = connection.wire.headers(UInt32(2 * index + 1), Self.get(path), endStream: true)
            connection.channel.pipeline.fireChannelRead(bytes)
        }
        #expect(try await connection.writes().isEmpty, "nothing is flushed before the read completes")
        connection.channel.pipeline.fireChannelReadComplete()
        let writes = try await connection.writes()
        // One write (so one TLS record) per answer: dnsperf loses a second answer in a record.
        #expect(writes.count == 3, "\(writes)")
        for (index, path) in paths.enumerated() {
            let frames = connection.wire.frames(writes[index])
            #expect(frames.map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data])
            #expect(frames.last?.endStream == true)
            let (status, body) = frames.response(UInt32(2 * index + 1))
            #expect(status == "200")
            #expect(body == Array(RecordingHTTPHandler.body(for: path).utf8))
            let headers = frames.first?.headers
            #expect(headers?.first(name: "content-type") == "application/dns-message")
            #expect(headers?.first(name: "content-length") == String(body.count))
        }
        #expect(handling.requests == paths.map { "GET \($0)" })
    }

    @Test func aLookupIsAnsweredWhenItFinishes() async throws {
        let handling = RecordingHTTPHandler(delay: .milliseconds(50))
        let connection = try await Self.connect(handling)
        try await connection.send(connection.wire.headers(1, Self.get("/dns-query?dns=slow"), endStream: true))
        #expect(try await connection.written().isEmpty, "nothing before the answer")
        let frames = try await connection.frames(2)
        #expect(frames.response(1).status == "200")
        #expect(frames.response(1).body == Array(RecordingHTTPHandler.body(for: "/dns-query?dns=slow").utf8))
        #expect(handling.answered == 1)
    }

    @Test func aMalformedRequestIsResetAndAnOversizedOneAnswered413ThenReset() async throws {
        let handling = RecordingHTTPHandler()
        let connection = try await Self.connect(handling)
        let malformed = HPACKHeaders([(":method", "GET"), (":path", "/healthz")])
        try await connection.send(connection.wire.headers(1, malformed, endStream: true))
        let reset = try await connection.frames(1)
        #expect(reset.first?.type == H2Wire.Kind.rstStream)
        #expect(reset.first?.stream == 1)
        #expect(reset.first?.errorCode == H2Wire.Code.protocolError)

        let post = HPACKHeaders([
            (":method", "POST"), (":scheme", "https"), (":path", "/dns-query"),
            ("content-type", "application/dns-message"), ("content-length", "70000"),
        ])
        try await connection.send(connection.wire.headers(3, post, endStream: false))
        let frames = try await connection.frames(3)
        #expect(frames.response(3).status == "413")
        #expect(frames.last?.type == H2Wire.Kind.rstStream)
        #expect(frames.last?.errorCode == H2Wire.Code.noError, "RST_STREAM NO_ERROR last: \(frames)")
        #expect(handling.requests.isEmpty && handling.early == ["413 /dns-query"])
    }

    @Test func bodiesRefillTheirStreamWindowAndSlowOnesGet408() async throws {
        let handling = RecordingHTTPHandler()
        let connection = try await Self.connect(handling)
        let post = HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":path", "/dns-query"), ("content-type", "application/dns-message")])
        try await connection.send(connection.wire.headers(1, post, endStream: false))
        // Three frames in one read: the stream's window comes back in full, the connection's once
        // it is below half.
        var body = ByteBuffer()
        for _ in 0..<3 {
            var frame = H2Wire.data(1, ByteBuffer(repeating: 0, count: 12_000), endStream: false)
            body.writeBuffer(&frame)
        }
        try await connection.send(body)
        let updates = try await connection.frames(2)
        #expect(updates.of(type: H2Wire.Kind.windowUpdate).map(\.stream).sorted() == [0, 1], "\(updates)")
        #expect(updates.allSatisfy { $0.firstWord == 36_000 })
        await connection.channel.testingEventLoop.advanceTime(by: .seconds(11))
        let frames = try await connection.frames(2)
        #expect(frames.response(1).status == "408")
        #expect(handling.requests.isEmpty && handling.early == ["408 /dns-query"])
    }

    /// Review F2: a client that sends many requests in one read and reads nothing back is answered
    /// only until the channel is full; the rest of the read waits (no answer queued for it) and is
    /// taken up when the channel drains.
    @Test func aReadIsNotAnsweredPastAFullChannel() async throws {
        let handling = RecordingHTTPHandler()
        let connection = try await Self.connect(handling)
        var bytes = ByteBuffer()
        for index in 0..<20 {
            let path = "/dns-query?dns=\(index)"
            bytes.writeImmutableBuffer(connection.wire.headers(UInt32(2 * index + 1), Self.get(path), endStream: true))
        }
        connection.channel.isWritable = false
        connection.channel.pipeline.fireChannelRead(bytes)
        connection.channel.pipeline.fireChannelReadComplete()
        var answered = try await connection.written().of(type: H2Wire.Kind.headers)
        #expect(answered.count == 1, "one answer, then the channel was full")
        #expect(handling.requests.count == 1, "the rest of the read not handed on either")
        connection.channel.isWritable = true
        connection.channel.pipeline.fireChannelWritabilityChanged()
        answered = try await connection.written().of(type: H2Wire.Kind.headers)
        let expected: [UInt32] = (1..<20).map { UInt32(2 * $0 + 1) }
        #expect(answered.map(\.stream) == expected, "the rest, once it drained")
    }

    /// Review F4: an answer that waits for a window the client keeps closed does not keep the
    /// connection open, even while the client lets other answers through to look busy: after the
    /// idle timeout, GOAWAY and close.
    @Test func answersWaitingForAClosedWindowTimeOut() async throws {
        let handling = RecordingHTTPHandler()
        var configuration = HTTP2RequestStateMachine.Configuration()
        configuration.idleTimeout = .seconds(5)
        let connection = try await Self.connect(handling, configuration: configuration)
        // INITIAL_WINDOW_SIZE 0: no DATA can go out.
        var settings = ByteBuffer()
        settings.writeInteger(UInt16(4))
        settings.writeInteger(UInt32(0))
        try await connection.send(H2Wire.frame(H2Wire.Kind.settings, flags: 0, stream: 0, settings))
        try await connection.send(connection.wire.headers(1, Self.get("/dns-query?dns=1"), endStream: true))
        let head = try await connection.frames(2)
        #expect(head.map(\.type).contains(H2Wire.Kind.headers))
        #expect(!head.contains { $0.type == H2Wire.Kind.data }, "no window for the body")
        // Every second a new request whose window the client opens: answered, so never idle.
        for second in 1...4 {
            let stream = UInt32(2 * second + 1)
            try await connection.send(connection.wire.headers(stream, Self.get("/healthz"), endStream: true))
            try await connection.send(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: stream, H2Wire.word(1_000)))
            await connection.channel.testingEventLoop.advanceTime(by: .seconds(1))
        }
        #expect(connection.channel.isActive, "within the timeout")
        for second in 5...7 {
            let stream = UInt32(2 * second + 1)
            try? await connection.send(connection.wire.headers(stream, Self.get("/healthz"), endStream: true))
            try? await connection.send(H2Wire.frame(H2Wire.Kind.windowUpdate, flags: 0, stream: stream, H2Wire.word(1_000)))
            await connection.channel.testingEventLoop.advanceTime(by: .seconds(1))
        }
        let end = try await connection.written()
        #expect(end.of(type: H2Wire.Kind.goAway).count == 1, "\(end)")
        try await connection.channel.closeFuture.get()
    }

    @Test func quiescingSendsGOAWAYAndClosesOnceAnswered() async throws {
        let handling = RecordingHTTPHandler(delay: .milliseconds(50))
        let connection = try await Self.connect(handling)
        try await connection.send(connection.wire.headers(1, Self.get("/dns-query?dns=drain"), endStream: true))
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let goAway = try await connection.frames(1)
        #expect(goAway.first?.type == H2Wire.Kind.goAway)
        #expect(goAway.first?.firstWord == 1)
        #expect(goAway.first?.errorCode == H2Wire.Code.noError)
        // A new stream after GOAWAY is refused; the one in flight is still answered.
        try await connection.send(connection.wire.headers(3, Self.get("/healthz"), endStream: true))
        let refused = try await connection.frames(1)
        #expect(refused.first?.type == H2Wire.Kind.rstStream)
        #expect(refused.first?.errorCode == H2Wire.Code.refusedStream)
        let frames = try await connection.frames(2)
        #expect(frames.response(1).status == "200")
        try await connection.channel.closeFuture.get()
        #expect(handling.requests == ["GET /dns-query?dns=drain"], "the refused stream never reached the handler")
    }
}
