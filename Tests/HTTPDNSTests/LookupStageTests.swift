import DNSCore
import TestSupport
import Testing

@testable import HTTPDNS

/// One `Lookup` through the resolver's stages (issue 48 §1): local data and blocks → forward zones →
/// the cache → DNSSEC and the upstreams → the canonical-name block check; the String API and the
/// daemon's entry (a parsed name, past the local data) are the same path. Recording fakes and a
/// manual clock.
@Suite struct LookupStageTests {
    let clock = ManualClock()
    let tasks = DrainableTasks()
    let trusted = ScriptedUpstream("https://trusted.test/dns-query", .addresses(["198.18.0.1", "2001:2::1"], ttl: 300))
    let corp = ScriptedUpstream("dns://127.0.0.1:5399", source: .system, .addresses(["10.1.2.3"], ttl: 300))

    func resolver() throws -> HTTPDNSResolver {
        var builder = LocalZone.Builder()
        try builder.addRecord("nas.home.test A 192.168.1.10")
        try builder.addRecord("www.home.test 60 CNAME edge.cdn.test")
        builder.addBlockList(Array("ads.test\ntracker.test\n".utf8), source: "list")
        var options = HTTPDNSOptions(timeout: .seconds(2))
        options.allowPrivate = true
        options.minTTL = .zero
        let corpResolver = HTTPDNSResolver(
            options: HTTPDNSResolver.forwardOptions(options, zone: try DomainName("corp.test")), upstreams: [corp], clock: clock,
            spawner: DrainableTasks())
        return HTTPDNSResolver(
            configuration: HTTPDNSConfiguration(upstreams: [], localZone: try builder.build()), options: options, upstreams: [trusted],
            clock: clock, spawner: tasks, forwards: [try DomainName("corp.test"): corpResolver])
    }

    @Test func everyModeStopsAtTheLocalDataFirst() async throws {
        let resolver = try resolver()
        let name = try DomainName("nas.home.test")
        for mode in [Lookup.Mode.wait, .now, .peek] {
            let local = try #require(
                mode == .wait
                    ? try await resolver.resolve(Lookup(name, type: .a, mode: mode))
                    : resolver.resolveNow(Lookup("nas.home.test", type: .a, mode: mode)))
            #expect(local.source == .local && local.addresses.map(\.ip.description) == ["192.168.1.10"])
        }
        // A block is the local stage's answer in every mode: an error waiting, nil without waiting.
        await #expect { try await resolver.resolve(Lookup("x.ads.test", type: .a, mode: .wait)) } throws: {
            ($0 as? DNSError)?.code == .nxdomain
        }
        #expect(resolver.resolveNow(Lookup("x.ads.test", type: .a, mode: .now)) == nil)
        #expect(trusted.queries == 0)
        // Past the local data (the daemon asked it already), the name goes on to the upstreams.
        let past = try await resolver.resolve(Lookup(name, type: .a, mode: .wait, pastLocalData: true))
        #expect(past.source == .doh && trusted.events.map(\.name) == ["nas.home.test"])
    }

    @Test func aLocalChainLeavingTheLocalDataNeedsALookupWithoutWaiting() async throws {
        let resolver = try resolver()
        #expect(resolver.resolveNow(Lookup("www.home.test", type: .a, mode: .now)) == nil, "needs a lookup: nil, nothing asked")
        #expect(trusted.queries == 0)
        let followed = try await resolver.resolve(Lookup("www.home.test", type: .a, mode: .wait))
        #expect(followed.canonicalName == "edge.cdn.test" && followed.addresses.first?.ttl == 60)
        #expect(trusted.events.map(\.name) == ["edge.cdn.test"])
    }

    @Test func forwardZonesRunTheRestOfTheStagesInTheZonesResolver() async throws {
        let resolver = try resolver()
        let intranet = try await resolver.resolve(Lookup(try DomainName("intranet.corp.test"), type: .a, mode: .wait))
        #expect(intranet.source == .system && corp.queries == 1 && trusted.queries == 0)
        #expect(resolver.resolveNow(Lookup("intranet.corp.test", type: .a, mode: .now))?.source == .cache)
        // Its kept answers are the zone resolver's: stale ones reach `.peek`, not `.now`.
        clock.advance(by: .seconds(301))
        #expect(resolver.resolveNow(Lookup("intranet.corp.test", type: .a, mode: .now)) == nil)
        #expect(resolver.resolveNow(Lookup("intranet.corp.test", type: .a, mode: .peek))?.addresses.first?.ip.description == "10.1.2.3")
        #expect(corp.queries == 1 && trusted.queries == 0)
    }

    @Test func peekServesStaleNowDoesNotAndTheWaitAfterAMissAsksOnce() async throws {
        let resolver = try resolver()
        _ = try await resolver.resolve(Lookup("www.public.test", type: .a, mode: .wait))
        clock.advance(by: .seconds(301))
        #expect(resolver.resolveNow(Lookup("www.public.test", type: .a, mode: .now)) == nil, "stale: not without waiting")
        #expect(resolver.resolveNow(Lookup("www.public.test", type: .a, mode: .peek))?.addresses.first?.ip.description == "198.18.0.1")
        // The daemon's miss: a `.now` pass found nothing, the `.wait` pass goes straight to the
        // engine's lookup, which serves the stale answer and refreshes it behind the caller.
        var lookup = Lookup(try DomainName("www.public.test"), type: .a, mode: .wait, pastLocalData: true)
        lookup.afterMiss = true
        let stale = try await resolver.resolve(lookup)
        #expect(stale.source == .stale)
        await tasks.drain()
        #expect(trusted.queries == 2, "the first lookup, and the stale answer's refresh")
        // A true miss after a miss: one upstream query.
        let asked = trusted.queries
        var fresh = Lookup(try DomainName("new.public.test"), type: .aaaa, mode: .now, pastLocalData: true)
        #expect(resolver.resolveNow(fresh) == nil)
        fresh.afterMiss = true
        #expect(try await resolver.resolve(fresh).addresses.map(\.ip.description) == ["2001:2::1"])
        #expect(trusted.queries == asked + 1)
    }

    @Test func theStringAPIIsTheSamePath() async throws {
        let resolver = try resolver()
        #expect(try await resolver.resolve("nas.home.test", type: .a).source == .local)
        #expect(resolver.resolveWithoutWaiting("198.18.0.7", type: .a)?.source == .literal)
        await #expect { try await resolver.resolve("bad name.test", type: .a) } throws: { ($0 as? DNSError)?.code == .invalidName }
        _ = try await resolver.resolve("www.public.test", type: .a)
        #expect(resolver.resolveWithoutWaiting("www.public.test", type: .a)?.source == .cache)
        #expect(resolver.cachedResolution(for: "www.public.test", type: .a)?.source == .cache)
    }
}
