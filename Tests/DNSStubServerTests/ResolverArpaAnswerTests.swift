import DNSCore
import TestSupport
import Testing

@testable import DNSWire

/// `resolver.arpa` (RFC 9462) answered from the daemon's own records: the designations for
/// `_dns.resolver.arpa` SVCB, NODATA for its other types and for the zone's apex, NXDOMAIN below,
/// each authoritative with the zone's SOA when negative; nothing for names outside it.
@Suite struct ResolverArpaAnswerTests {
    let records = ResolverDiscovery.advertisement(name: try! DomainName("daemon.test"), doh: .init(port: 443), dot: .init(port: 853))

    func answer(_ name: String, type: UInt16, records: [ServiceBinding]? = nil) throws -> DNSMessage? {
        let query = try DNSQuery(Wire.query(name, type: type, edns: Wire.opt()))
        guard let answer = DNSAnswers.response(to: query, resolverArpa: records ?? self.records, ttl: 120) else { return nil }
        #expect(answer.minTTL == 120)
        return try DNSMessage(decoding: answer.bytes)
    }

    @Test func theDesignationsAnswerSVCB() throws {
        let message = try #require(try answer("_DNS.Resolver.ARPA", type: 64))
        #expect(message.flags & 0x000f == 0 && message.flags & 0x0400 != 0, "NOERROR, AA")
        let svcb = message.answers.filter { $0.type == .svcb }
        #expect(svcb.count == 2 && svcb.allSatisfy { $0.ttl == 120 })
        let decoded = try svcb.map { record -> ServiceBinding in
            guard case let .opaque(rdata) = record.data else { throw DNSError(.malformedResponse, "not opaque") }
            return try ServiceBinding(rdata: rdata)
        }
        #expect(decoded == records)
        #expect(message.authorities.isEmpty)
    }

    @Test func negativeAnswersCarryTheZonesSOA() throws {
        for (name, type, rcode) in [
            ("_dns.resolver.arpa", UInt16(1), UInt16(0)), ("_dns.resolver.arpa", 65, 0), ("resolver.arpa", 64, 0),
            ("other.resolver.arpa", 64, 3), ("a.b._dns.resolver.arpa", 1, 3),
        ] {
            let message = try #require(try answer(name, type: type))
            #expect(message.flags & 0x000f == rcode && message.flags & 0x0400 != 0, "\(name) \(type)")
            #expect(message.answers.filter { $0.type != .opt }.isEmpty, "\(name) \(type)")
            let soa = try #require(message.authorities.first, "\(name) \(type)")
            #expect(soa.type == .soa && soa.name == ResolverDiscovery.zone && soa.ttl == 120)
        }
        // No encrypted listener (or ddr: off): NODATA for the SVCB question too.
        let none = try #require(try answer("_dns.resolver.arpa", type: 64, records: []))
        #expect(none.flags & 0x000f == 0 && none.answers.filter { $0.type != .opt }.isEmpty && none.authorities.count == 1)
    }

    @Test func namesOutsideTheZoneAreNotAnsweredHere() throws {
        for name in ["myresolver.arpa", "arpa", "resolver.arpa.test", "_dns.example.test"] {
            #expect(try answer(name, type: 64) == nil, "\(name)")
        }
    }
}
