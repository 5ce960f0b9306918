import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import TestSupport
import Testing

/// The validator over the signed tree under sig.test (Scripts/env/testenv.sh `sign_tree`): secure and
/// insecure delegations, NSEC and NSEC3 (opt-out) denial, wildcards, CNAME and DNAME across zones,
/// and zones broken on purpose — asked through BIND directly (authoritative: one zone per answer)
/// and through unbound (recursive: whole chains), with DO and CD, from the tree's one DS anchor.
@Suite struct SignedTreeTests {
    typealias Env = TestEnvironment

    static func resolver(_ url: String) throws -> HTTPDNSResolver {
        try Env.requireRunning()
        return try HTTPDNSResolver(
            configuration: .init(upstreams: [try UpstreamEndpoint.doh(url, bootstrap: ["127.0.0.1"])], caFile: Env.caFile),
            options: HTTPDNSOptions(timeout: .seconds(6)))
    }

    static func anchors() throws -> TrustAnchors {
        try TrustAnchors(presentation: String(contentsOfFile: Env.sigTreeAnchors, encoding: .utf8))
    }

    static func ask(_ resolver: HTTPDNSResolver) -> DNSSECValidator.Fetch {
        { name, type in try DNSMessage(decoding: try await resolver.forward(DNSMessage.validatingQuery(name, type).encode())) }
    }

    /// name, type, expected status, and whether BIND alone (no recursion) can answer it whole.
    static let table: [(String, RecordType, String, Bool)] = [
        ("www.sig.test", .a, "secure", true),
        ("x.wild.sig.test", .a, "secure", true),  // wildcard, NSEC proof of no exact match
        ("www.sig.test", .aaaa, "secure", true),  // NODATA, NSEC
        ("nx.sig.test", .a, "secure", true),  // NXDOMAIN, NSEC (name and wildcard)
        ("www.rsa.sig.test", .a, "secure", true),  // secure delegation, RSA/SHA-256
        ("www.n3.sig.test", .a, "secure", true),  // Ed25519, NSEC3 zone
        ("www.n3.sig.test", .txt, "secure", true),  // NODATA, NSEC3 match
        ("x.wild.n3.sig.test", .a, "insecure", true),  // wildcard whose next closer is opted out
        ("nx.n3.sig.test", .a, "insecure", true),  // NXDOMAIN under opt-out
        ("www.unsigned.n3.sig.test", .a, "insecure", true),  // unsigned delegation, NSEC3 opt-out
        ("www.insecure.sig.test", .a, "insecure", true),  // unsigned delegation, NSEC proves no DS
        ("www.badsig.sig.test", .a, "bogus", true),
        ("www.expired.sig.test", .a, "bogus", true),
        ("www.nokey.sig.test", .a, "bogus", true),
        ("alias.sig.test", .a, "secure", false),  // CNAME into the RSA child
        ("back.rsa.sig.test", .a, "secure", false),  // CNAME up into the parent
        ("www.dn.sig.test", .a, "secure", false),  // DNAME → synthesized CNAME
        ("out.sig.test", .a, "indeterminate", false),  // a secure CNAME out of the anchor's tree
        ("www.hd.test", .a, "indeterminate", true),  // no anchor covers it
    ]

    @Test func everyNameOfTheTreeGetsItsStatusThroughBINDAndThroughUnbound() async throws {
        let anchors = try Self.anchors()
        let now = UInt32(Date.now.timeIntervalSince1970)
        var report: [String] = []
        var wrong = 0
        for (server, url) in [("BIND", Env.dohA), ("unbound", Env.validatorDoH)] {
            let resolver = try Self.resolver(url)
            let validator = DNSSECValidator(anchors: anchors, fetch: Self.ask(resolver))
            for (name, type, expected, whole) in Self.table where whole || server == "unbound" {
                let owner = try DomainName(name)
                let response = try await Self.ask(resolver)(owner, type)
                let status = await validator.validate(response, name: owner, type: type, now: now)
                if status.name != expected { wrong += 1 }
                report.append(
                    "\(server) \(name) \(type): \(status.name) \(status.reason ?? "")\(status.name == expected ? "" : "  <- expected \(expected)")")
            }
        }
        #expect(wrong == 0, "\n\(report.joined(separator: "\n"))")
        // Each bogus zone for its own reason.
        let bind = try Self.resolver(Env.dohA)
        let validator = DNSSECValidator(anchors: anchors, fetch: Self.ask(bind))
        for (name, reason) in [
            ("www.badsig.sig.test", "the signature does not verify"), ("www.expired.sig.test", "the signature expired"),
            ("www.nokey.sig.test", "no DNSKEY of nokey.sig.test matches its DS"),
        ] {
            let owner = try DomainName(name)
            let status = await validator.validate(try await Self.ask(bind)(owner, .a), name: owner, type: .a, now: now)
            #expect(status.reason?.contains(reason) == true, "\(name): \(status)")
        }
    }

    /// doh-b serves a tampered copy of the signed tree: perfect TLS, the genuine keys and
    /// signatures, one address changed. Validation catches it.
    @Test func aTamperedCopyBehindPerfectTLSIsBogus() async throws {
        let anchors = try Self.anchors()
        let resolver = try Self.resolver(Env.dohB)
        let owner = try DomainName("www.sig.test")
        let response = try await Self.ask(resolver)(owner, .a)
        #expect(response.answers.contains { $0.data == .address(IPAddress("198.51.100.66")!) })
        let status = await DNSSECValidator(anchors: anchors, fetch: Self.ask(resolver)).validate(
            response, name: owner, type: .a, now: UInt32(Date.now.timeIntervalSince1970))
        #expect(status == .bogus("the signature does not verify"), "\(status)")
        // The untouched names of the same copy still validate: the keys are genuine.
        let rsa = try DomainName("www.rsa.sig.test")
        let genuine = await DNSSECValidator(anchors: anchors, fetch: Self.ask(resolver)).validate(
            try await Self.ask(resolver)(rsa, .a), name: rsa, type: .a, now: UInt32(Date.now.timeIntervalSince1970))
        #expect(genuine == .secure)
    }

    /// Stripping proofs: a wildcard answer without its NSEC, a negative answer without its
    /// NSEC, a denial moved to another name — never secure.
    @Test func strippedOrMisplacedProofsAreNeverSecure() async throws {
        let anchors = try Self.anchors()
        let resolver = try Self.resolver(Env.dohA)
        let validator = DNSSECValidator(anchors: anchors, fetch: Self.ask(resolver))
        let now = UInt32(Date.now.timeIntervalSince1970)
        // (Under NSEC3 opt-out the validator's own DS walk finds the opted-out span again: insecure, as with the proof.)
        for (name, type, expected) in [
            ("x.wild.sig.test", RecordType.a, "bogus"), ("nx.sig.test", .a, "bogus"), ("www.sig.test", .aaaa, "bogus"),
            ("nx.n3.sig.test", .a, "insecure"),
        ] {
            let owner = try DomainName(name)
            var response = try await Self.ask(resolver)(owner, type)
            response.authorities.removeAll { $0.type == .nsec || $0.type == .nsec3 || ($0.type == .rrsig && $0.name != owner) }
            let status = await validator.validate(response, name: owner, type: type, now: now)
            #expect(status.name == expected, "\(name) \(type) without its proof: \(status)")
        }
        // The NXDOMAIN proof of one name replayed for another that exists: bogus.
        let replay = try await Self.ask(resolver)(try DomainName("nx.sig.test"), .a)
        let status = await validator.validate(replay, name: try DomainName("www.sig.test"), type: .a, now: now)
        #expect(status.name == "bogus", "\(status)")
    }

    /// The time bound: a chain that takes longer than `maxDuration` to fetch is indeterminate with
    /// that reason, not a hang and not bogus.
    @Test func aSlowChainIsIndeterminateWhenItsTimeRunsOut() async throws {
        let resolver = try Self.resolver(Env.dohA)
        let slow: DNSSECValidator.Fetch = { name, type in
            try await Task.sleep(for: .milliseconds(60))
            return try await Self.ask(resolver)(name, type)
        }
        var validator = DNSSECValidator(anchors: try Self.anchors(), fetch: slow)
        validator.maxDuration = .milliseconds(100)
        let owner = try DomainName("www.rsa.sig.test")
        let status = await validator.validate(
            try await Self.ask(resolver)(owner, .a), name: owner, type: .a, now: UInt32(Date.now.timeIntervalSince1970))
        #expect(status.name == "indeterminate" && status.reason?.contains("took longer than") == true, "\(status)")
        validator.maxDuration = .seconds(5)
        #expect(
            await validator.validate(try await Self.ask(resolver)(owner, .a), name: owner, type: .a, now: UInt32(Date.now.timeIntervalSince1970))
                == .secure)
    }

    /// A property: random bit flips anywhere in a signed response are never `secure` with other
    /// data than the signed data (a flip in a TTL, the header or padding may leave it secure —
    /// TTLs are not signed — but then the addresses are the genuine ones).
    @Test func randomBitFlipsInSignedResponsesAreNeverSecureWithOtherData() async throws {
        let anchors = try Self.anchors()
        let resolver = try Self.resolver(Env.dohA)
        let cache = DNSSECChainCache()
        let validator = DNSSECValidator(anchors: anchors, cache: cache, fetch: Self.ask(resolver))
        let now = UInt32(Date.now.timeIntervalSince1970)
        var generator = SplitMix64(state: 0x5EC0_F11B)
        var flippedSecure = 0
        for name in ["www.sig.test", "x.wild.sig.test", "www.n3.sig.test"] {
            let owner = try DomainName(name)
            let original = try await Self.ask(resolver)(owner, .a)
            #expect(await validator.validate(original, name: owner, type: .a, now: now) == .secure)
            let genuine = Set(original.answers.filter { $0.type == .a }.map(\.data))
            let wire = original.encode()
            for flip in 0..<400 {
                if flip % 20 == 0 { await Task.yield() }  // CPU-bound: leave the cooperative threads to others now and then
                var bytes = wire
                let bit = Int.random(in: 0..<(bytes.count * 8), using: &generator)
                bytes[bit / 8] ^= UInt8(1 << (bit % 8))
                guard let mutated = try? DNSMessage(decoding: bytes) else { continue }
                let status = await validator.validate(mutated, name: owner, type: .a, now: now)
                guard status == .secure else { continue }
                flippedSecure += 1
                let addresses = Set(mutated.answers.filter { $0.type == .a && $0.name == owner }.map(\.data))
                #expect(addresses == genuine, "\(name): bit \(bit) flipped and still secure with \(addresses)")
            }
        }
        // Most flips land in signed bytes; the ones that stayed secure were in unsigned fields.
        #expect(flippedSecure < 400)
    }
}
