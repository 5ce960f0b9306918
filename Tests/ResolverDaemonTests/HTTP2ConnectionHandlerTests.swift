import DNSCore
import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import TestSupport
import Testing

@testable import ResolverDaemon

/// The HTTP/2 handler in an embedded pipeline: frames in, frames out, the gateway and router real,
/// the upstream scripted.
@Suite struct HTTP2ConnectionHandlerTests {
    static func get(_ path: String) -> HPACKHeaders {
        HPACKHeaders([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", path)])
    }

    static func dohPath(_ name: String, id: UInt16) throws -> String {
        let wire = DNSMessage(id: id, flags: 0x0100, questions: [.init(name: try DomainName(name), type: .a)]).encode()
        let base64 = Array(wire).base64URL
        return "/dns-query?dns=" + base64
    }

    func channel(_ fixture: DaemonFixture, configuration: HTTP2ServerConnection.Configuration = .init()) async throws -> NIOAsyncTestingChannel {
        let gateway = fixture.gateway
        // The handler is made and added on the channel's loop: it is not Sendable.
        return try await NIOAsyncTestingChannel { channel in
            try channel.pipeline.syncOperations.addHandler(
                HTTP2ConnectionHandler(gateway: gateway, configuration: configuration, logger: .init(label: "test")))
        }
    }

    func frames(_ channel: NIOAsyncTestingChannel) async throws -> [HTTP2Frame] {
        var frames: [HTTP2Frame] = []
        while let frame = try await channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
        return frames
    }

    /// The (status, body) of one stream's response among `frames`.
    func response(_ stream: Int, in frames: [HTTP2Frame]) -> (status: String?, body: [UInt8]) {
        var status: String?, body: [UInt8] = []
        for frame in frames where frame.streamID == HTTP2StreamID(stream) {
            switch frame.payload {
            case .headers(let headers): status = headers.headers.first(name: ":status")
            case .data(let data): if case .byteBuffer(let buffer) = data.data { body += Array(buffer: buffer) }
            default: break
            }
        }
        return (status, body)
    }

    @Test func cachedAnswersOfOneReadLeaveInOneFlushWithTheirOwnIDs() async throws {
        let fixture = try DaemonFixture()
        _ = try await fixture.resolver.resolve("www.hd.test", type: .a)
        let channel = try await channel(fixture)
        for (index, id) in [UInt16(11), 22, 33].enumerated() {
            let stream = HTTP2StreamID(2 * index + 1)
            channel.pipeline.fireChannelRead(
                HTTP2Frame(streamID: stream, payload: .headers(.init(headers: Self.get(try Self.dohPath("www.hd.test", id: id)), endStream: true))))
        }
        #expect(try await frames(channel).isEmpty, "nothing is flushed before the read completes")
        channel.pipeline.fireChannelReadComplete()
        let written = try await frames(channel)
        #expect(written.count == 6, "HEADERS and DATA for each: \(written)")
        for (index, id) in [UInt16(11), 22, 33].enumerated() {
            let (status, body) = response(2 * index + 1, in: written)
            #expect(status == "200")
            let message = try DNSMessage(decoding: body)
            #expect(message.id == id)
            #expect(message.answers.first?.data == .address(IPAddress("198.18.0.10")!))
        }
        #expect(fixture.requests("/dns-query", "GET", 200) == 3)
    }

    @Test func aLookupIsAnsweredWhenItFinishes() async throws {
        let fixture = try DaemonFixture(upstream: ScriptedUpstream("https://doh.test/dns-query", .slow(.milliseconds(50), ["198.18.0.77"])))
        let channel = try await channel(fixture)
        try await channel.writeInbound(
            HTTP2Frame(streamID: 1, payload: .headers(.init(headers: Self.get(try Self.dohPath("slow.hd.test", id: 5)), endStream: true))))
        let headers = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        guard case .headers(let head) = headers.payload else {
            Issue.record("\(headers)")
            return
        }
        #expect(head.headers.first(name: ":status") == "200")
        let data = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        let body = response(1, in: [data]).body
        #expect(try DNSMessage(decoding: body).answers.first?.data == .address(IPAddress("198.18.0.77")!))
        #expect(fixture.state.requestsInFlight.load(ordering: .relaxed) == 0)
    }

    @Test func otherPathsGoThroughTheRouterWithThePolicy() async throws {
        let fixture = try DaemonFixture(extra: "auth_token: test-token-0123456789abcdef")
        let channel = try await channel(fixture)
        try await channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: Self.get("/healthz"), endStream: true))))
        try await channel.writeInbound(HTTP2Frame(streamID: 3, payload: .headers(.init(headers: Self.get("/v1/status"), endStream: true))))
        var authorized = Self.get("/nope")
        authorized.add(name: "authorization", value: "Bearer test-token-0123456789abcdef")
        try await channel.writeInbound(HTTP2Frame(streamID: 5, payload: .headers(.init(headers: authorized, endStream: true))))
        var written: [HTTP2Frame] = []
        for _ in 0..<5 { written.append(try await channel.waitForOutboundWrite(as: HTTP2Frame.self)) }
        #expect(response(1, in: written).status == "200")
        #expect(response(1, in: written).body == Array("ok\n".utf8))
        #expect(response(3, in: written).status == "401")
        #expect(response(5, in: written).status == "404")
        #expect(fixture.requests("/v1/status", "GET", 401) == 1)
        #expect(fixture.requests("NotFound", "GET", 404) == 1)
    }

    @Test func aMalformedRequestIsResetAndAnOversizedOneAnswered413ThenReset() async throws {
        let fixture = try DaemonFixture()
        let channel = try await channel(fixture)
        let malformed = HPACKHeaders([(":method", "GET"), (":path", "/healthz")])
        try await channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: malformed, endStream: true))))
        let reset = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        #expect(reset.streamID == 1)
        guard case .rstStream(.protocolError) = reset.payload else {
            Issue.record("\(reset)")
            return
        }

        let post = HPACKHeaders([
            (":method", "POST"), (":scheme", "https"), (":path", "/dns-query"),
            ("content-type", "application/dns-message"), ("content-length", "70000"),
        ])
        try await channel.writeInbound(HTTP2Frame(streamID: 3, payload: .headers(.init(headers: post, endStream: false))))
        var written: [HTTP2Frame] = []
        for _ in 0..<3 { written.append(try await channel.waitForOutboundWrite(as: HTTP2Frame.self)) }
        #expect(response(3, in: written).status == "413")
        guard case .rstStream(.noError) = written.last?.payload else {
            Issue.record("RST_STREAM NO_ERROR last: \(written)")
            return
        }
    }

    @Test func bodiesRefillTheirStreamWindowAndSlowOnesGet408() async throws {
        let fixture = try DaemonFixture()
        let channel = try await channel(fixture)
        let post = HPACKHeaders([(":method", "POST"), (":scheme", "https"), (":path", "/dns-query"), ("content-type", "application/dns-message")])
        try await channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: post, endStream: false))))
        try await channel.writeInbound(
            HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(ByteBuffer(repeating: 0, count: 20_000)), endStream: false))))
        let update = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        guard case .windowUpdate(20_000) = update.payload, update.streamID == 1 else {
            Issue.record("\(update)")
            return
        }
        await channel.testingEventLoop.advanceTime(by: .seconds(11))
        var written: [HTTP2Frame] = []
        for _ in 0..<2 { written.append(try await channel.waitForOutboundWrite(as: HTTP2Frame.self)) }
        #expect(response(1, in: written).status == "408")
    }

    @Test func quiescingSendsGOAWAYAndClosesOnceAnswered() async throws {
        let fixture = try DaemonFixture(upstream: ScriptedUpstream("https://doh.test/dns-query", .slow(.milliseconds(50), ["198.18.0.77"])))
        let channel = try await channel(fixture)
        try await channel.writeInbound(
            HTTP2Frame(streamID: 1, payload: .headers(.init(headers: Self.get(try Self.dohPath("drain.hd.test", id: 1)), endStream: true))))
        channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        let goAway = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        guard case .goAway(let last, .noError, _) = goAway.payload else {
            Issue.record("\(goAway)")
            return
        }
        #expect(last == 1)
        // A new stream after GOAWAY is refused; the one in flight is still answered.
        try await channel.writeInbound(HTTP2Frame(streamID: 3, payload: .headers(.init(headers: Self.get("/healthz"), endStream: true))))
        let refused = try await channel.waitForOutboundWrite(as: HTTP2Frame.self)
        guard case .rstStream(.refusedStream) = refused.payload else {
            Issue.record("\(refused)")
            return
        }
        var written: [HTTP2Frame] = []
        for _ in 0..<2 { written.append(try await channel.waitForOutboundWrite(as: HTTP2Frame.self)) }
        #expect(response(1, in: written).status == "200")
        try await channel.closeFuture.get()
    }
}

extension Array where Element == UInt8 {
    /// base64url without padding (RFC 4648 §5), for DoH GET parameters.
    var base64URL: String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var out: [UInt8] = []
        var index = 0
        while index < count {
            let a = self[index], b = index + 1 < count ? self[index + 1] : 0, c = index + 2 < count ? self[index + 2] : 0
            out.append(alphabet[Int(a >> 2)])
            out.append(alphabet[Int((a & 3) << 4 | b >> 4)])
            if index + 1 < count { out.append(alphabet[Int((b & 15) << 2 | c >> 6)]) }
            if index + 2 < count { out.append(alphabet[Int(c & 63)]) }
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
