import CurlSupport
import DNSCore
import Synchronization
import SystemResolver
import TestSupport
import Testing

@testable import HTTPDNS

/// Wraps a real upstream: counts the questions that reach it and can be switched off.
final class SwitchableUpstream: DNSUpstream, @unchecked Sendable {
    // Safety: mutable state is atomic.
    let wrapped: any DNSUpstream
    let down = Atomic<Bool>(false)
    let count = Atomic<Int>(0)
    var identifier: String { wrapped.identifier }
    var source: Resolution.Source { wrapped.source }

    init(_ wrapped: any DNSUpstream) { self.wrapped = wrapped }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        count.add(1, ordering: .relaxed)
        if down.load(ordering: .relaxed) { throw DNSError(.connectFailed, "switched off by the test") }
        return try await wrapped.query(question, timeout: timeout)
    }
}

/// The engine over the real loopback servers: BIND DoH as the trusted side, dnsmasq as the system.
@Suite(.serialized) struct EngineIntegrationTests {
    typealias Env = TestEnvironment

    func realDoH() throws -> SwitchableUpstream {
        try Env.requireRunning()
        let transport = HTTPTransport(engine: .shared, trust: TLSTrust(caFile: Env.caFile), maxResponseBytes: 65_536)
        let endpoint = try UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"])
        return SwitchableUpstream(DoHUpstream(endpoint: endpoint, method: .get, transport: transport))
    }

    func system() throws -> SystemResolver {
        try SystemResolver(servers: ["127.0.0.1:\(Env.systemDNSPort)"])
    }

    @Test func thousandConcurrentLookupsReachTheServerOnce() async throws {
        let upstream = try realDoH()
        let resolver = HTTPDNSResolver(upstreams: [upstream])
        let answered = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<1000 {
                group.addTask { (try? await resolver.resolve("www.hd.test", type: .a))?.addresses.count ?? 0 }
            }
            return await group.reduce(0, +)
        }
        #expect(answered == 1000)
        #expect(upstream.count.load(ordering: .relaxed) == 1)
    }

    @Test func staleAnswerIsServedWhenTheTrustedSideGoesDown() async throws {
        let upstream = try realDoH()
        let clock = ManualClock()
        var options = HTTPDNSOptions()
        options.minTTL = .zero
        let resolver = HTTPDNSResolver(options: options, upstreams: [upstream], clock: clock)
        let fresh = try await resolver.resolve("www.hd.test", type: .a)
        #expect(fresh.source == .doh)
        upstream.down.store(true, ordering: .relaxed)
        clock.advance(by: .seconds(301))
        let stale = try await resolver.resolve("www.hd.test", type: .a)
        #expect(stale.source == .stale)
        #expect(stale.addresses.map(\.ip.description) == ["198.18.0.10"])
        #expect(stale.addresses.map(\.ttl) == [30])
    }

    @Test func systemFallbackAnswersFromDnsmasqWhenTrustedResolversFail() async throws {
        let upstream = try realDoH()
        upstream.down.store(true, ordering: .relaxed)
        let system = try system()
        defer { system.shutdown() }
        var options = HTTPDNSOptions()
        options.fallback = .system
        let resolver = HTTPDNSResolver(options: options, upstreams: [upstream], fallback: system)
        let resolution = try await resolver.resolve("system-only.hd.test", type: .a)
        #expect(resolution.source == .system)
        #expect(resolution.upstream == "dns://127.0.0.1:\(Env.systemDNSPort)")
        #expect(resolution.addresses.map(\.ip.description) == ["198.18.77.77"])
        #expect(resolution.failedAttempts.first?.code == .connectFailed)
    }

    @Test func strictPolicyFailsClearlyInsteadOfAskingTheSystem() async throws {
        let upstream = try realDoH()
        upstream.down.store(true, ordering: .relaxed)
        let system = try system()
        defer { system.shutdown() }
        let resolver = HTTPDNSResolver(options: HTTPDNSOptions(), upstreams: [upstream], fallback: system)
        await #expect { try await resolver.resolve("system-only.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .connectFailed
        }
    }

    @Test func trustedAnswerWinsOverTheLyingSystem() async throws {
        let upstream = try realDoH()
        let system = try system()
        defer { system.shutdown() }
        var options = HTTPDNSOptions()
        options.fallback = .system
        let resolver = HTTPDNSResolver(options: options, upstreams: [upstream], fallback: system)
        // dnsmasq lies for hijacked.hd.test; the trusted side says it does not exist.
        await #expect { try await resolver.resolve("hijacked.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
    }
}
