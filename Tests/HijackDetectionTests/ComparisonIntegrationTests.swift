import AddressProbing
import DNSCore
import HTTPDNS
import HijackDetection
import SystemResolver
import TestSupport
import Testing

/// Probes and verdicts against the real loopback servers: BIND (trusted, DoH), dnsmasq (the lying
/// system DNS), nginx (the genuine origin, an impostor with another CA's certificate, an origin
/// with another name's certificate).
struct ProbeIntegrationTests {
    let port = TestEnvironment.originPort
    let prober = ConnectionProber(mode: .tls, timeout: .seconds(3), caFile: TestEnvironment.caFile)

    func ip(_ text: String) -> IPAddress { IPAddress(text)! }

    @Test func theGenuineOriginValidatesWithTimings() async throws {
        try TestEnvironment.requireRunning()
        let probe = await prober.probe(host: "bank.hd.test", ip: ip("127.0.0.4"), port: port)
        #expect(probe.outcome == .ok, "\(probe.detail ?? "")")
        #expect(probe.kind == .tls)
        let connect = try #require(probe.connectSeconds)
        let handshake = try #require(probe.handshakeSeconds)
        #expect(connect > 0 && connect < 3)
        #expect(handshake > 0 && handshake < 3)
    }

    @Test func theImpostorsCertificateIsUntrusted() async throws {
        try TestEnvironment.requireRunning()
        let probe = await prober.probe(host: "bank.hd.test", ip: ip(TestEnvironment.impostorAddress), port: port)
        #expect(probe.outcome == .untrustedCertificate)
        // libcurl 7.88 records phase times only for a connection that completed.
        #expect(probe.handshakeSeconds == nil)
        // The impostor's certificate is for the right name: trusting its CA proves nothing more.
        let trustingOther = ConnectionProber(mode: .tls, timeout: .seconds(3), caFile: TestEnvironment.otherCAFile)
        #expect(await trustingOther.probe(host: "bank.hd.test", ip: ip(TestEnvironment.impostorAddress), port: port).outcome == .ok)
    }

    @Test func anotherNamesCertificateIsANameMismatch() async throws {
        try TestEnvironment.requireRunning()
        let probe = await prober.probe(host: "shop.hd.test", ip: ip("127.0.0.5"), port: port)
        #expect(probe.outcome == .nameMismatch)
        #expect(probe.detail?.contains("shop.hd.test") == true)
    }

    @Test func aDeadAddressFailsToConnect() async throws {
        try TestEnvironment.requireRunning()
        #expect(await prober.probe(host: "sinkhole.hd.test", ip: ip("127.0.0.7"), port: port).outcome == .connectFailed)
    }

    @Test func aPeerThatNeverHandshakesTimesOut() async throws {
        let blackhole = try BlackholeListener()
        let quick = ConnectionProber(mode: .tls, timeout: .milliseconds(500), caFile: TestEnvironment.caFile)
        let start = ContinuousClock.now
        let probe = await quick.probe(host: "a.hd.test", ip: ip("127.0.0.1"), port: blackhole.port)
        #expect(probe.outcome == .timeout)
        #expect(
            probe.detail?.lowercased().contains("timeout") == true || probe.detail?.contains("imed out") == true,
            "\(probe.detail ?? "")")
        #expect(ContinuousClock.now - start < .seconds(4))
    }

    @Test func aPortWithoutTLSIsATLSFailure() async throws {
        try TestEnvironment.requireRunning()
        let probe = await prober.probe(host: "origin.hd.test", ip: ip("127.0.0.4"), port: TestEnvironment.originPlainPort)
        #expect(probe.outcome == .tlsFailed)
        #expect(!probe.outcome.disproves)
    }

    @Test func tcpProbesMeasureTheConnectOnly() async throws {
        try TestEnvironment.requireRunning()
        let tcp = ConnectionProber(mode: .tcp, timeout: .seconds(3))
        let probe = await tcp.probe(host: "bank.hd.test", ip: ip(TestEnvironment.impostorAddress), port: port)
        #expect(probe.outcome == .ok, "TCP proves reachability, not identity")
        #expect(probe.connectSeconds != nil)
        #expect(probe.handshakeSeconds == nil)
        #expect(await tcp.probe(host: "a.hd.test", ip: ip("127.0.0.7"), port: port).outcome == .connectFailed)
    }

    @Test func plainHTTPProbesLookForTheMarker() async throws {
        try TestEnvironment.requireRunning()
        let http = ConnectionProber(mode: .http(path: "/", marker: TestEnvironment.genuineMarker), timeout: .seconds(3))
        let plain = TestEnvironment.originPlainPort
        let genuine = await http.probe(host: "bank.hd.test", ip: ip("127.0.0.4"), port: plain)
        #expect(genuine.outcome == .ok, "\(genuine.detail ?? "")")
        #expect(genuine.kind == .http)
        let impostor = await http.probe(host: "bank.hd.test", ip: ip(TestEnvironment.impostorAddress), port: plain)
        #expect(impostor.outcome == .markerMissing)
        #expect(impostor.detail?.contains("HTTP 200") == true)
        // A marker in the body is found too.
        let body = ConnectionProber(mode: .http(path: "/", marker: "enter your password"), timeout: .seconds(3))
        #expect(await body.probe(host: "bank.hd.test", ip: ip(TestEnvironment.impostorAddress), port: plain).outcome == .ok)
    }

    @Test func aHostThatIsNotANameIsRefusedWithoutAConnection() async {
        let probe = await prober.probe(host: "evil.test/../x", ip: ip("127.0.0.4"), port: port)
        #expect(probe.outcome == .connectFailed)
        #expect(probe.detail?.contains("cannot be probed") == true)
    }
}

struct ComparisonIntegrationTests {
    /// The trusted side: doh-a over loopback, private answers allowed (the origins are on 127/8).
    static func makeResolver() throws -> HTTPDNSResolver {
        try TestEnvironment.requireRunning()
        var options = HTTPDNSOptions(timeout: .seconds(3), allowPrivate: true)
        options.minTTL = .zero
        return try HTTPDNSResolver(
            configuration: .init(upstreams: [try .doh(TestEnvironment.dohA, bootstrap: ["127.0.0.1"])], caFile: TestEnvironment.caFile),
            options: options)
    }

    static func detector(
        probing: Bool = true, systemServer: String = "127.0.0.1:\(TestEnvironment.systemDNSPort)"
    ) throws -> (HijackDetector, SystemResolver) {
        let resolver = try makeResolver()
        let system = try SystemResolver(servers: [systemServer], attemptTimeout: .milliseconds(500), tries: 1)
        let prober = probing ? ConnectionProber(mode: .tls, timeout: .seconds(3), caFile: TestEnvironment.caFile) : nil
        return (
            HijackDetector(
                trusted: TrustedAnswers(resolver), system: PlainDNSAnswers(system, timeout: .seconds(2)),
                prober: prober, probePort: TestEnvironment.originPort), system
        )
    }

    func ip(_ text: String) -> IPAddress { IPAddress(text)! }

    @Test func everyVerdictAgainstTheRealServers() async throws {
        let (detector, system) = try Self.detector()
        defer { system.shutdown() }
        let hosts = [
            "origin.hd.test", "cdn.hd.test", "bank.hd.test", "shop.hd.test", "blocked.hd.test",
            "system-only.hd.test", "sinkhole.hd.test", "dual.hd.test",
        ]
        let results = await detector.compare(hosts, within: .seconds(20))
        let byHost = Dictionary(uniqueKeysWithValues: results.map { ($0.host, $0) })
        func verdict(_ host: String) -> Verdict.Kind? { byHost[host]?.verdict.kind }
        func outcome(_ host: String, _ address: String) -> AddressProbe.Outcome? {
            byHost[host]?.probes.first { $0.ip == ip(address) }?.outcome
        }

        // Forwarded honestly: same answer, nothing probed.
        #expect(verdict("origin.hd.test") == .consistent)
        #expect(byHost["origin.hd.test"]?.probes.isEmpty == true)
        // Another genuine node: different, but it proves itself.
        #expect(verdict("cdn.hd.test") == .consistent)
        #expect(outcome("cdn.hd.test", TestEnvironment.secondOriginAddress) == .ok)
        // The impostor with the right name from another CA.
        #expect(verdict("bank.hd.test") == .hijacked)
        #expect(byHost["bank.hd.test"]?.system == .addresses([ip(TestEnvironment.impostorAddress)]))
        #expect(outcome("bank.hd.test", TestEnvironment.impostorAddress) == .untrustedCertificate)
        #expect(outcome("bank.hd.test", "127.0.0.4") == .ok)
        #expect(byHost["bank.hd.test"]?.verdict.reason.contains("untrusted_certificate") == true)
        // Another name's valid certificate.
        #expect(verdict("shop.hd.test") == .hijacked)
        #expect(outcome("shop.hd.test", "127.0.0.5") == .nameMismatch)
        // Blocking: NXDOMAIN for a name a trusted address proves.
        #expect(verdict("blocked.hd.test") == .hijacked)
        #expect(byHost["blocked.hd.test"]?.system == .absent(.nxdomain))
        #expect(byHost["blocked.hd.test"]?.verdict.reason.contains("blocking") == true)
        // NXDOMAIN rewriting: the trusted side says the name does not exist.
        #expect(verdict("system-only.hd.test") == .hijacked)
        #expect(byHost["system-only.hd.test"]?.trusted == .absent(.nxdomain))
        // A dead sinkhole proves nothing.
        #expect(verdict("sinkhole.hd.test") == .suspicious)
        #expect(outcome("sinkhole.hd.test", "127.0.0.7") == .connectFailed)
        // Same A, a different AAAA: the impostor behind an IPv4-mapped address.
        #expect(verdict("dual.hd.test") == .hijacked)
        #expect(outcome("dual.hd.test", "::ffff:127.0.0.8") == .untrustedCertificate)
        #expect(byHost["dual.hd.test"]?.probes.contains { $0.ip == ip("127.0.0.4") } == true)
        #expect(byHost["dual.hd.test"]?.verdict.reason.contains("::ffff:127.0.0.8") == true)
    }

    @Test func withoutProbesADifferenceIsOnlySuspicious() async throws {
        let (detector, system) = try Self.detector(probing: false)
        defer { system.shutdown() }
        let result = await detector.compare("bank.hd.test")
        #expect(result.verdict.kind == .suspicious)
        #expect(result.probes.isEmpty)
        // Rewriting needs no probe.
        #expect(await detector.compare("system-only.hd.test").verdict.kind == .hijacked)
    }

    @Test func aSilentSystemResolverLeavesTheHostUnverified() async throws {
        // Nothing answers on this loopback port: the system side fails.
        let (detector, system) = try Self.detector(systemServer: "127.0.0.1:9")
        defer { system.shutdown() }
        let result = await detector.compare("origin.hd.test")
        #expect(result.verdict.kind == .unverified)
        guard case .failed = result.system else {
            Issue.record("system side: \(result.system)")
            return
        }
        #expect(result.trusted == .addresses([ip("127.0.0.4")]))
    }

    @Test func canaries() async throws {
        let (detector, system) = try Self.detector()
        defer { system.shutdown() }
        let lying = await detector.checkCanary(zone: "nxrewrite.hd.test")
        #expect(lying.verdict.kind == .hijacked)
        #expect(lying.system == .addresses([ip(TestEnvironment.impostorAddress)]))
        #expect(lying.trusted == .absent(.nxdomain))
        let honest = await detector.checkCanary(zone: "hd.test")
        #expect(honest.verdict.kind == .consistent, "\(honest.verdict.reason)")
        #expect(honest.system == .absent(.nxdomain))
        // A zone with a wildcard answers any name on both sides: the check says it cannot tell.
        let wildcard = await detector.checkCanary(zone: "cmp.hd.test")
        #expect(wildcard.verdict.kind == .unverified)
    }

    @Test func rankedAddressesPutTheReachableOneFirst() async throws {
        let resolver = try Self.makeResolver()
        // failover.hd.test: AAAA ::1 (nothing on the origin port), A 127.0.0.4 (the origin).
        let ranker = AddressRanker(resolver: resolver, prober: ConnectionProber(mode: .tls, timeout: .seconds(2), caFile: TestEnvironment.caFile))
        let all = await ranker.rank([ip("::1"), ip("127.0.0.4")], host: "failover.hd.test", port: TestEnvironment.originPort)
        #expect(all.map(\.ip) == [ip("127.0.0.4"), ip("::1")])
        #expect(all.map(\.outcome) == [.ok, .connectFailed])
        let healthy = try await ranker.rankedAddresses(for: "failover.hd.test", port: TestEnvironment.originPort)
        #expect(healthy.map(\.ip) == [ip("127.0.0.4")])
        // None healthy: all of them, so a caller can still try.
        let dead = try await ranker.rankedAddresses(for: "dead.hd.test", port: TestEnvironment.originPort)
        #expect(dead.map(\.ip) == [ip("127.0.0.7")])
        #expect(dead.first?.isHealthy == false)
    }
}
