import DNSCore
import ResolverConfig
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire
@testable import HTTPDNS
@testable import ResolverDaemon

/// DDR (RFC 9462) in the daemon: what `_dns.resolver.arpa` is answered with for each listener
/// configuration, and that nothing under `resolver.arpa` ever reaches an upstream.
@Suite struct ResolverArpaTests {
    static let ca = TestEnvironment.root + "/.testenv/ca"
    static let tls = "tls: {cert: \(ca)/daemon.test.pem, key: \(ca)/daemon.test.key}\n"
    static let base = "upstreams:\n  - doh: https://127.0.0.1/q\n"

    func discovery(_ text: String) throws -> Runtime.Discovery {
        Runtime.Discovery(try ConfigFile.parse(Self.base + text))
    }

    @Test func theEncryptedListenersAreAdvertisedUnderTheCertificatesName() throws {
        try TestEnvironment.requireRunning()
        let both = try discovery(Self.tls + "listen: 127.0.0.1:8443\ndot_listen: '[::]:853'\n")
        #expect(both.problem == nil)
        let (designations, skipped) = ResolverDiscovery.designations(both.records)
        #expect(skipped.isEmpty)
        #expect(designations.map(\.transport) == [.doh(path: "/dns-query"), .dot])
        #expect(designations.map(\.port) == [8443, 853])
        #expect(designations.allSatisfy { $0.target.description == "daemon.test" })
        #expect(designations[0].hints == [IPAddress("127.0.0.1")!] && designations[1].hints.isEmpty, "a wildcard listener gives no hint")
        #expect(both.ttl == 300)

        let named = try discovery(Self.tls + "dot_listen: 127.0.0.1:853\nddr: {name: resolver.example.test, ttl: 30}\n")
        #expect(named.records.map(\.target.description) == ["resolver.example.test", "resolver.example.test"] && named.ttl == 30)
        // /dns-query behind a token: a client discovering it could not use it, so only DoT.
        let protected = try discovery(Self.tls + "dot_listen: 127.0.0.1:853\nauth_token: 0123456789abcdef0123\nprotect_dns_query: true\n")
        #expect(protected.records.map(\.alpn) == [["dot"]])
    }

    @Test func nothingIsAdvertisedWithoutAnEncryptedListenerOrWithDDROff() throws {
        try TestEnvironment.requireRunning()
        #expect(try discovery("listen: 127.0.0.1:8053\ndns_listen: 127.0.0.1:53\n").records.isEmpty)
        let off = try discovery(Self.tls + "dot_listen: 127.0.0.1:853\nddr: off\n")
        #expect(off.records.isEmpty && off.problem == nil)
        // A certificate for addresses only would need ddr.name: said, not guessed.
        #expect(Runtime.Discovery.certificateName(Self.ca + "/daemon.test.pem")?.description == "daemon.test")
        #expect(Runtime.Discovery.certificateName("/nonexistent.pem") == nil)
        #expect(Runtime.Discovery.listener("0.0.0.0:53") == ResolverDiscovery.Listener(port: 53))
        #expect(Runtime.Discovery.listener("[2001:db8::1]:443") == ResolverDiscovery.Listener(port: 443, address: IPAddress("2001:db8::1")))
    }

    @Test func nothingUnderResolverArpaIsForwarded() async throws {
        let upstream = RelayedCloakingTests.ChainUpstream([:])
        let resolver = HTTPDNSResolver(configuration: HTTPDNSConfiguration(upstreams: []), options: HTTPDNSOptions(), upstreams: [upstream])
        for (name, type, rcode) in [
            ("_dns.resolver.arpa", RecordType.svcb, ResponseCode.noError), ("_dns.resolver.arpa", .a, .noError),
            ("resolver.arpa", .txt, .noError), ("evil.resolver.arpa", .a, .nameError), ("x._dns.resolver.arpa", .https, .nameError),
        ] {
            let wire = DNSMessage(id: 0x4242, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)]).encode()
            let answer = await DNSResponder.answer(try DNSQuery(wire), resolver: resolver)
            let message = try DNSMessage(decoding: answer.bytes)
            #expect(message.responseCode == rcode && message.answers.isEmpty, "\(name) \(type)")
        }
        // A name that only looks like it still goes upstream.
        _ = await DNSResponder.answer(
            try DNSQuery(DNSMessage(id: 1, flags: 0x0100, questions: [.init(name: try DomainName("resolver.arpa.test"), type: .txt)]).encode()),
            resolver: resolver)
        #expect(upstream.asked.withLock { $0 } == ["resolver.arpa.test TXT"])
    }

    /// F62-3: the guard is the engine's, so the HTTP API, a local CNAME into resolver.arpa, a
    /// watched host and the proxy (every path that asks the resolver) send nothing upstream either.
    @Test func theEngineNeverSendsResolverArpaUpstream() async throws {
        let upstream = RelayedCloakingTests.ChainUpstream([:])
        var options = HTTPDNSOptions()
        options.keepsResolverArpa = true
        var builder = LocalZone.Builder()
        try builder.addRecord("alias.home.test CNAME x.resolver.arpa")
        let configuration = HTTPDNSConfiguration(upstreams: [], localZone: try builder.build())
        let resolver = HTTPDNSResolver(configuration: configuration, options: options, upstreams: [upstream])
        for host in ["x.resolver.arpa", "_DNS.resolver.arpa", "resolver.arpa"] {
            await #expect { try await resolver.resolve(host, type: .a) } throws: { ($0 as? DNSError)?.code == .nxdomain }
        }
        await #expect { try await resolver.serviceBindings(for: "_dns.resolver.arpa", type: .svcb) } throws: { ($0 as? DNSError)?.code == .nxdomain }
        let query = DNSMessage(id: 7, flags: 0x0100, questions: [.init(name: ResolverDiscovery.name, type: .svcb)]).encode()
        await #expect { try await resolver.forward(query) } throws: { ($0 as? DNSError)?.code == .nxdomain }
        // A local alias into it: NXDOMAIN, from the daemon alone.
        let wire = DNSMessage(id: 9, flags: 0x0100, questions: [.init(name: try DomainName("alias.home.test"), type: .a)]).encode()
        let answer = try DNSMessage(decoding: await DNSResponder.answer(try DNSQuery(wire), resolver: resolver).bytes)
        #expect(answer.responseCode == .nameError, "\(answer.answers)")
        #expect(upstream.asked.withLock { $0 }.isEmpty, "\(upstream.asked.withLock { $0 })")
        // Without the option (a client asking a designated resolver about itself), it is asked.
        let client = HTTPDNSResolver(configuration: HTTPDNSConfiguration(upstreams: []), options: HTTPDNSOptions(), upstreams: [upstream])
        _ = try await client.forward(query)
        #expect(upstream.asked.withLock { $0 } == ["_dns.resolver.arpa SVCB"])
    }

    /// F62-5: a reload does not move the listeners, so what is advertised stays what is bound.
    @Test func theAdvertisementFollowsTheBoundListenersNotAReloadedFile() throws {
        try TestEnvironment.requireRunning()
        let bound = try ConfigFile.parse(Self.base + Self.tls + "listen: 127.0.0.1:8443\ndot_listen: 127.0.0.1:853\n")
        let reloaded = try ConfigFile.parse(Self.base + Self.tls + "listen: 127.0.0.1:9443\ndot_listen: 127.0.0.1:9853\nddr: {ttl: 60}\n")
        let discovery = Runtime.Discovery(reloaded, listeners: bound)
        #expect(discovery.records.map(\.port) == [8443, 853] && discovery.ttl == 60)
    }
}
