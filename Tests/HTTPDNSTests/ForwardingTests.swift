import DNSCore
import TestSupport
import Testing

@testable import HTTPDNS

/// `HTTPDNSResolver.forward`: whole messages to the trusted DoH upstreams (BIND, nginx as a broken
/// resolver), the response unchanged but for the ID.
@Suite struct ForwardingTests {
    typealias Env = TestEnvironment

    func resolver(_ upstreams: [UpstreamEndpoint]) throws -> HTTPDNSResolver {
        try Env.requireRunning()
        return try HTTPDNSResolver(
            configuration: .init(upstreams: upstreams, caFile: Env.caFile),
            options: HTTPDNSOptions(timeout: .seconds(6)))
    }

    func query(_ name: String, _ type: RecordType, id: UInt16) throws -> [UInt8] {
        DNSMessage(id: id, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)]).encode()
    }

    @Test func aTXTQueryComesBackAsTheUpstreamAnsweredWithTheCallersID() async throws {
        let doh = try UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"])
        let response = try DNSMessage(decoding: try await resolver([doh]).forward(try query("www.hd.test", .txt, id: 0xbeef)))
        #expect(response.id == 0xbeef)
        #expect(response.isResponse && response.responseCode == .noError)
        #expect(response.questions.first?.type == .txt)
        let txt = try #require(response.answers.first)
        #expect(txt.type == .txt && txt.ttl == 300)
        #expect(txt.data == .opaque([11] + Array("hd-test-txt".utf8)))
    }

    @Test func aBrokenUpstreamFailsOverAndABrokenOnlyOneIsAnError() async throws {
        let broken = try UpstreamEndpoint.doh(Env.hostile("garbage"), bootstrap: [Env.hostileAddress])
        let mismatched = try UpstreamEndpoint.doh(Env.hostile("mismatched"), bootstrap: [Env.hostileAddress])
        let good = try UpstreamEndpoint.doh(Env.dohB, bootstrap: ["127.0.0.1"])
        let answered = try DNSMessage(decoding: try await resolver([broken, good]).forward(try query("hd.test", .mx, id: 3)))
        #expect(answered.answers.first?.type == .mx)
        await #expect { try await resolver([mismatched]).forward(try query("hd.test", .mx, id: 3)) } throws: {
            ($0 as? DNSError)?.code == .mismatchedResponse
        }
        await #expect { try await resolver([broken]).forward(try query("hd.test", .mx, id: 3)) } throws: {
            ($0 as? DNSError)?.code == .malformedResponse
        }
    }

    @Test func withOnlyJSONUpstreamsThereIsNothingToForwardTo() async throws {
        let json = try UpstreamEndpoint.json(Env.jsonAPI, bootstrap: [Env.hostileAddress])
        let resolver = try resolver([json])
        #expect(!resolver.canForward)
        await #expect { try await resolver.forward(try query("hd.test", .mx, id: 3)) } throws: {
            ($0 as? DNSError)?.code == .invalidConfiguration
        }
        await #expect { try await resolver.forward([1, 2, 3]) } throws: { ($0 as? DNSError)?.code == .invalidQuery }
    }

    @Test func forwardedFailuresReachTheUpstreamsHealthAndReadiness() async throws {
        // No sockets: recording fakes and a manual clock (issue 48 §2).
        let clock = ManualClock()
        let flaky = ScriptedExchanger("https://flaky.test/q", .respond())
        let healthy = ScriptedExchanger("https://healthy.test/q", .respond())
        var options = HTTPDNSOptions(timeout: .seconds(2))
        options.hedging = false
        let resolver = HTTPDNSResolver(options: options, upstreams: [flaky, healthy], clock: clock, spawner: DrainableTasks())
        let answered = try DNSMessage(decoding: try await resolver.forward(try query("hd.test", .mx, id: 0x1234)))
        #expect(answered.id == 0x1234 && flaky.exchanges == 1)
        #expect(resolver.hasReachableUpstream(within: .seconds(30)))
        flaky.reply(.fail(.connectFailed))
        healthy.reply(.fail(.connectFailed))
        await #expect { try await resolver.forward(try query("hd.test", .txt, id: 7)) } throws: {
            ($0 as? DNSError)?.code == .connectFailed
        }
        #expect(!resolver.hasReachableUpstream(within: .seconds(30)), "readiness sees a forwarded failure")
        // HTTPS/SVCB lookups ride the same loop: two more failures open the flaky one's circuit.
        healthy.reply(.respond())
        clock.advance(by: .milliseconds(1))
        for _ in 0..<2 { _ = try? await resolver.serviceBindings(for: "www.hd.test") }
        let health = resolver.upstreamHealth
        #expect(health.map(\.upstream) == ["https://flaky.test/q", "https://healthy.test/q"])
        #expect(health[0].health.isOpen && health[0].health.consecutiveFailures == 3)
        #expect(flaky.events.map(\.type) == [.mx, .txt, .https, .https])
        #expect(resolver.hasReachableUpstream(within: .seconds(30)))
    }
}
