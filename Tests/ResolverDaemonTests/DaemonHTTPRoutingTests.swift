import DNSCore
import NIOCore
import NIOEmbedded
import NIOHPACK
import TestSupport
import Testing

import struct NIOHTTP2.HTTP2StreamID

@testable import DaemonHTTP
@testable import ResolverDaemon

/// The daemon's routes behind its HTTP/2 handler in an embedded pipeline: DoH answers from the cache
/// and after a lookup, and the router's policy, the gateway and router real, the upstream scripted.
/// The handler's own behaviour (flushes, windows, 408, 413, GOAWAY) is tested against a recording
/// fake in DaemonHTTPTests.
@Suite struct DaemonHTTPRoutingTests {
    static func get(_ path: String) -> HPACKHeaders {
        HPACKHeaders([(":method", "GET"), (":scheme", "https"), (":authority", "localhost"), (":path", path)])
    }

    static func dohPath(_ name: String, id: UInt16) throws -> String {
        let wire = DNSMessage(id: id, flags: 0x0100, questions: [.init(name: try DomainName(name), type: .a)]).encode()
        let base64 = Array(wire).base64URL
        return "/dns-query?dns=" + base64
    }

    /// A connection past the preface: our SETTINGS and the ACK of the client's already read.
    static func connect(_ fixture: DaemonFixture) async throws -> H2TestConnection {
        let gateway = fixture.gateway
        let connection = try await H2TestConnection { channel in
            try channel.pipeline.syncOperations.addHandler(
                HTTP2ConnectionHandler(handling: gateway, configuration: .init(), logger: .init(label: "test")))
        }
        #expect(connection.opening.map(\.flags) == [0, 1], "our SETTINGS, then the ACK of the client's")
        return connection
    }

    @Test func cachedAnswersOfOneReadLeaveInOneFlushEachInItsOwnWrite() async throws {
        let fixture = try DaemonFixture()
        _ = try await fixture.resolver.resolve("www.hd.test", type: .a)
        let connection = try await Self.connect(fixture)
        for (index, id) in [UInt16(11), 22, 33].enumerated() {
            let bytes = connection.wire.headers(UInt32(2 * index + 1), Self.get(try Self.dohPath("www.hd.test", id: id)), endStream: true)
            connection.channel.pipeline.fireChannelRead(bytes)
        }
        #expect(try await connection.writes().isEmpty, "nothing is flushed before the read completes")
        connection.channel.pipeline.fireChannelReadComplete()
        let writes = try await connection.writes()
        // One write (so one TLS record) per answer: dnsperf loses a second answer in a record.
        #expect(writes.count == 3, "\(writes)")
        for (index, id) in [UInt16(11), 22, 33].enumerated() {
            let frames = connection.wire.frames(writes[index])
            #expect(frames.map(\.type) == [H2Wire.Kind.headers, H2Wire.Kind.data])
            #expect(frames.last?.endStream == true)
            let (status, body) = frames.response(UInt32(2 * index + 1))
            #expect(status == "200")
            let message = try DNSMessage(decoding: body)
            #expect(message.id == id)
            #expect(message.answers.first?.data == .address(IPAddress("198.18.0.10")!))
            let headers = frames.first?.headers
            #expect(headers?.first(name: "content-type") == "application/dns-message")
            #expect(headers?.first(name: "content-length") == String(body.count))
        }
        #expect(fixture.requests("/dns-query", "GET", 200) == 3)
    }

    @Test func aLookupIsAnsweredWhenItFinishes() async throws {
        let fixture = try DaemonFixture(upstream: ScriptedUpstream("https://doh.test/dns-query", .slow(.milliseconds(50), ["198.18.0.77"])))
        let connection = try await Self.connect(fixture)
        try await connection.send(connection.wire.headers(1, Self.get(try Self.dohPath("slow.hd.test", id: 5)), endStream: true))
        let frames = try await connection.frames(2)
        #expect(frames.response(1).status == "200")
        #expect(try DNSMessage(decoding: frames.response(1).body).answers.first?.data == .address(IPAddress("198.18.0.77")!))
        #expect(fixture.state.lookups.inFlight == 0)
    }

    @Test func aDoHLookupTakesAPlaceInTheBudgetTheDNSListenersShareAndHealthRoutesDoNot() async throws {
        let fixture = try DaemonFixture(
            upstream: ScriptedUpstream("https://doh.test/dns-query", .addresses(["198.18.0.77"], ttl: 300)),
            extra: "limits: {max_concurrent_requests: 1}")
        let budget = fixture.state.lookups
        #expect(budget.limit == 1)
        // The stub's or DoT's one lookup holds the only place (the daemon hands every listener
        // this budget): a DoH query that needs a lookup is refused at once.
        #expect(budget.enter())
        let connection = try await Self.connect(fixture)
        try await connection.send(connection.wire.headers(1, Self.get(try Self.dohPath("busy.hd.test", id: 5)), endStream: true))
        let refused = try await connection.frames(2)
        #expect(refused.response(1).status == "503")
        // `/v1/resolve` looks up too; the routes that do not still answer (an operator can read
        // /metrics while misses fill the budget).
        try await connection.send(connection.wire.headers(3, Self.get("/v1/resolve?host=busy.hd.test"), endStream: true))
        #expect(try await connection.frames(2).response(3).status == "503")
        try await connection.send(connection.wire.headers(5, Self.get("/healthz"), endStream: true))
        #expect(try await connection.frames(2).response(5).status == "200")
        budget.leave()
        try await connection.send(connection.wire.headers(7, Self.get(try Self.dohPath("busy.hd.test", id: 6)), endStream: true))
        #expect(try await connection.frames(2).response(7).status == "200")
        #expect(budget.inFlight == 0)
        // A reload sets the new limit on the same budget.
        var config = fixture.state.current.config
        config.daemon.limits.maxConcurrentRequests = 7
        _ = fixture.state.replace(with: try Runtime(config, metrics: fixture.state.metrics.factory, logger: fixture.state.logger))
        #expect(budget.limit == 7)
    }

    @Test func otherPathsGoThroughTheRouterWithThePolicy() async throws {
        let fixture = try DaemonFixture(extra: "auth_token: test-token-0123456789abcdef")
        let connection = try await Self.connect(fixture)
        try await connection.send(connection.wire.headers(1, Self.get("/healthz"), endStream: true))
        try await connection.send(connection.wire.headers(3, Self.get("/v1/status"), endStream: true))
        var authorized = Self.get("/nope")
        authorized.add(name: "authorization", value: "Bearer test-token-0123456789abcdef")
        try await connection.send(connection.wire.headers(5, authorized, endStream: true))
        let frames = try await connection.frames(5)
        #expect(frames.response(1).status == "200")
        #expect(frames.response(1).body == Array("ok\n".utf8))
        #expect(frames.response(3).status == "401")
        #expect(frames.response(5).status == "404")
        #expect(fixture.requests("/v1/status", "GET", 401) == 1)
        #expect(fixture.requests("NotFound", "GET", 404) == 1)
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
