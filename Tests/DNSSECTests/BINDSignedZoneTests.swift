import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import TestSupport
import Testing

/// Interoperability with BIND 9.18's signer: the test environment's zones signed by `dnssec-policy`
/// (ECDSA P-256, RSA/SHA-256 2048, Ed25519; Scripts/testenv.sh), fetched with DO through the trusted
/// DoH path, verified by ``DNSSECVerifier``.
@Suite struct BINDSignedZoneTests {
    typealias Env = TestEnvironment

    func resolver() throws -> HTTPDNSResolver {
        try Env.requireRunning()
        return try HTTPDNSResolver(
            configuration: .init(upstreams: [try UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"])], caFile: Env.caFile),
            options: HTTPDNSOptions(timeout: .seconds(6)))
    }

    /// The answer section for `name`/`type`, asked with DO (EDNS, 4096 bytes).
    func answers(_ name: String, _ type: RecordType, with resolver: HTTPDNSResolver) async throws -> [DNSMessage.Record] {
        let opt = DNSMessage.Record(name: .root, type: .opt, recordClass: 4096, ttl: 0x0000_8000, data: .opaque([]))
        let query = DNSMessage(id: 0, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)], additionals: [opt])
        return try DNSMessage(decoding: try await resolver.forward(query.encode())).answers
    }

    /// BIND signs at start; a test that runs at once may have to wait a moment for the signatures.
    func signedAnswers(_ name: String, _ type: RecordType, with resolver: HTTPDNSResolver) async throws -> [DNSMessage.Record] {
        for _ in 0..<50 {
            let records = try await answers(name, type, with: resolver)
            if records.contains(where: { $0.type == .rrsig }) { return records }
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("\(name) \(type) never came back signed")
        return []
    }

    static func split(_ records: [DNSMessage.Record], _ type: RecordType) throws -> (rrset: [DNSMessage.Record], signature: RRSIG) {
        let rrset = records.filter { $0.type == type }
        let signatures = try records.compactMap { record -> RRSIG? in
            guard record.type == .rrsig, case .opaque(let rdata) = record.data else { return nil }
            return try RRSIG(rdata: rdata)
        }
        let signature = try #require(signatures.first { $0.typeCovered == type })
        return (rrset, signature)
    }

    @Test(arguments: [("ecdsa.sec.test", UInt8(13)), ("rsa.sec.test", 8), ("ed.sec.test", 15)])
    func bindsSignaturesVerify(zone: String, algorithm: UInt8) async throws {
        let resolver = try resolver()
        let (keyRecords, keySignature) = try Self.split(try await signedAnswers(zone, .dnskey, with: resolver), .dnskey)
        let keys = try keyRecords.map { record -> DNSKEY in
            guard case .opaque(let rdata) = record.data else { throw DNSSECFailure.malformed("DNSKEY data") }
            return try DNSKEY(rdata: rdata)
        }
        let key = try #require(keys.first { $0.keyTag == keySignature.keyTag })
        #expect(key.algorithm == algorithm)
        #expect(keySignature.signerName == (try DomainName(zone)))
        let now = UInt32(Date.now.timeIntervalSince1970)
        // The key set signs itself; then the data, a wildcard expansion included.
        try DNSSECVerifier.verify(keyRecords, signature: keySignature, key: key, now: now)
        for (name, type) in [("www.\(zone)", RecordType.a), ("www.\(zone)", .txt), ("a.b.wild.\(zone)", .a)] {
            let (rrset, signature) = try Self.split(try await signedAnswers(name, type, with: resolver), type)
            #expect(!rrset.isEmpty)
            let signer = try #require(keys.first { $0.keyTag == signature.keyTag })
            try DNSSECVerifier.verify(rrset, signature: signature, key: signer, now: now)
            if type == .a {
                // What a lying resolver would do: another address under the genuine signature.
                var forged = rrset
                forged[0].data = .address(IPAddress("203.0.113.66")!)
                #expect(throws: DNSSECFailure.badSignature) { try DNSSECVerifier.verify(forged, signature: signature, key: signer, now: now) }
            }
        }
    }
}
