import TestSupport
import Testing

@testable import DNSCore

/// A negative answer keeps the zone's SOA the upstream sent (RFC 2308 §3): read from the response,
/// kept in the cache and its snapshot, counted down, and handed on in the error.
@Suite struct NegativeAuthorityTests {
    let clock = ManualClock()
    static let soa = DNSMessage.SOA(
        primary: try! DomainName("ns.hd.test"), mailbox: try! DomainName("hostmaster.hd.test"), serial: 2026112801,
        refresh: 3600, retry: 600, expire: 86400, minimum: 60)

    static func soaRecord(_ owner: String, ttl: UInt32 = 300, minimum: UInt32 = 60) -> DNSMessage.Record {
        var soa = Self.soa
        soa.minimum = minimum
        return DNSMessage.Record(name: try! DomainName(owner), type: .soa, ttl: ttl, data: .soa(soa))
    }

    static func response(_ name: String, rcode: UInt16, answers: [DNSMessage.Record] = [], authorities: [DNSMessage.Record]) -> [UInt8] {
        let question = DNSMessage.Question(name: try! DomainName(name), type: .a)
        return DNSMessage(id: 0, flags: 0x8180 | rcode, questions: [question], answers: answers, authorities: authorities).encode()
    }

    @Test func theSOAOfTheNameOrAZoneAboveItIsKeptWithItsNegativeTTL() throws {
        let question = DNSMessage.Question(name: try DomainName("www.nope.hd.test"), type: .a)
        let apex = try DNSMessage.upstreamAnswer(
            decoding: Self.response("www.nope.hd.test", rcode: 3, authorities: [Self.soaRecord("HD.test", ttl: 300, minimum: 60)]),
            to: question, id: 0)
        #expect(apex.answer == .nxdomain(negativeTTL: 60))
        #expect(apex.authority == NegativeAuthority(zone: try DomainName("hd.test"), soa: Self.soa, ttl: 60))
        // The record's TTL when it is the smaller (RFC 2308 §5).
        let short = try DNSMessage.upstreamAnswer(
            decoding: Self.response("www.nope.hd.test", rcode: 0, authorities: [Self.soaRecord("nope.hd.test", ttl: 7)]),
            to: question, id: 0)
        #expect(short.answer == .nodata(negativeTTL: 7))
        #expect(short.authority?.ttl == 7 && short.authority?.zone.description == "nope.hd.test")
        // The name itself may be the apex.
        let own = try DNSMessage.upstreamAnswer(
            decoding: Self.response("www.nope.hd.test", rcode: 0, authorities: [Self.soaRecord("www.nope.hd.test")]), to: question, id: 0)
        #expect(own.authority?.zone == question.name)
    }

    @Test func anSOAForAnotherZoneIsNotKept() throws {
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        // Another zone, a sibling whose name ends alike, a name below the question's, another class.
        var chaos = Self.soaRecord("hd.test")
        chaos.recordClass = 3
        for authority in [Self.soaRecord("other.test"), Self.soaRecord("d.test"), Self.soaRecord("a.www.hd.test"), chaos] {
            let answer = try DNSMessage.upstreamAnswer(
                decoding: Self.response("www.hd.test", rcode: 3, authorities: [authority]), to: question, id: 0)
            #expect(answer.authority == nil, "\(authority.name) class \(authority.recordClass)")
        }
        // A CNAME to another zone whose target does not exist: the SOA is the target's zone's, which
        // says nothing about www.hd.test; and addresses never carry one.
        let cname = DNSMessage.Record(name: try DomainName("www.hd.test"), type: .cname, ttl: 300, data: .cname(try DomainName("x.other.test")))
        let chained = try DNSMessage.upstreamAnswer(
            decoding: Self.response("www.hd.test", rcode: 3, answers: [cname], authorities: [Self.soaRecord("other.test")]),
            to: question, id: 0)
        #expect(chained.answer == .nxdomain(negativeTTL: nil) && chained.authority == nil, "nor does it set the entry's life")
        let address = DNSMessage.Record(name: try DomainName("www.hd.test"), type: .a, ttl: 300, data: .address(IPAddress("198.18.0.1")!))
        let found = try DNSMessage.upstreamAnswer(
            decoding: Self.response("www.hd.test", rcode: 0, answers: [address], authorities: [Self.soaRecord("hd.test")]), to: question, id: 0)
        #expect(found.authority == nil)
    }

    @Test func isWithinComparesWholeLabels() throws {
        let name = try DomainName("a.b.hd.test")
        for zone in ["a.b.hd.test", "b.hd.test", "hd.test", "test", "."] { #expect(name.isWithin(try DomainName(zone)), "\(zone)") }
        for zone in ["d.test", "b.hd", "x.a.b.hd.test", "ab.hd.test", "hd.test.x"] { #expect(!name.isWithin(try DomainName(zone)), "\(zone)") }
    }

    func engine(_ upstream: ScriptedUpstream, negativeTTL: Duration = .seconds(300)) -> ResolverEngine {
        var options = ResolverOptions(timeout: .seconds(2))
        options.negativeTTL = negativeTTL
        return ResolverEngine(upstreams: [upstream], options: options, clock: clock)
    }

    func error(_ engine: ResolverEngine, _ host: String, type: AddressQuery = .a) async -> DNSError? {
        do {
            _ = try await engine.resolve(host, type: type)
            return nil
        } catch {
            return error
        }
    }

    @Test func theCachedNegativeAnswerKeepsItsSOAAndCountsItsTTLDown() async throws {
        let authority = NegativeAuthority(zone: try DomainName("hd.test"), soa: Self.soa, ttl: 60)
        let upstream = ScriptedUpstream(.denied(nxdomain: true, authority))
        let engine = engine(upstream)
        let first = await error(engine, "nope.hd.test")
        #expect(first?.code == .nxdomain && first?.authority == authority)
        clock.advance(by: .seconds(25))
        let second = await error(engine, "NOPE.hd.test.")
        #expect(upstream.queries == 1, "from the cache")
        #expect(second?.code == .nxdomain && second?.authority?.ttl == 35 && second?.authority?.soa == Self.soa)
        clock.advance(by: .milliseconds(34_500))
        #expect(await error(engine, "nope.hd.test")?.authority?.ttl == 1, "rounded up, never 0 while fresh")

        // NODATA, capped by the configured negative TTL; both families asked: the SOA still comes.
        let nodata = ScriptedUpstream(.denied(nxdomain: false, authority))
        let capped = self.engine(nodata, negativeTTL: .seconds(20))
        #expect(await error(capped, "www.hd.test", type: .both)?.authority?.ttl == 20, "no longer than the entry lives")
        clock.advance(by: .seconds(5))
        let cached = await error(capped, "www.hd.test", type: .both)
        #expect(cached?.code == .nodata && cached?.authority?.ttl == 15, "what remains of the 20 s entry")
        #expect(nodata.queries == 2)
    }

    @Test func theEntrysLifeComesFromTheSOAThatIsKeptAndNeverPassesTheCap() async throws {
        // F48-1: an SOA of another zone (TTL 0) first, then the zone's with a day's TTL.
        let question = DNSMessage.Question(name: try DomainName("mis.soa.test"), type: .a)
        let foreign = Self.soaRecord("other.zz", ttl: 0, minimum: 0)
        let wire = Self.response("mis.soa.test", rcode: 3, authorities: [foreign, Self.soaRecord("test", ttl: 86400, minimum: 86400)])
        let answer = try DNSMessage.upstreamAnswer(decoding: wire, to: question, id: 0)
        #expect(answer.answer == .nxdomain(negativeTTL: 86400) && answer.authority?.ttl == 86400, "one SOA sets both")
        // The engine caps the entry (negative_ttl), and the SOA handed on never outlives it.
        let authority = NegativeAuthority(zone: try DomainName("test"), soa: Self.soa, ttl: 86400)
        let capped = engine(ScriptedUpstream(.denied(nxdomain: true, authority)), negativeTTL: .seconds(30))
        #expect(await error(capped, "mis.soa.test")?.authority?.ttl == 30)
        // An entry over as it arrives (negative_ttl 0): the SOA goes with 0, not the day.
        let uncached = engine(ScriptedUpstream(.denied(nxdomain: true, authority)), negativeTTL: .zero)
        #expect(await error(uncached, "mis.soa.test")?.authority?.ttl == 0)
    }

    @Test func anUpstreamWithoutSOAGivesNone() async throws {
        let engine = engine(ScriptedUpstream(.nxdomain(soaMinimum: 60)))
        #expect(await error(engine, "nope.hd.test")?.authority == nil)
        #expect(await error(engine, "nope.hd.test")?.authority == nil)
    }

    @Test func theSOASurvivesASnapshotAndAHostileOneIsRefused() async throws {
        let authority = NegativeAuthority(zone: try DomainName("hd.test"), soa: Self.soa, ttl: 60)
        let first = engine(ScriptedUpstream(.denied(nxdomain: true, authority)))
        _ = await error(first, "nope.hd.test")
        let bytes = first.snapshot(wallMilliseconds: 1_000_000)
        let second = engine(ScriptedUpstream(.fail(.timeout)))
        #expect(try second.restore(bytes, wallMilliseconds: 1_010_000) == 1)
        let restored = await error(second, "nope.hd.test")
        #expect(restored?.code == .nxdomain && restored?.authority?.ttl == 50 && restored?.authority?.soa == Self.soa)

        // The same file with the zone swapped for one above none of its entry: refused whole.
        let zone = try DomainName("hd.test").wire
        let other = try DomainName("xx.test").wire
        let at = try #require(bytes.indices.first { bytes[$0] == UInt8(zone.count) && Array(bytes[($0 + 1)...].prefix(zone.count)) == zone })
        var hostile = bytes
        hostile.replaceSubrange((at + 1)..<(at + 1 + zone.count), with: other)
        #expect(throws: DNSError.self) { try self.engine(ScriptedUpstream(.fail(.timeout))).restore(hostile, wallMilliseconds: 1_010_000) }
        // Every truncation is refused, never a crash.
        for cut in stride(from: bytes.count - 1, to: 16, by: -1) {
            let cutShort = Array(bytes[..<cut])
            #expect(throws: DNSError.self) { try self.engine(ScriptedUpstream(.fail(.timeout))).restore(cutShort, wallMilliseconds: 1_010_000) }
        }
    }
}
