import DNSCore
import DNSSEC
import Foundation
import TestSupport
import Testing

/// RRSIG and DS checks against signatures made by dnspython (an independent implementation;
/// `Scripts/make_dnssec_vectors.py`), one key per algorithm, plus tampering of every kind.
@Suite struct DNSSECVerifierTests {
    struct Vectors: Decodable {
        var inception: UInt32
        var expiration: UInt32
        var vectors: [Vector]
    }

    struct Vector: Decodable {
        var algorithm: String
        var number: UInt8
        var dnskey: String
        var key_tag: UInt16
        var ds: [String: String]
        var cases: [Case]
    }

    struct Case: Decodable {
        var owner: String
        var type: String
        var ttl: UInt32
        var rdatas: [String]
        var rrsig: String
    }

    static let loaded: Vectors = {
        let url = Bundle.module.url(forResource: "vectors", withExtension: "json", subdirectory: "Vectors")!
        return try! JSONDecoder().decode(Vectors.self, from: Data(contentsOf: url))
    }()

    static func bytes(_ hex: String) -> [UInt8] { Hex.bytes(hex) }

    static func rrset(_ test: Case) throws -> [DNSMessage.Record] {
        let type: RecordType = ["A": .a, "TXT": .txt, "DNSKEY": .dnskey][test.type]!
        return try test.rdatas.map { hex in
            let rdata = bytes(hex)
            let data: DNSMessage.RecordData = type == .a ? .address(IPAddress(bytes: rdata)!) : .opaque(rdata)
            return DNSMessage.Record(name: try DomainName(test.owner), type: type, ttl: test.ttl, data: data)
        }
    }

    /// Halfway through the signatures' validity.
    static var now: UInt32 { loaded.inception / 2 + loaded.expiration / 2 }

    @Test(arguments: loaded.vectors.map(\.algorithm))
    func everyAlgorithmVerifies(algorithm: String) throws {
        let vector = try #require(Self.loaded.vectors.first { $0.algorithm == algorithm })
        #expect(DNSSECAlgorithm(rawValue: vector.number) != nil)
        let key = try DNSKEY(rdata: Self.bytes(vector.dnskey))
        #expect(key.keyTag == vector.key_tag)
        #expect(key.isZoneKey && key.isSecureEntryPoint && !key.isRevoked)
        for test in vector.cases {
            let signature = try RRSIG(rdata: Self.bytes(test.rrsig))
            #expect(signature.signerName == (try DomainName("sec.test")))
            // Any order of the records: the canonical order is the verifier's business.
            try DNSSECVerifier.verify(try Self.rrset(test).reversed(), signature: signature, key: key, now: Self.now)
        }
        let owner = try DomainName("sec.test")
        for (name, number) in [("SHA1", UInt8(1)), ("SHA256", 2), ("SHA384", 4)] {
            let ds = DSRecord(keyTag: vector.key_tag, algorithm: vector.number, digestType: number, digest: Self.bytes(vector.ds[name]!))
            #expect(try DNSSECVerifier.matches(ds, key: key, owner: owner), "\(algorithm) DS \(name)")
            var wrong = ds
            wrong.digest[0] ^= 1
            #expect(try !DNSSECVerifier.matches(wrong, key: key, owner: owner))
            #expect(try !DNSSECVerifier.matches(ds, key: key, owner: try DomainName("other.test")))
        }
    }

    @Test func everyTamperingIsCaughtWithItsReason() throws {
        for vector in Self.loaded.vectors {
            let genuine = try DNSKEY(rdata: Self.bytes(vector.dnskey))
            let test = vector.cases[0]
            let records = try Self.rrset(test)
            let signature = try RRSIG(rdata: Self.bytes(test.rrsig))
            func failure(_ records: [DNSMessage.Record], _ signature: RRSIG, now: UInt32 = Self.now, key: DNSKEY? = nil) -> DNSSECFailure? {
                do {
                    try DNSSECVerifier.verify(records, signature: signature, key: key ?? genuine, now: now)
                    return nil
                } catch { return error }
            }
            // A changed address, a record removed, a record added, another owner.
            var changed = records
            changed[0].data = .address(IPAddress("192.0.2.99")!)
            #expect(failure(changed, signature) == .badSignature, "\(vector.algorithm)")
            #expect(failure(Array(records.dropLast()), signature) == .badSignature)
            #expect(
                failure(records + [DNSMessage.Record(name: records[0].name, type: .a, ttl: 300, data: .address(IPAddress("192.0.2.77")!))], signature)
                    == .badSignature)
            var moved = records
            for index in moved.indices { moved[index].name = try DomainName("mail.sec.test") }
            #expect(failure(moved, signature) == .badSignature)
            // The validity window, with 300 s of skew either side.
            #expect(
                failure(records, signature, now: Self.loaded.expiration + 301)
                    == .signatureExpired(expiration: Self.loaded.expiration, now: Self.loaded.expiration + 301))
            #expect(failure(records, signature, now: Self.loaded.expiration + 299) == nil)
            #expect(
                failure(records, signature, now: Self.loaded.inception - 301)
                    == .signatureNotYetValid(inception: Self.loaded.inception, now: Self.loaded.inception - 301))
            #expect(failure(records, signature, now: Self.loaded.inception - 299) == nil)
            // A signer that is not a parent of the owner; a key with another tag.
            var outside = records
            for index in outside.indices { outside[index].name = try DomainName("www.other.test") }
            if case .keyMismatch = failure(outside, signature) {
            } else {
                Issue.record("\(vector.algorithm): signer outside the owner's zone accepted")
            }
            var otherKeyBytes = Self.bytes(vector.dnskey)
            otherKeyBytes[otherKeyBytes.count - 1] ^= 0x55
            if case .keyMismatch = failure(records, signature, key: try DNSKEY(rdata: otherKeyBytes)) {
            } else {
                Issue.record("a key with another tag accepted")
            }
        }
    }

    /// Property: random bit flips in a signed RRset's data or its RRSIG never verify.
    @Test func randomBitFlipsNeverVerify() async throws {
        var random = SplitMix64(state: 4034)
        for vector in Self.loaded.vectors {
            let key = try DNSKEY(rdata: Self.bytes(vector.dnskey))
            for test in vector.cases {
                await Task.yield()
                for _ in 0..<40 {
                    var rdatas = test.rdatas.map(Self.bytes)
                    var rrsig = Self.bytes(test.rrsig)
                    if random.next() % 2 == 0 {
                        let which = Int(random.next() % UInt64(rdatas.count))
                        let bit = Int(random.next() % UInt64(rdatas[which].count * 8))
                        rdatas[which][bit / 8] ^= 1 << (bit % 8)
                    } else {
                        let bit = Int(random.next() % UInt64(rrsig.count * 8))
                        rrsig[bit / 8] ^= 1 << (bit % 8)
                    }
                    var flipped = test
                    flipped.rdatas = rdatas.map { $0.map { String(format: "%02x", $0) }.joined() }
                    guard let signature = try? RRSIG(rdata: rrsig), let records = try? Self.rrset(flipped) else { continue }
                    // A flip that only changes a letter's case in the signer's name is the same name
                    // (canonical form is lowercase): that signature is still good.
                    let original = try RRSIG(rdata: Self.bytes(test.rrsig))
                    if signature.signedPrefix == original.signedPrefix, signature.signature == original.signature,
                        rdatas == test.rdatas.map(Self.bytes)
                    {
                        continue
                    }
                    #expect(throws: DNSSECFailure.self, "\(vector.algorithm) \(test.type)") {
                        try DNSSECVerifier.verify(records, signature: signature, key: key, now: Self.now)
                    }
                }
            }
        }
    }

    @Test func malformedKeysAndSignaturesAreSpecificErrors() throws {
        #expect(throws: DNSSECFailure.malformed("a DNSKEY of 3 bytes")) { try DNSKEY(rdata: [1, 0, 3]) }
        #expect(throws: DNSSECFailure.malformed("DNSKEY protocol 2, not 3")) { try DNSKEY(rdata: [1, 0, 2, 8, 1]) }
        #expect(throws: DNSSECFailure.malformed("a compressed or extended label in a signer name")) {
            try RRSIG(rdata: [UInt8](repeating: 0, count: 18) + [0xC0, 0x0C, 1, 2])
        }
        // A 512-bit RSA key is refused for its size, before any signature work.
        let weak = [UInt8(3), 1, 0, 1] + [UInt8](repeating: 0xC5, count: 64)
        let key = try DNSKEY(rdata: [1, 0, 3, 8] + weak)
        let signature = try RRSIG(
            rdata: [0, 1, 8, 2, 0, 0, 1, 44, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0] + [UInt8(key.keyTag >> 8), UInt8(key.keyTag & 0xFF)] + [0]
                + [UInt8](repeating: 1, count: 64))
        let record = DNSMessage.Record(name: try DomainName("a.test"), type: .a, ttl: 300, data: .address(IPAddress("192.0.2.1")!))
        #expect(throws: DNSSECFailure.keyTooWeak(bits: 512)) { try DNSSECVerifier.verify([record], signature: signature, key: key, now: 100) }
        // An algorithm this validator does not verify (RSASHA1 = 5).
        let sha1Key = try DNSKEY(rdata: [1, 0, 3, 5] + weak)
        let sha1Signature = try RRSIG(
            rdata: [0, 1, 5, 2, 0, 0, 1, 44, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0] + [UInt8(sha1Key.keyTag >> 8), UInt8(sha1Key.keyTag & 0xFF)] + [
                0, 1,
            ])
        #expect(throws: DNSSECFailure.unsupportedAlgorithm(5)) {
            try DNSSECVerifier.verify([record], signature: sha1Signature, key: sha1Key, now: 100)
        }
    }
}

/// Replays the DNSSEC fuzzer's seeds and every crasher it found (Scripts/fuzz.sh dnssec): each input
/// decodes or is a ``DNSSECFailure``, never a trap.
@Suite struct DNSSECFuzzReplayTests {
    @Test func seedsAndCrashersDecodeOrFail() throws {
        let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Fuzz")
        var inputs: [[UInt8]] = []
        for folder in ["corpus-dnssec", "crashers/dnssec"] {
            let directory = fuzz.appendingPathComponent(folder)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            inputs += names.filter { !$0.hasPrefix(".") }.compactMap { try? Array(Data(contentsOf: directory.appendingPathComponent($0))) }
        }
        #expect(inputs.count >= 15)
        var decoded = 0
        for input in inputs {
            guard let selector = input.first else { continue }
            let rdata = Array(input.dropFirst())
            let owner = try DomainName("www.sig.test")
            switch selector % 5 {
            case 0: if (try? DNSKEY(rdata: rdata)) != nil { decoded += 1 }
            case 1: if (try? RRSIG(rdata: rdata)) != nil { decoded += 1 }
            case 2: if (try? DSRecord(rdata: rdata)) != nil { decoded += 1 }
            case 3: if (try? NSECRecord(owner: owner, rdata: rdata)) != nil { decoded += 1 }
            default:
                // As the fuzzer reads it: the owner's hash label, then the RDATA.
                let length = Int(rdata.first ?? 0) % 64
                guard length > 0, rdata.count > length else { continue }
                let label = String(decoding: rdata[1..<(1 + length)], as: UTF8.self)
                if (try? NSEC3Record(owner: try DomainName(label + ".sig.test"), rdata: Array(rdata[(1 + length)...]))) != nil { decoded += 1 }
            }
        }
        #expect(decoded >= 20, "the seeds are valid records")
    }
}
