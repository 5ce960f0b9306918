import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import TestSupport
import Testing

/// The resolver with `dnssec: report|require` (Resolution.dnssec, the memo, bogus answers not
/// kept) against the signed tree served by BIND (doh-a) and its tampered copy (doh-b).
@Suite struct DNSSECResolverTests {
    typealias Env = TestEnvironment

    static func resolver(_ url: String, _ policy: DNSSECPolicy) throws -> HTTPDNSResolver {
        try Env.requireRunning()
        let anchors = try TrustAnchors(presentation: String(contentsOfFile: Env.sigTreeAnchors, encoding: .utf8))
        return try HTTPDNSResolver(
            configuration: .init(
                upstreams: [try UpstreamEndpoint.doh(url, bootstrap: ["127.0.0.1"])], caFile: Env.caFile,
                dnssec: DNSSECSettings(policy: policy, anchors: anchors)),
            options: HTTPDNSOptions(timeout: .seconds(6), allowPrivate: true))
    }

    @Test func reportLabelsEveryAnswerAndACacheHitReusesTheStatus() async throws {
        let resolver = try Self.resolver(Env.dohA, .report)
        let first = try await resolver.resolve("www.sig.test", type: .a)
        #expect(first.dnssec == .secure)
        #expect(resolver.dnssecValidations == 1)
        let hit = try await resolver.resolve("www.sig.test", type: .a)
        #expect(hit.source == .cache && hit.dnssec == .secure)
        #expect(resolver.dnssecValidations == 1, "a cache hit is labelled from the memo, not validated again")
        #expect(resolver.resolveWithoutWaiting("www.sig.test", type: .a)?.dnssec == .secure)
        // report never refuses: bogus is a label.
        let bogus = try await resolver.resolve("www.nokey.sig.test", type: .a)
        #expect(bogus.dnssec?.isBogus == true, "\(String(describing: bogus.dnssec))")
        // A proven NXDOMAIN says so.
        await #expect {
            try await resolver.resolve("nx.sig.test", type: .a)
        } throws: { error in
            (error as? DNSError)?.code == .nxdomain && (error as? DNSError)?.dnssec == .secure
        }
        // Off: no label at all.
        #expect(try await Self.resolver(Env.dohA, .off).resolve("www.sig.test", type: .a).dnssec == nil)
    }

    @Test func requireRefusesBogusAnswersAndDoesNotKeepThem() async throws {
        let resolver = try Self.resolver(Env.dohA, .require)
        for attempt in 1...2 {
            await #expect {
                try await resolver.resolve("www.nokey.sig.test", type: .a)
            } throws: { error in
                (error as? DNSError)?.code == .dnssecBogus
            }
            // Dropped from the cache: the next lookup asks the upstream again; the same bogus
            // answer is known from the memo (for at most a minute) rather than validated again.
            #expect(resolver.cachedResolution(for: "www.nokey.sig.test", type: .a) == nil)
            #expect(resolver.dnssecValidations == 1, "attempt \(attempt)")
        }
        #expect(try await resolver.resolve("www.insecure.sig.test", type: .a).dnssec == .insecure)
        // The lying trusted resolver: doh-b's tampered copy of the tree.
        let lying = try Self.resolver(Env.dohB, .require)
        await #expect {
            try await lying.resolve("www.sig.test", type: .a)
        } throws: { error in
            (error as? DNSError)?.code == .dnssecBogus && (error as? DNSError)?.message.contains("does not verify") == true
        }
    }
}
