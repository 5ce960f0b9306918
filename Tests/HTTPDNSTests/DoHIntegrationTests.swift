import DNSCore
import Foundation
import TestSupport
import Testing

@testable import HTTPDNS

/// Against the real servers of Scripts/env/testenv.sh: BIND 9.18 DoH (doh-a, doh-b), nginx as a broken
/// resolver and as the JSON API. Everything is on loopback; TLS is verified with the test CA.
@Suite(.serialized) struct DoHIntegrationTests {
    typealias Env = TestEnvironment

    func resolver(
        _ upstreams: [UpstreamEndpoint], timeout: Duration = .seconds(3), allowPrivate: Bool = false,
        caFile: String? = Env.caFile
    ) throws -> HTTPDNSResolver {
        try Env.requireRunning()
        var options = HTTPDNSOptions(timeout: timeout, allowPrivate: allowPrivate)
        options.minTTL = .zero
        return try HTTPDNSResolver(configuration: .init(upstreams: upstreams, caFile: caFile), options: options)
    }

    static let dohA = try! UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"])
    static let dohAPost = try! UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"], method: .post)
    static let dohAv6 = try! UpstreamEndpoint.doh(Env.dohA, bootstrap: ["::1"])
    static let dohB = try! UpstreamEndpoint.doh(Env.dohB, bootstrap: ["127.0.0.1"])
    static let json = try! UpstreamEndpoint.json(Env.jsonAPI, bootstrap: [Env.hostileAddress])
    static func hostile(_ path: String) -> UpstreamEndpoint {
        try! .doh(Env.hostile(path), bootstrap: [Env.hostileAddress])
    }

    @Test(arguments: [dohA, dohAPost, dohAv6, dohB, json])
    func resolvesBothFamiliesWithTTLs(upstream: UpstreamEndpoint) async throws {
        let resolution = try await resolver([upstream]).resolve("www.hd.test")
        #expect(resolution.addresses.map(\.ip.description) == ["2001:2::10", "198.18.0.10"])
        #expect(resolution.addresses.allSatisfy { $0.ttl == 300 })
        #expect(resolution.upstream == upstream.url)
        #expect(resolution.source == (upstream.kind == .json ? .json : .doh))
        #expect(resolution.failedAttempts.isEmpty)
    }

    @Test(arguments: [dohA, json])
    func followsCNAMEChainsAndCapsTheirTTL(upstream: UpstreamEndpoint) async throws {
        let resolution = try await resolver([upstream]).resolve("alias.hd.test", type: .a)
        #expect(resolution.addresses == [ResolvedAddress(ip: IPAddress("198.18.0.10")!, ttl: 60)])
        #expect(resolution.canonicalName == "www.hd.test")
    }

    @Test func returnsEveryAddressOfALargeRRset() async throws {
        let resolution = try await resolver([Self.dohA]).resolve("many.hd.test")
        #expect(resolution.addresses.filter { $0.ip.family == .ipv4 }.count == 16)
        #expect(resolution.addresses.filter { $0.ip.family == .ipv6 }.count == 4)
        #expect(Set(resolution.addresses.map(\.ip.description)).contains("198.18.1.16"))
    }

    @Test func absentNamesAreNXDOMAINAndMissingTypesNODATA() async throws {
        let resolver = try resolver([Self.dohA])
        await #expect { try await resolver.resolve("does-not-exist.hd.test") } throws: { ($0 as? DNSError)?.code == .nxdomain }
        await #expect { try await resolver.resolve("v6only.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .nodata }
        let v6 = try await resolver.resolve("v6only.hd.test")
        #expect(v6.addresses.map(\.ip.description) == ["2001:2::30"])
        let json = try self.resolver([Self.json])
        await #expect { try await json.resolve("nxdomain.hd.test") } throws: { ($0 as? DNSError)?.code == .nxdomain }
    }

    @Test func shortTTLIsReportedAsServed() async throws {
        let resolution = try await resolver([Self.dohA]).resolve("short.hd.test", type: .a)
        #expect(resolution.addresses.first?.ttl == 1)
    }

    @Test func privateAnswersAreRejectedUnlessAllowed() async throws {
        await #expect { try await resolver([Self.dohA]).resolve("private.hd.test") } throws: {
            ($0 as? DNSError)?.code == .rejectedPrivate
        }
        let allowed = try await resolver([Self.dohA], allowPrivate: true).resolve("loopback.hd.test")
        #expect(allowed.addresses.map(\.ip.description) == ["127.0.0.1"])
        let mixed = try await resolver([Self.dohA]).resolve("mixed.hd.test", type: .a)
        #expect(mixed.addresses.map(\.ip.description) == ["198.18.0.50"])
    }

    // MARK: Hostile and broken resolvers: each gives its own code, quickly.

    @Test(arguments: [
        ("html", DNSError.Code.badContentType), ("status500", .httpStatus), ("wrong-type", .badContentType),
        ("oversized", .responseTooLarge), ("truncated", .malformedResponse), ("mismatched", .mismatchedResponse),
        ("garbage", .malformedResponse), ("query-echo", .mismatchedResponse), ("no-such-path", .httpStatus),
    ])
    func brokenResolverGivesItsSpecificError(path: String, code: DNSError.Code) async throws {
        let clock = ContinuousClock()
        let start = clock.now
        do {
            let resolution = try await resolver([Self.hostile(path)]).resolve("www.hd.test", type: .a)
            Issue.record("expected \(code), got \(resolution.addresses)")
        } catch let error as DNSError {
            #expect(error.code == code, "\(path): \(error)")
            #expect(!error.message.isEmpty && !error.message.contains("\n"))
        }
        #expect(clock.now - start < .seconds(2))
    }

    @Test func brokenJSONIsMalformed() async throws {
        let upstream = try UpstreamEndpoint.json(Env.hostile("json-garbage"), bootstrap: [Env.hostileAddress])
        await #expect { try await resolver([upstream]).resolve("www.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .malformedResponse
        }
    }

    @Test func jsonAnswerForAnotherQuestionIsRejected() async throws {
        await #expect { try await resolver([Self.json]).resolve("other.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .mismatchedResponse
        }
    }

    @Test func refusedConnectionFailsFast() async throws {
        let upstream = try UpstreamEndpoint.doh("https://doh-a.test:\(unusedLoopbackPort())/dns-query", bootstrap: ["127.0.0.1"])
        let clock = ContinuousClock()
        let start = clock.now
        await #expect { try await resolver([upstream]).resolve("www.hd.test") } throws: { ($0 as? DNSError)?.code == .connectFailed }
        #expect(clock.now - start < .milliseconds(1500), "refusal must not wait for the 3 s budget")
    }

    @Test func blackholedResolverTimesOutWithinTheBudget() async throws {
        let blackhole = try BlackholeListener()
        let upstream = try UpstreamEndpoint.doh("https://doh-a.test:\(blackhole.port)/dns-query", bootstrap: ["127.0.0.1"])
        let clock = ContinuousClock()
        let start = clock.now
        await #expect { try await resolver([upstream], timeout: .milliseconds(600)).resolve("www.hd.test") } throws: {
            ($0 as? DNSError)?.code == .timeout
        }
        let elapsed = clock.now - start
        // The upper bound is far from 600 ms: CI's startup burst on 2 cores has stalled the
        // cooperative pool for ~3 s. What matters is that it ends with a timeout, not at 3 s + 3 s.
        #expect(elapsed >= .milliseconds(550) && elapsed < .milliseconds(4500), "took \(elapsed)")
    }

    // MARK: Failover: a bad first resolver, the second answers within one budget.

    enum FirstUpstream: String, CaseIterable, Sendable { case refused, blackholed, status500, garbage, mismatched, untrusted }

    @Test(arguments: FirstUpstream.allCases)
    func secondResolverAnswersWhenTheFirstIsBroken(first: FirstUpstream) async throws {
        let blackhole = try BlackholeListener()
        let bad: UpstreamEndpoint
        switch first {
        case .refused: bad = try .doh("https://doh-a.test:\(unusedLoopbackPort())/dns-query", bootstrap: ["127.0.0.1"])
        case .blackholed: bad = try .doh("https://doh-a.test:\(blackhole.port)/dns-query", bootstrap: ["127.0.0.1"])
        case .status500: bad = Self.hostile("status500")
        case .garbage: bad = Self.hostile("garbage")
        case .mismatched: bad = Self.hostile("mismatched")
        case .untrusted: bad = try .doh(Env.untrusted, bootstrap: [Env.hostileAddress])
        }
        let clock = ContinuousClock()
        let start = clock.now
        // 4 s: a blackholed first resolver takes half of it, and CI's startup burst (daemons, real
        // clients and CPU-bound suites on 2 cores) once left the second one nothing of a 2 s budget.
        let resolution = try await resolver([bad, Self.dohB], timeout: .seconds(4)).resolve("www.hd.test")
        #expect(resolution.upstream == Env.dohB)
        #expect(resolution.addresses.count == 2)
        #expect(resolution.failedAttempts.first?.upstream == bad.url)
        #expect(clock.now - start < .seconds(4))
    }

    @Test func refusedBootstrapAddressMovesToTheNextAddress() async throws {
        // Nothing listens on 127.0.0.9:18443; the second bootstrap address is doh-a's.
        let upstream = try UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.9", "127.0.0.1"])
        let resolver = try resolver([upstream])
        let first = try await resolver.resolve("www.hd.test", type: .a)
        #expect(first.upstream == Env.dohA)
        #expect(first.failedAttempts.isEmpty)
        // The address that worked is tried first from now on.
        let second = try await resolver.resolve("v4only.hd.test", type: .a)
        #expect(second.addresses.map(\.ip.description) == ["198.18.0.40"])
    }

    // MARK: TLS: verified against the resolver's name, always.

    @Test func untrustedCertificateIsRefused() async throws {
        let upstream = try UpstreamEndpoint.doh(Env.untrusted, bootstrap: [Env.hostileAddress])
        do {
            _ = try await resolver([upstream]).resolve("www.hd.test", type: .a)
            Issue.record("an untrusted certificate was accepted")
        } catch let error as DNSError {
            #expect(error.code == .tlsFailed)
            #expect(error.message.lowercased().contains("certificate"), "\(error.message)")
        }
    }

    @Test func certificateForAnotherNameIsRefused() async throws {
        // A live, reusable connection to the real doh-a.test first: the mis-pinned transfer below
        // must not ride on it (connections are matched on the pinned address too).
        _ = try await resolver([Self.dohA]).resolve("www.hd.test", type: .a)
        // doh-a.test's name, but the socket goes to nginx, which presents hostile.test's certificate.
        let upstream = try UpstreamEndpoint.doh(Env.dohA, bootstrap: [Env.hostileAddress])
        await #expect { try await resolver([upstream]).resolve("www.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .tlsFailed
        }
    }

    @Test func testCAIsNotTrustedUnlessGiven() async throws {
        await #expect { try await resolver([Self.dohA], caFile: nil).resolve("www.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .tlsFailed
        }
    }

    @Test func spkiPinIsEnforced() async throws {
        let pin = try String(contentsOfFile: Env.root + "/.testenv/ca/doh-a.test.pin", encoding: .utf8)
        let pinned = try UpstreamEndpoint.doh(Env.dohA, bootstrap: ["127.0.0.1"], pinnedPublicKey: pin)
        let resolution = try await resolver([pinned]).resolve("www.hd.test", type: .a)
        #expect(resolution.addresses.count == 1)
        let wrong = try UpstreamEndpoint.doh(
            Env.dohA, bootstrap: ["127.0.0.1"],
            pinnedPublicKey: "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        await #expect { try await resolver([wrong]).resolve("www.hd.test", type: .a) } throws: {
            ($0 as? DNSError)?.code == .tlsFailed
        }
    }

    // MARK: The shared engine under concurrency, and cancellation.

    @Test func manyConcurrentLookupsShareTheEngine() async throws {
        let resolver = try resolver([Self.dohA])
        let answered = try await withThrowingTaskGroup(of: Int.self) { group in
            for index in 0..<300 {
                group.addTask { try await resolver.resolve("n\(index).bench.hd.test", type: .a).addresses.count }
            }
            return try await group.reduce(0, +)
        }
        #expect(answered == 300)
    }

    @Test func cancellingALookupStopsTheTransfer() async throws {
        let blackhole = try BlackholeListener()
        let upstream = try UpstreamEndpoint.doh("https://doh-a.test:\(blackhole.port)/dns-query", bootstrap: ["127.0.0.1"])
        let resolver = try resolver([upstream], timeout: .seconds(20))
        let task = Task { try await resolver.resolve("www.hd.test") }
        try await Task.sleep(for: .milliseconds(100))
        let clock = ContinuousClock()
        let start = clock.now
        task.cancel()
        await #expect { try await task.value } throws: { ($0 as? DNSError)?.code == .cancelled }
        #expect(clock.now - start < .milliseconds(1500), "the budget was 20 s")
    }
}
