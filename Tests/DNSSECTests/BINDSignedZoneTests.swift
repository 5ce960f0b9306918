import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import TestSupport
import Testing

/// Interoperability with BIND 9.18's signer: the test environment's zones signed by `dnssec-policy`
/// (ECDSA P-256, RSA/SHA-256 2048, Ed25519; Scripts/env/testenv.sh), fetched with DO through the trusted
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
        let query = DNSMessage.validatingQuery(try DomainName(name), type)
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

    /// A fetch for the validator: DO and CD set, through the trusted DoH path.
    func fetcher(_ resolver: HTTPDNSResolver) -> DNSSECValidator.Fetch {
        { name, type in try DNSMessage(decoding: try await resolver.forward(DNSMessage.validatingQuery(name, type).encode())) }
    }

    @Test(arguments: ["ecdsa.sec.test", "rsa.sec.test", "ed.sec.test"])
    func theValidatorProvesBINDsAnswersFromAnAnchorAndFlagsForgeries(zone: String) async throws {
        let resolver = try resolver()
        let keyRecords = try await signedAnswers(zone, .dnskey, with: resolver).filter { $0.type == .dnskey }
        // A trust-anchor file as a user writes it: the zone's key in presentation format.
        let lines = keyRecords.compactMap { record -> String? in
            guard case .opaque(let rdata) = record.data, let key = try? DNSKEY(rdata: rdata) else { return nil }
            return "\(zone). 3600 IN DNSKEY \(key.flags) 3 \(key.algorithm) \(Data(key.publicKey).base64EncodedString()) ; BIND's key"
        }
        let anchors = try TrustAnchors(presentation: "; test anchors\n" + lines.joined(separator: "\n") + "\n")
        let validator = DNSSECValidator(anchors: anchors, fetch: fetcher(resolver))
        let now = UInt32(Date.now.timeIntervalSince1970)
        for name in ["www.\(zone)", "a.b.wild.\(zone)"] {
            let owner = try DomainName(name)
            _ = try await signedAnswers(name, .a, with: resolver)
            // The whole response: a wildcard answer needs its NSEC proof from the authority section.
            let response = try await fetcher(resolver)(owner, .a)
            #expect(await validator.validate(response, name: owner, type: .a, now: now) == .secure, "\(name)")
            // A lying trusted resolver: another address under the genuine signature.
            var forged = response
            if let index = forged.answers.firstIndex(where: { $0.type == .a }) { forged.answers[index].data = .address(IPAddress("203.0.113.66")!) }
            let status = await validator.validate(forged, name: owner, type: .a, now: now)
            #expect(status == .bogus("the signature does not verify"), "\(name): \(status)")
            // Signatures stripped: bogus under an anchor.
            var stripped = response
            stripped.answers.removeAll { $0.type == .rrsig }
            #expect(await validator.validate(stripped, name: owner, type: .a, now: now).name == "bogus")
        }
        // Outside every anchor: indeterminate, not secure and not bogus.
        let outside = DNSMessage(id: 0, flags: 0x8180, questions: [], answers: try await answers("www.hd.test", .a, with: resolver))
        #expect(await validator.validate(outside, name: try DomainName("www.hd.test"), type: .a, now: now).name == "indeterminate")
        // A DS anchor whose digest matches no key: bogus.
        let wrongDS = try TrustAnchors(presentation: "\(zone). IN DS 1 13 2 \(String(repeating: "ab", count: 32))")
        let www = DNSMessage(id: 0, flags: 0x8180, questions: [], answers: try await signedAnswers("www.\(zone)", .a, with: resolver))
        let misanchored = await DNSSECValidator(anchors: wrongDS, fetch: fetcher(resolver)).validate(
            www, name: try DomainName("www.\(zone)"), type: .a, now: now)
        #expect(misanchored.name == "bogus", "\(misanchored)")
        // The query budget is a bound: indeterminate, never a hang.
        var starved = validator
        starved.maxQueries = 0
        #expect(await starved.validate(www, name: try DomainName("www.\(zone)"), type: .a, now: now).name == "indeterminate")
    }

    @Test func trustAnchorFilesAreParsedStrictly() throws {
        let anchors = try TrustAnchors(
            presentation: """
                ; comment line
                sec.test. 3600 IN DS 40440 13 2 4B9A 0C1D
                sec.test. DNSKEY 257 3 15 l02Woi0iS8Aa25FQkUd9RMzZHJpBoRQwAQEX1SxZJA4=

                """)
        #expect(anchors.ds[try DomainName("sec.test")]?.first?.digest == [0x4B, 0x9A, 0x0C, 0x1D])
        #expect(anchors.keys[try DomainName("sec.test")]?.first?.algorithm == 15)
        #expect(throws: DNSSECFailure.self) { try TrustAnchors(presentation: "sec.test. IN A 192.0.2.1") }
        #expect(throws: DNSSECFailure.self) { try TrustAnchors(presentation: "sec.test. IN DS 1 13 2 XYZ") }
        #expect(throws: DNSSECFailure.self) { try TrustAnchors(presentation: "sec.test. IN DNSKEY 257 3 13 !!!") }
    }
}
