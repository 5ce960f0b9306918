import MetricsTestKit
import Synchronization
import TestSupport
import Testing

@testable import DNSCore

/// A shared cache in memory, as two engines (two members of a pool) see it.
final class MemorySharedCache: SharedCache {
    let entries = Mutex<[CacheKey: CacheEntry]>([:])
    let reads = Atomic<Int>(0)

    func entry(for key: CacheKey, now: ResolverInstant) async -> CacheEntry? {
        reads.add(1, ordering: .relaxed)
        return entries.withLock { $0[key] }
    }

    func store(_ entry: CacheEntry, for key: CacheKey, now: ResolverInstant) {
        entries.withLock { $0[key] = entry }
    }
}

/// The engine's side of `cache.shared`: asked after a local miss, before the upstreams, and told
/// every upstream answer; only fresh answers to the asked question are taken from it.
@Suite struct SharedCacheTests {
    let clock = ManualClock()

    func engine(_ upstream: ScriptedUpstream, _ shared: MemorySharedCache, metrics: TestMetrics = TestMetrics()) -> ResolverEngine {
        var options = ResolverOptions(timeout: .seconds(2))
        options.minTTL = .zero
        let engine = ResolverEngine(upstreams: [upstream], options: options, clock: clock, metrics: metrics)
        engine.attachSharedCache(shared)
        return engine
    }

    @Test func aNameOneMemberResolvedIsAnsweredByAnotherWithoutAnUpstream() async throws {
        let shared = MemorySharedCache()
        let upstreamA = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let upstreamB = ScriptedUpstream(.addresses(["198.18.0.99"], ttl: 300))
        let metricsB = TestMetrics()
        let memberA = engine(upstreamA, shared)
        let memberB = engine(upstreamB, shared, metrics: metricsB)
        #expect(try await memberA.resolve("www.hd.test", type: .a).addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(upstreamA.queries == 1)
        clock.advance(by: .seconds(100))
        let answer = try await memberB.resolve("www.hd.test", type: .a)
        #expect(answer.addresses.map(\.ip.description) == ["198.18.0.1"], "the shared answer, not B's own upstream's")
        #expect(answer.addresses.first?.ttl == 200, "what is left of the TTL")
        #expect(upstreamB.queries == 0)
        #expect(metricsB.counterTotal(label: "httpdns_shared_cache_hits_total") == 1)
        // Now in B's own cache: no second read of the shared one.
        _ = try await memberB.resolve("www.hd.test", type: .a)
        #expect(shared.reads.load(ordering: .relaxed) == 2)
    }

    @Test func negativeAnswersAreSharedFailuresAreNot() async throws {
        let shared = MemorySharedCache()
        let nx = ScriptedUpstream(.nxdomain())
        _ = try? await engine(nx, shared).resolve("nope.hd.test", type: .a)
        let key = CacheKey(try DomainName("nope.hd.test"), .a)
        #expect(shared.entries.withLock { $0[key]?.payload } == .negative(.nxdomain))
        let broken = ScriptedUpstream(.fail(.timeout))
        _ = try? await engine(broken, shared).resolve("down.hd.test", type: .a)
        #expect(shared.entries.withLock { $0[CacheKey(try! DomainName("down.hd.test"), .a)] } == nil)
    }

    @Test func anExpiredOrFailedSharedEntryIsAMiss() async throws {
        let shared = MemorySharedCache()
        let key = CacheKey(try DomainName("www.hd.test"), .a)
        let now = clock.now
        shared.store(
            CacheEntry(
                payload: .addresses([ResolvedAddress(ip: IPAddress("198.18.0.66")!, ttl: 10)], canonicalName: nil), source: .doh,
                upstream: "elsewhere", storedAt: now, expiresAt: now + .seconds(10), staleUntil: now + .seconds(3_600)), for: key, now: now)
        clock.advance(by: .seconds(20))  // past its freshness: not taken, though within its stale window
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        #expect(try await engine(upstream, shared).resolve("www.hd.test", type: .a).addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(upstream.queries == 1)
        let failed = CacheKey(try DomainName("f.hd.test"), .a)
        shared.store(
            CacheEntry(
                payload: .failure(DNSError(.timeout, "x")), source: .doh, upstream: nil, storedAt: clock.now,
                expiresAt: clock.now + .seconds(10), staleUntil: clock.now + .seconds(10)), for: failed, now: clock.now)
        let other = ScriptedUpstream(.addresses(["198.18.0.2"], ttl: 300))
        #expect(try await engine(other, shared).resolve("f.hd.test", type: .a).addresses.map(\.ip.description) == ["198.18.0.2"])
    }
}
