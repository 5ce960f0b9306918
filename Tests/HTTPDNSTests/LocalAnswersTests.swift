import DNSCore
import MetricsTestKit
import Synchronization
import TestSupport
import Testing

@testable import HTTPDNS

/// The library's side of local data: local names never reach an upstream, blocked names are
/// answered as `block.answer` says, and an upstream's alias cannot step around the block list.
@Suite struct LocalAnswersTests {
    /// Answers every name with a CNAME to `cdn.tracker.test` (CNAME cloaking) for names under
    /// `cloaked.test`, else with the plain addresses; logs every question.
    final class AliasingUpstream: DNSUpstream, Sendable {
        let identifier = "https://fake.test/dns-query"
        let source = Resolution.Source.doh
        let log = Mutex<[String]>([])

        func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
            log.withLock { $0.append("\(question.name) \(question.type)") }
            let ip = question.type == .a ? IPAddress("198.18.0.7")! : IPAddress("2001:2::7")!
            let name = question.name.description
            // A canonical name DNS allows but a host name does not (F26 of redteam-4).
            let odd = DomainName(uncheckedWire: [3, 0x61, 0x2a, 0x62] + (try DomainName("tracker.test")).wire)
            let canonical =
                name.hasSuffix("cloaked.test") ? try DomainName("cdn.tracker.test") : name.hasSuffix("odd.test") ? odd : question.name
            return .addresses([ResolvedAddress(ip: ip, ttl: 300)], canonicalName: canonical)
        }
    }

    func resolver(_ block: LocalZone.BlockAnswer = .nxdomain, metrics: TestMetrics = TestMetrics()) throws -> (HTTPDNSResolver, AliasingUpstream) {
        var builder = LocalZone.Builder()
        builder.blockAnswer = block
        try builder.addRecord("nas.home.test A 192.168.1.10")
        try builder.addRecord("nas.home.test AAAA fd00::10")
        try builder.addRecord("txt-only.home.test TXT hello")
        try builder.addRecord("www.home.test 60 CNAME edge.cdn.test")
        try builder.addHosts("192.168.1.20 laptop.home.test\n", source: "hosts")
        builder.addBlockList(Array("ads.test\ntracker.test\n".utf8), source: "list")
        let upstream = AliasingUpstream()
        var options = HTTPDNSOptions()
        options.allowPrivate = true
        let configuration = HTTPDNSConfiguration(upstreams: [], localZone: try builder.build())
        return (HTTPDNSResolver(configuration: configuration, options: options, upstreams: [upstream], metrics: metrics), upstream)
    }

    @Test func localNamesAreAnsweredWithoutAnUpstream() async throws {
        let metrics = TestMetrics()
        let (resolver, upstream) = try resolver(metrics: metrics)
        let nas = try await resolver.resolve("NAS.home.test")
        #expect(nas.source == .local)
        #expect(Set(nas.addresses.map(\.ip.description)) == ["192.168.1.10", "fd00::10"])
        #expect(try await resolver.resolve("laptop.home.test", type: .a).addresses.map(\.ip.description) == ["192.168.1.20"])
        #expect(resolver.resolveWithoutWaiting("nas.home.test", type: .a)?.source == .local)
        #expect(resolver.cachedResolution(for: "nas.home.test", type: .aaaa)?.addresses.first?.ip.description == "fd00::10")
        // Local but without addresses: NODATA, still no upstream.
        await #expect(throws: DNSError.self) { try await resolver.resolve("txt-only.home.test") }
        do { _ = try await resolver.resolve("txt-only.home.test") } catch { #expect(error.code == .nodata) }
        #expect(upstream.log.withLock { $0 }.isEmpty)
        #expect(try metrics.expectCounter("httpdns_local_answers_total", [("kind", "record")]).totalValue >= 5)
    }

    @Test func aLocalAliasLeavingTheLocalDataIsLookedUpFromItsTarget() async throws {
        let (resolver, upstream) = try resolver()
        let www = try await resolver.resolve("www.home.test", type: .a)
        #expect(www.host == "www.home.test")
        #expect(www.canonicalName == "edge.cdn.test")
        #expect(www.addresses.map(\.ip.description) == ["198.18.0.7"])
        // The local CNAME's TTL caps the address's.
        #expect(www.addresses.first?.ttl == 60)
        #expect(upstream.log.withLock { $0 } == ["edge.cdn.test A"])
    }

    @Test func blockedNamesGetTheConfiguredAnswer() async throws {
        let (nx, upstream) = try resolver(.nxdomain)
        do {
            _ = try await nx.resolve("pixel.ads.test")
            Issue.record("a blocked name resolved")
        } catch {
            #expect(error.code == .nxdomain)
            #expect(error.message.contains("blocked"))
        }
        let (refused, _) = try resolver(.refused)
        do {
            _ = try await refused.resolve("ads.test")
            Issue.record("a blocked name resolved")
        } catch {
            #expect(error.code == .refused)
        }
        let (null, _) = try resolver(.nullIP)
        let answer = try await null.resolve("ads.test")
        #expect(answer.source == .local)
        #expect(Set(answer.addresses.map(\.ip.description)) == ["0.0.0.0", "::"])
        #expect(upstream.log.withLock { $0 }.isEmpty)
        // A name beside the list goes out as usual.
        #expect(try await nx.resolve("notads.test", type: .a).source == .doh)
    }

    @Test func anUpstreamAliasIntoTheBlockListIsBlocked() async throws {
        let metrics = TestMetrics()
        let (resolver, _) = try resolver(.nxdomain, metrics: metrics)
        do {
            _ = try await resolver.resolve("www.cloaked.test", type: .a)
            Issue.record("a cloaked tracker resolved")
        } catch {
            #expect(error.code == .nxdomain)
            #expect(error.message.contains("cdn.tracker.test"))
        }
        // Not from the cache either (the answer was cached by the engine).
        #expect(resolver.resolveWithoutWaiting("www.cloaked.test", type: .a) == nil)
        #expect(resolver.cachedResolution(for: "www.cloaked.test", type: .a) == nil)
        #expect(try metrics.expectCounter("httpdns_local_answers_total", [("kind", "blocked")]).totalValue >= 1)
        // `a*b.tracker.test` is no host name, but it is under tracker.test: blocked too (before:
        // the check parsed the canonical name as a host name, failed, and let the answer through).
        do {
            let answer = try await resolver.resolve("www.odd.test", type: .a)
            Issue.record("a canonical name with '*' stepped around the block list: \(answer)")
        } catch {
            #expect(error.code == .nxdomain)
            #expect(error.message.contains("a*b.tracker.test"))
        }
    }
}
