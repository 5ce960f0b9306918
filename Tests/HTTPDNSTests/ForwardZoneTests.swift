import DNSCore
import TestSupport
import Testing

@testable import HTTPDNS

/// Split DNS in the library: names of a forward zone go only to its upstreams, other names never
/// do, the longest zone wins, and a forward zone's private answers pass the rebinding guard that
/// still guards the trusted side.
@Suite struct ForwardZoneTests {
    let trusted = ScriptedUpstream("https://trusted.test/dns-query", .addresses(["10.9.9.9", "198.18.0.1"]))
    let corp = ScriptedUpstream("dns://127.0.0.1:5399", source: .system, .addresses(["10.1.2.3"]))
    let lab = ScriptedUpstream("dns://127.0.0.1:5400", source: .system, .addresses(["10.7.7.7"]))

    func resolver(local: LocalZone? = nil) throws -> HTTPDNSResolver {
        let options = HTTPDNSOptions()  // allowPrivate false: the rebinding guard is on
        let child = { (upstream: ScriptedUpstream, zone: String) throws in
            HTTPDNSResolver(
                options: HTTPDNSResolver.forwardOptions(options, zone: try DomainName(zone)), upstreams: [upstream],
                spawner: UnstructuredTasks())
        }
        let corpResolver = try child(corp, "corp.test")
        return HTTPDNSResolver(
            configuration: HTTPDNSConfiguration(upstreams: [], localZone: local), options: options, upstreams: [trusted],
            spawner: UnstructuredTasks(),
            forwards: [
                try DomainName("corp.test"): corpResolver, try DomainName("10.in-addr.arpa"): corpResolver,
                try DomainName("lab.corp.test"): try child(lab, "lab.corp.test"),
            ])
    }

    @Test func namesGoOnlyToTheirZonesUpstreams() async throws {
        let resolver = try resolver()
        let intranet = try await resolver.resolve("intranet.CORP.test", type: .a)
        // A private address, kept: the zone is internal.
        #expect(intranet.addresses.map(\.ip.description) == ["10.1.2.3"])
        #expect(intranet.source == .system)
        #expect(try await resolver.resolve("corp.test", type: .a).addresses.map(\.ip.description) == ["10.1.2.3"])
        // The longest zone wins.
        #expect(try await resolver.resolve("x.lab.corp.test", type: .a).addresses.map(\.ip.description) == ["10.7.7.7"])
        // A public name goes to the trusted upstream, whose private answer the guard drops.
        let public1 = try await resolver.resolve("www.public.test", type: .a)
        #expect(public1.addresses.map(\.ip.description) == ["198.18.0.1"])
        // A name that only ends like a zone is not in it.
        _ = try await resolver.resolve("notcorp.test", type: .a)

        #expect(Set(corp.events.map(\.name)) == ["intranet.corp.test", "corp.test"])
        #expect(lab.events.map(\.name) == ["x.lab.corp.test"])
        #expect(Set(trusted.events.map(\.name)) == ["www.public.test", "notcorp.test"])
        // Kept answers come from the zone's own cache.
        #expect(resolver.resolveWithoutWaiting("intranet.corp.test", type: .a)?.source == .cache)
        #expect(resolver.cachedResolution(for: "x.lab.corp.test", type: .a)?.addresses.first?.ip.description == "10.7.7.7")
        #expect(resolver.canForward(try DomainName("intranet.corp.test")) == false)
    }

    /// R2 of issue 48's live red team: a zone's servers are sent no name outside it, probes
    /// included — an open circuit's probe asks the zone's apex SOA (an authoritative-only server
    /// refused the root's NS every time, so its circuit never closed).
    @Test func aForwardZonesProbeAsksTheZonesOwnApex() async throws {
        let clock = ManualClock()
        let tasks = DrainableTasks()
        let corp = ScriptedUpstream("dns://127.0.0.1:5399", source: .system, .fail(.timeout))
        var options = HTTPDNSOptions(timeout: .seconds(1))
        options.healthCheckName = "readiness.example.test"
        let zone = try DomainName("corp.test")
        let child = HTTPDNSResolver(
            options: HTTPDNSResolver.forwardOptions(options, zone: zone), upstreams: [corp], clock: clock, spawner: tasks)
        for index in 0..<3 { _ = try? await child.resolve("host\(index).corp.test", type: .a) }
        #expect(child.engine.pool.isOpen(0))
        corp.reply(.nodata)
        clock.advance(by: .seconds(1))
        child.engine.pool.probeDue()
        await tasks.drain()
        #expect(corp.events.last.map { "\($0.name) \($0.type)" } == "corp.test SOA")
        #expect(corp.events.allSatisfy { $0.name.hasSuffix("corp.test") }, "no name outside the zone")
        #expect(!child.engine.pool.isOpen(0), "the apex answered: closed")
    }

    @Test func prefetchAndWarmRouteByZone() async throws {
        let resolver = try resolver()
        _ = await resolver.warm(["a.corp.test", "b.public.test"], type: .a)
        resolver.prefetch(["c.corp.test"], type: .a)
        for _ in 0..<100 where corp.queries < 2 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(Set(corp.events.map(\.name)) == ["a.corp.test", "c.corp.test"])
        #expect(trusted.events.map(\.name) == ["b.public.test"])
    }

    @Test func localDataComesBeforeForwarding() async throws {
        var builder = LocalZone.Builder()
        try builder.addRecord("pinned.corp.test A 10.5.5.5")
        builder.addBlockList(Array("ads.corp.test\n".utf8), source: "list")
        let resolver = try resolver(local: try builder.build())
        #expect(try await resolver.resolve("pinned.corp.test", type: .a).source == .local)
        await #expect(throws: DNSError.self) { try await resolver.resolve("x.ads.corp.test", type: .a) }
        #expect(corp.queries == 0)
    }

    @Test func configurationRefusesWhatWouldLeak() throws {
        #expect(throws: DNSError.self) {
            try HTTPDNSConfiguration(
                upstreams: [try .init(.doh(.get), url: "https://192.0.2.1/dns-query")],
                forwardZones: [ForwardZone(zones: [.root], plainDNS: ["127.0.0.1"])]
            ).validate()
        }
        #expect(throws: DNSError.self) {
            try HTTPDNSConfiguration(
                upstreams: [try .init(.doh(.get), url: "https://192.0.2.1/dns-query")],
                forwardZones: [
                    ForwardZone(zones: [try DomainName("corp.test")], plainDNS: ["127.0.0.1"]),
                    ForwardZone(zones: [try DomainName("corp.test")], plainDNS: ["127.0.0.2"]),
                ]
            ).validate()
        }
        // A plain server without the factory that makes its upstream.
        #expect(throws: DNSError.self) {
            try HTTPDNSResolver(
                configuration: HTTPDNSConfiguration(
                    upstreams: [try .init(.doh(.get), url: "https://192.0.2.1/dns-query")],
                    forwardZones: [ForwardZone(zones: [try DomainName("corp.test")], plainDNS: ["127.0.0.1"])]))
        }
    }
}
