import DNSCore
import Foundation
import TestSupport
import Testing

@testable import DNSSEC
@testable import HTTPDNS

/// Forged but well-formed DNSSEC answers, each built from genuine signed data of the test tree
/// (Scripts/env/testenv.sh `sign_tree`, asked of BIND with DO and CD): what an upstream that lies, or an
/// on-path forger of the system's DNS, holds without any zone's key. None may validate `secure`.
///
/// Every case here was `secure` before the fix it names (docs/threat-model.md F7, F13): the wrap-around NSEC
/// of another zone, a parent's NSEC at a cut for the child's data, a child's apex NSEC for DS, a
/// genuine wildcard replayed for an existing name, another zone's NSEC3 chain for an expansion,
/// and an extra address beside a genuine signed RRset.
@Suite struct ForgedProofTests {
    typealias Env = TestEnvironment

    let now = UInt32(Date.now.timeIntervalSince1970)

    func name(_ text: String) throws -> DomainName { try DomainName(text) }

    func bind() throws -> (HTTPDNSResolver, DNSSECValidator) {
        let resolver = try SignedTreeTests.resolver(Env.dohA)
        return (resolver, DNSSECValidator(anchors: try SignedTreeTests.anchors(), fetch: SignedTreeTests.ask(resolver)))
    }

    /// A response to `owner` `type` with the given sections: what the forger sends.
    func forged(
        _ owner: DomainName, _ type: RecordType, rcode: UInt16 = 0, answers: [DNSMessage.Record] = [], authorities: [DNSMessage.Record]
    )
        -> DNSMessage
    {
        DNSMessage(id: 0, flags: 0x8180 | rcode, questions: [.init(name: owner, type: type)], answers: answers, authorities: authorities)
    }

    func expectNotSecure(_ status: DNSSECStatus, _ what: String) {
        #expect(status.name == "bogus", "\(what): \(status.name) \(status.reason ?? "")")
    }

    @Test func anotherZonesWrapAroundNSECDeniesNothing() async throws {
        let (resolver, validator) = try bind()
        // The last name of rsa.sig.test sorts before zzzz: its wrap-around NSEC (next = the apex).
        let genuine = try await SignedTreeTests.ask(resolver)(try name("zzzz.rsa.sig.test"), .a)
        #expect(genuine.responseCode == .nameError)
        let wraps = genuine.authorities.contains { record in
            guard record.type == .nsec, case .opaque(let rdata) = record.data, let nsec = try? NSECRecord(owner: record.name, rdata: rdata) else {
                return false
            }
            return nsec.next == (try? name("rsa.sig.test"))
        }
        #expect(wraps, "BIND's proof holds rsa.sig.test's wrap-around NSEC")
        let target = try name("www.sig.test")
        let response = forged(target, .a, rcode: 3, authorities: genuine.authorities)
        expectNotSecure(await validator.validate(response, name: target, type: .a, now: now), "NXDOMAIN for www.sig.test by rsa's last NSEC")
        // The same records as a NODATA.
        let nodata = forged(target, .a, authorities: genuine.authorities)
        expectNotSecure(await validator.validate(nodata, name: target, type: .a, now: now), "NODATA for www.sig.test by rsa's last NSEC")
    }

    @Test func aGenuineWildcardReplayedForAnExistingNameIsNotSecure() async throws {
        let (resolver, validator) = try bind()
        let ask = SignedTreeTests.ask(resolver)
        let expansion = try await ask(try name("x.wild.sig.test"), .a)
        let truth = try await ask(try name("real.wild.sig.test"), .a)
        #expect(truth.answers.contains { $0.type == .a && $0.data == .address(IPAddress("192.0.2.18")!) }, "real.wild.sig.test exists")
        let target = try name("real.wild.sig.test")
        // The wildcard's RRset and RRSIG (labels 3), renamed to the target as an expansion is.
        let replayed = expansion.answers.map { record in
            DNSMessage.Record(name: target, type: record.type, recordClass: record.recordClass, ttl: record.ttl, data: record.data)
        }
        let wrapAround = try await ask(try name("zzzz.rsa.sig.test"), .a).authorities
        for (proof, why) in [(expansion.authorities, "the expansion's own NSEC"), (wrapAround, "rsa.sig.test's wrap-around NSEC")] {
            let response = forged(target, .a, answers: replayed, authorities: proof)
            expectNotSecure(await validator.validate(response, name: target, type: .a, now: now), "wildcard replayed for real.wild with \(why)")
        }
    }

    @Test func theParentsNSECAtACutSaysNothingOfTheChildsData() async throws {
        let (resolver, validator) = try bind()
        // rsaa.sig.test sorts right after the cut at rsa.sig.test: the parent's NSEC there covers it.
        let genuine = try await SignedTreeTests.ask(resolver)(try name("rsaa.sig.test"), .a)
        let cut = try name("rsa.sig.test")
        #expect(genuine.authorities.contains { $0.name == cut && $0.type == .nsec }, "the parent's NSEC at the cut")
        let response = forged(cut, .soa, authorities: genuine.authorities)
        expectNotSecure(await validator.validate(response, name: cut, type: .soa, now: now), "NODATA for the child's SOA by the parent's NSEC")
        let apexA = forged(cut, .dnskey, authorities: genuine.authorities)
        expectNotSecure(await validator.validate(apexA, name: cut, type: .dnskey, now: now), "NODATA for the child's DNSKEY by the parent's NSEC")
    }

    @Test func theChildsApexNSECCannotDenyItsDS() async throws {
        let (resolver, validator) = try bind()
        let cut = try name("rsa.sig.test")
        // BIND answers an NSEC query at the apex from the child: SOA, NS, DNSKEY — no DS.
        let apex = try await SignedTreeTests.ask(resolver)(cut, .nsec)
        #expect(apex.answers.contains { $0.type == .nsec }, "the child's apex NSEC")
        let response = forged(cut, .ds, authorities: apex.answers)
        expectNotSecure(await validator.validate(response, name: cut, type: .ds, now: now), "no DS at rsa.sig.test by the child's apex NSEC")
    }

    /// The upstream answers rsa.sig.test's DS query with the child's own apex NSEC ("no DS": the
    /// child would be unsigned) and www.rsa.sig.test with an unsigned forged address. The child's
    /// key cannot vouch for its own DS: bogus at once, not a chain that loops to the depth bound
    /// (which was `indeterminate`, and `require` let that through).
    @Test func aChildCannotDenyItsOwnDSToLookUnsigned() async throws {
        let resolver = try SignedTreeTests.resolver(Env.dohA)
        let ask = SignedTreeTests.ask(resolver)
        let cut = try name("rsa.sig.test")
        let apex = try await ask(cut, .nsec)
        let forgedDS = forged(cut, .ds, authorities: apex.answers)
        let validator = DNSSECValidator(anchors: try SignedTreeTests.anchors()) { owner, type in
            owner == cut && type == .ds ? forgedDS : try await ask(owner, type)
        }
        let target = try name("www.rsa.sig.test")
        let unsigned = forged(
            target, .a, answers: [.init(name: target, type: .a, ttl: 300, data: .address(IPAddress("127.0.0.66")!))], authorities: [])
        let status = await validator.validate(unsigned, name: target, type: .a, now: now)
        expectNotSecure(status, "an unsigned address under a DS the child denied itself")
        #expect(status.reason?.contains("longer than") == false, "\(status)")
    }

    /// Under `require` a chain that cannot be completed (here: every DNSKEY answer dropped) is bogus;
    /// under `report` it stays `indeterminate`, the label for "could not decide".
    @Test func anUnfinishableChainIsBogusWhenValidationIsRequired() async throws {
        let resolver = try SignedTreeTests.resolver(Env.dohA)
        let ask = SignedTreeTests.ask(resolver)
        let target = try name("www.sig.test")
        let response = try await ask(target, .a)
        var validator = DNSSECValidator(anchors: try SignedTreeTests.anchors()) { owner, type in
            if type == .dnskey { throw DNSError(.timeout, "dropped by the forger") }
            return try await ask(owner, type)
        }
        #expect(await validator.validate(response, name: target, type: .a, now: now).name == "indeterminate")
        validator.undecidedIsBogus = true
        expectNotSecure(await validator.validate(response, name: target, type: .a, now: now), "DNSKEY dropped under require")
    }

    /// The addresses used must be the RRset the validator proved, not every A in the answer: an
    /// extra, unsigned record of another owner beside a genuine signed set proves nothing.
    @Test func anAddressBesideTheSignedRRsetIsNotSigned() async throws {
        let (resolver, _) = try bind()
        let target = try name("www.sig.test")
        var response = try await SignedTreeTests.ask(resolver)(target, .a)
        response.answers.append(.init(name: try name("forged.sig.test"), type: .a, ttl: 300, data: .address(IPAddress("127.0.0.66")!)))
        let used = Resolution(
            host: "www.sig.test", addresses: [ResolvedAddress(ip: IPAddress("127.0.0.66")!, ttl: 300)], source: .doh, upstream: Env.dohA,
            elapsed: .zero, expiresAt: resolver.clock.now + .seconds(300))
        let settings = DNSSECSettings(policy: .require, anchors: try SignedTreeTests.anchors())
        let status = await resolver.dnssecStatus(of: used, settings: settings, signed: [.a: response])
        expectNotSecure(status, "127.0.0.66 beside www.sig.test's signed A")
        // The genuine address with the same message is secure: the check is on the address, not the extra record.
        let genuine = Resolution(
            host: "www.sig.test", addresses: [ResolvedAddress(ip: IPAddress("192.0.2.11")!, ttl: 300)], source: .doh, upstream: Env.dohA,
            elapsed: .zero, expiresAt: resolver.clock.now + .seconds(300))
        #expect(await resolver.dnssecStatus(of: genuine, settings: settings, signed: [.a: response]) == .secure)
    }

    // MARK: Without a server

    /// An NSEC3 record of `zone` whose owner hash is all zeros and next hash all ones: it covers
    /// every hash there is.
    func coveringNSEC3(zone: String) throws -> NSEC3Record {
        let ownerLabel = String(repeating: "0", count: 32)  // 20 zero bytes in base32hex
        let rdata: [UInt8] = [1, 0, 0, 0, 0, 20] + [UInt8](repeating: 0xff, count: 20) + [0, 1, 0x40]
        return try NSEC3Record(owner: try name("\(ownerLabel).\(zone)"), rdata: rdata)
    }

    @Test func anExpansionIsProvenOnlyByTheNSEC3ChainOfItsOwnZone() throws {
        let other = try coveringNSEC3(zone: "other.test")
        let expanded = try name("www.wild.k.test")
        #expect(throws: DNSSECFailure.self, "other.test's chain for a k.test expansion") {
            try Denial.proveExpansion(of: expanded, sourceLabels: 3, nsec: [], nsec3: [other])
        }
        // Its own zone's chain proves it (the record covers every hash).
        let own = try coveringNSEC3(zone: "k.test")
        #expect(try Denial.proveExpansion(of: expanded, sourceLabels: 3, nsec: [], nsec3: [other, own]) == false)
        // A source (wildcard) above the zone's apex is not the zone's to expand.
        #expect(throws: DNSSECFailure.self) { try Denial.proveExpansion(of: expanded, sourceLabels: 1, nsec: [], nsec3: [own]) }
    }

    @Test func theDeepestNSEC3ZoneHoldingTheNameIsTheOneThatSpeaks() throws {
        let parent = try coveringNSEC3(zone: "k.test")
        let child = try coveringNSEC3(zone: "c.k.test")
        // A parent's chain cannot deny a name in the child (its records there would be at the cut).
        #expect(throws: DNSSECFailure.self) { try Denial.prove(try name("www.c.k.test"), type: .a, nsec: [], nsec3: [parent]) }
        #expect(Denial.closestZone(of: try name("www.c.k.test"), type: .a, in: [parent, child])?.parameters.zone == (try name("c.k.test")))
        // DS at the child's apex is the parent's to deny.
        #expect(Denial.closestZone(of: try name("c.k.test"), type: .ds, in: [parent, child])?.parameters.zone == (try name("k.test")))
    }

    @Test func aWrapAroundNSECCoversOnlyNamesInsideItsZone() throws {
        // The last NSEC of b.test: owner z.b.test, next b.test (the apex).
        let last = try NSECRecord(owner: try name("z.b.test"), rdata: try name("b.test").wire + [0, 1, 0x40])
        #expect(last.covers(try name("zz.b.test")))
        #expect(last.covers(try name("a.zz.b.test")))
        #expect(!last.covers(try name("c.test")), "a sibling zone sorting after b.test")
        #expect(!last.covers(try name("www.test")))
        #expect(!last.covers(try name("b.test")), "the apex itself")
        #expect(!last.covers(try name("a.test")), "a name before the zone")
    }

    @Test func cutSideRecordsProveOnlyTheirSidesTypes() throws {
        let cut = try name("c.k.test")
        // The parent's NSEC at the cut: NS, DS, RRSIG, NSEC.
        let parentSide = try NSECRecord(owner: cut, rdata: try name("d.k.test").wire + [0, 6, 0x20, 0, 0, 0, 0, 0x13])
        #expect(throws: DNSSECFailure.self) { try Denial.prove(cut, type: .soa, nsec: [parentSide], nsec3: []) }
        #expect(throws: DNSSECFailure.self) { try Denial.prove(cut, type: .a, nsec: [parentSide], nsec3: []) }
        // The child's apex NSEC: A, NS, SOA, RRSIG, NSEC, DNSKEY — it cannot deny DS.
        let apex = try NSECRecord(owner: cut, rdata: try name("www.c.k.test").wire + [0, 7, 0x62, 0, 0, 0, 0, 0x03, 0x80])
        #expect(throws: DNSSECFailure.self) { try Denial.prove(cut, type: .ds, nsec: [apex], nsec3: []) }
        #expect(try Denial.prove(cut, type: .txt, nsec: [apex], nsec3: []) == .noData(delegation: false))
    }
}
