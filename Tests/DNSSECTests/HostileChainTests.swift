import Crypto
import DNSCore
import Foundation
import Testing

@testable import DNSSEC

/// Hostile signed data from an upstream, without a server: a zone whose key the test makes, and
/// responses built to cost the validator as much as possible. The answer is a bounded status,
/// quickly — never a hang, never secure.
@Suite struct HostileChainTests {
    let zone = DomainName(uncheckedWire: [1, 0x6b, 4, 0x74, 0x65, 0x73, 0x74, 0])  // k.test
    let owner = DomainName(uncheckedWire: [3, 0x77, 0x77, 0x77, 1, 0x6b, 4, 0x74, 0x65, 0x73, 0x74, 0])  // www.k.test
    let key = P256.Signing.PrivateKey()
    let now = UInt32(Date.now.timeIntervalSince1970)

    var dnskey: DNSKEY { try! DNSKEY(rdata: [0x01, 0x01, 3, 13] + Array(key.publicKey.rawRepresentation)) }

    func record(_ name: DomainName, _ type: RecordType, _ rdata: [UInt8]) -> DNSMessage.Record {
        DNSMessage.Record(name: name, type: type, ttl: 300, data: type == .a ? .address(IPAddress(bytes: rdata)!) : .opaque(rdata))
    }

    /// An RRSIG over `rrset` by the test's key; `garbage` makes its signature bytes random.
    func signature(over rrset: [DNSMessage.Record], labels: UInt8, garbage: Bool = false) throws -> DNSMessage.Record {
        let type = rrset[0].type.rawValue
        var prefix: [UInt8] = [UInt8(type >> 8), UInt8(type & 0xff), 13, labels, 0, 0, 1, 44]
        for value in [now &+ 86_400, now &- 3_600] {
            prefix += [UInt8(value >> 24), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
        }
        prefix += [UInt8(dnskey.keyTag >> 8), UInt8(dnskey.keyTag & 0xff)] + zone.wire
        let unsigned = try RRSIG(rdata: prefix + [UInt8](repeating: 1, count: 64))
        let data = DNSSECVerifier.signedData(rrset, signature: unsigned)
        let bytes = garbage ? (0..<64).map { _ in UInt8.random(in: 0...255) } : Array(try key.signature(for: data).rawRepresentation)
        return record(rrset[0].name, .rrsig, prefix + bytes)
    }

    func validator(answers: @escaping @Sendable () -> [DNSMessage.Record]) throws -> DNSSECValidator {
        var anchors = TrustAnchors()
        anchors.keys[zone] = [dnskey]
        let keySet = [record(zone, .dnskey, dnskey.rdata)]
        let keyResponse = DNSMessage(id: 0, flags: 0x8180, questions: [], answers: keySet + [try signature(over: keySet, labels: 2)])
        return DNSSECValidator(anchors: anchors) { _, type in
            guard type == .dnskey else { return DNSMessage(id: 0, flags: 0x8180, questions: [], answers: answers()) }
            return keyResponse
        }
    }

    @Test func aGoodSignatureAmongAFewBadOnesIsSecure() async throws {
        let rrset = [record(owner, .a, [192, 0, 2, 1])]
        var answers = rrset
        for _ in 0..<4 { answers.append(try signature(over: rrset, labels: 3, garbage: true)) }
        answers.append(try signature(over: rrset, labels: 3))
        let response = DNSMessage(id: 0, flags: 0x8180, questions: [], answers: answers)
        #expect(await (try validator { [] }).validate(response, name: owner, type: .a, now: now) == .secure)
    }

    /// KeyTrap (CVE-2023-50387): 200 RRSIGs naming the zone's key, none valid. The
    /// validator stops after its budget of checks.
    @Test func manyBadSignaturesStopAtTheCheckBudget() async throws {
        let rrset = [record(owner, .a, [192, 0, 2, 1])]
        var answers = rrset
        for _ in 0..<200 { answers.append(try signature(over: rrset, labels: 3, garbage: true)) }
        let response = DNSMessage(id: 0, flags: 0x8180, questions: [], answers: answers)
        let started = ContinuousClock.now
        let status = await (try validator { [] }).validate(response, name: owner, type: .a, now: now)
        let elapsed = ContinuousClock.now - started
        #expect(status.name == "indeterminate" && status.reason?.contains("signature checks") == true, "\(status)")
        #expect(elapsed < .milliseconds(500), "\(elapsed)")
        // Without the bound all 200 would be checked: the same response with a bound above it is bogus.
        var unbounded = try validator { [] }
        unbounded.maxSignatureChecks = 10_000
        #expect(await unbounded.validate(response, name: owner, type: .a, now: now).name == "bogus")
    }

    /// NSEC3 records with absurd iteration counts in a denial: indeterminate, without hashing.
    @Test func anNSEC3DenialWithHugeIterationsIsNotComputed() async throws {
        let hash = NSEC3Record.hash(owner, salt: [], iterations: 0)
        let label = Array("00000000000000000000000000000000".utf8)
        let nsec3Owner = DomainName(uncheckedWire: [32] + label + zone.wire)
        let nsec3 = [record(nsec3Owner, .nsec3, [1, 0, 0xff, 0xff, 0, 20] + hash + [0, 1, 0x40])]
        let response = DNSMessage(
            id: 0, flags: 0x8183, questions: [], answers: [], authorities: nsec3 + [try signature(over: nsec3, labels: 3)])
        let started = ContinuousClock.now
        let status = await (try validator { [] }).validate(response, name: owner, type: .a, now: now)
        #expect(status.name == "indeterminate" && status.reason?.contains("65535 iterations") == true, "\(status)")
        #expect(ContinuousClock.now - started < .milliseconds(500))
    }
}
