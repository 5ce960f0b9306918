import TestSupport
import Testing

@testable import DNSCore

@Suite struct CacheSnapshotTests {
    let clock = ManualClock()

    func engine(_ upstream: ScriptedUpstream) -> ResolverEngine {
        var options = ResolverOptions()
        options.minTTL = .zero
        options.staleWindow = .seconds(600)
        return ResolverEngine(upstreams: [upstream], options: options, clock: clock)
    }

    @Test func snapshotRoundTripsAndKeepsAbsoluteExpiries() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1", "2001:2::1"], ttl: 300))
        let first = engine(upstream)
        _ = try await first.resolve("www.hd.test")
        let bytes = first.snapshot(wallMilliseconds: 1_000_000)

        // A restart 100 s later (wall clock), with a fresh monotonic clock.
        let second = engine(ScriptedUpstream(.fail(.timeout)))
        #expect(try second.restore(bytes, wallMilliseconds: 1_100_000) == 2)
        let cached = try #require(second.cachedResolution(for: "www.hd.test"))
        #expect(cached.source == .cache)
        #expect(cached.addresses.map(\.ip.description) == ["2001:2::1", "198.18.0.1"])
        #expect(cached.addresses.allSatisfy { $0.ttl == 200 })
    }

    @Test func entriesPastTheStaleWindowAreDropped() async throws {
        let first = engine(ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60)))
        _ = try await first.resolve("www.hd.test", type: .a)
        let bytes = first.snapshot(wallMilliseconds: 0)
        let second = engine(ScriptedUpstream(.fail(.timeout)))
        #expect(try second.restore(bytes, wallMilliseconds: 120_000) == 1, "expired but within the window: stale")
        #expect(second.cachedResolution(for: "www.hd.test", type: .a)?.source == .stale)
        let third = engine(ScriptedUpstream(.fail(.timeout)))
        #expect(try third.restore(bytes, wallMilliseconds: 700_000) == 0, "60 s + 600 s window are over")
    }

    @Test func corruptTruncatedAndForeignFilesAreRejectedWithoutLoading() async throws {
        let first = engine(ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300)))
        _ = try await first.resolve("www.hd.test", type: .a)
        let bytes = first.snapshot(wallMilliseconds: 0)
        let target = engine(ScriptedUpstream(.fail(.timeout)))
        for length in 0..<bytes.count {
            #expect(throws: DNSError.self) { try target.restore(Array(bytes[..<length]), wallMilliseconds: 0) }
        }
        #expect(throws: DNSError.self) { try target.restore(Array("<html>not a cache</html>".utf8), wallMilliseconds: 0) }
        #expect(throws: DNSError.self) { try target.restore(bytes + [1], wallMilliseconds: 0) }
        var rng = SplitMix64(state: 42)
        for _ in 0..<2_000 {
            var mutated = bytes
            mutated[Int.random(in: 8..<mutated.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            _ = try? target.restore(mutated, wallMilliseconds: 0)  // never traps
        }
        #expect(engine(ScriptedUpstream(.fail(.timeout))).cachedEntryCount == 0)
    }

    @Test func failuresAreNotPersisted() async throws {
        let first = engine(ScriptedUpstream(.fail(.connectFailed)))
        _ = try? await first.resolve("www.hd.test", type: .a)
        #expect(first.cachedEntryCount == 1)
        let bytes = first.snapshot(wallMilliseconds: 0)
        #expect(try engine(ScriptedUpstream(.fail(.timeout))).restore(bytes, wallMilliseconds: 0) == 0)
    }
}
