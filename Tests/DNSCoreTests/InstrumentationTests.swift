import InMemoryLogging
import Logging
import MetricsTestKit
import TestSupport
import Testing

@testable import DNSCore

/// Metrics go to the factory the caller passes (nothing is bootstrapped globally), logs to the
/// caller's logger; and the RFC 8767 client response timer.
@Suite struct InstrumentationTests {
    let clock = ManualClock()
    let metrics = TestMetrics()
    /// The engine's background work (refreshes, prefetches, the stale-answer timer), drained by the
    /// tests instead of waited for.
    let tasks = DrainableTasks()

    func engine(
        _ upstreams: [ScriptedUpstream], logger: Logger? = nil,
        configure: (inout ResolverOptions) -> Void = { _ in }
    ) -> ResolverEngine {
        var options = ResolverOptions(timeout: .seconds(2))
        options.minTTL = .zero
        configure(&options)
        return ResolverEngine(upstreams: upstreams, options: options, clock: clock, spawner: tasks, metrics: metrics, logger: logger)
    }

    func total(_ label: String, _ dimensions: [(String, String)] = []) -> Int64 {
        dimensions.isEmpty ? metrics.counterTotal(label: label) : metrics.counterTotal(label: label, dimensions: dimensions)
    }

    @Test func cacheCountersFollowHitsMissesStaleAndPrefetches() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 100))
        let engine = engine([upstream])
        _ = try await engine.resolve("www.hd.test", type: .a)
        _ = try await engine.resolve("www.hd.test", type: .a)
        _ = try await engine.resolve("www.hd.test", type: .a)
        #expect(total("httpdns_cache_misses_total") == 1)
        #expect(total("httpdns_cache_hits_total") == 2)

        clock.advance(by: .seconds(95))  // last 10 % of the TTL: a hit that prefetches
        _ = try await engine.resolve("www.hd.test", type: .a)
        #expect(total("httpdns_prefetches_total", [("reason", "near_expiry")]) == 1)
        await tasks.drain()
        #expect(upstream.queries == 2)

        clock.advance(by: .seconds(200))  // expired: stale served, refreshed in the background
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .stale)
        #expect(total("httpdns_cache_stale_served_total") == 1)
        #expect(total("httpdns_prefetches_total", [("reason", "stale")]) == 1)
        await tasks.drain()
        #expect(upstream.queries == 3)
        #expect(total("httpdns_cache_hits_total") == 3)
    }

    @Test func evictionsAreCounted() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let engine = engine([upstream]) { $0.cacheCapacity = 4 }
        for index in 0..<10 { _ = try await engine.resolve("n\(index).hd.test", type: .a) }
        #expect(total("httpdns_cache_evictions_total") == 6)
        #expect(engine.cachedEntryCount == 4)
    }

    @Test func upstreamLatencyAndFailuresArePerUpstream() async throws {
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.httpStatus))
        let healthy = ScriptedUpstream("https://healthy.test/q", clock: clock, .slow(.milliseconds(20), ["198.18.0.1"]))
        let engine = engine([broken, healthy])
        for name in ["www.hd.test", "other.hd.test"] {
            let lookup = Task { try await engine.resolve(name, type: .a) }
            // The healthy upstream is answering, and the broken one's hedge timer (200 ms) still runs.
            await clock.waitForSleepers(2)
            clock.advance(by: .milliseconds(20))
            _ = try await lookup.value
        }
        #expect(total("httpdns_upstream_failures_total", [("upstream", "https://broken.test/q"), ("code", "http_status")]) == 2)
        #expect(
            metrics.counters(label: "httpdns_upstream_failures_total", dimensions: [("upstream", "https://healthy.test/q"), ("code", "http_status")])
                .isEmpty)
        let latency = try metrics.expectTimer("httpdns_upstream_duration_seconds", [("upstream", "https://healthy.test/q")])
        #expect(latency.values == [20_000_000, 20_000_000], "in nanoseconds of the engine's clock: the upstream's 20 ms")
        #expect(try metrics.expectTimer("httpdns_upstream_duration_seconds", [("upstream", "https://broken.test/q")]).values.count == 2)
    }

    @Test func circuitBreakerChangesAreAGaugeAndALogLine() async throws {
        let logs = InMemoryLogHandler()
        var logger = Logger(label: "test", factory: { _ in logs })
        logger.logLevel = .debug
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.connectFailed))
        let healthy = ScriptedUpstream("https://healthy.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let engine = engine([broken, healthy], logger: logger)
        for index in 0..<3 { _ = try await engine.resolve("n\(index).hd.test", type: .a) }
        let gauge = try metrics.expectGauge("httpdns_upstream_circuit_open", [("upstream", "https://broken.test/q")])
        #expect(gauge.lastValue == 1)
        let warnings = logs.entries.filter { $0.level == .warning }
        #expect(warnings.count == 1)
        #expect(warnings.first?.metadata["upstream"] == "https://broken.test/q")
        #expect(logs.entries.filter { $0.level == .debug && $0.message.description == "upstream query failed" }.count == 3)

        broken.reply(.addresses(["198.18.0.2"], ttl: 300))
        clock.advance(by: .seconds(2))  // past the 1 s backoff: the next lookup starts a probe, whose answer closes it
        #expect(try await engine.resolve("n9.hd.test", type: .a).upstream == "https://healthy.test/q", "not the user's trial")
        await tasks.drain()
        #expect(total("httpdns_upstream_probes_total", [("upstream", "https://broken.test/q")]) == 1)
        #expect(broken.events.last?.name == "." && broken.events.last?.type == .ns, "the default probe: the root's NS")
        #expect(gauge.lastValue == 0)
        #expect(logs.entries.contains { $0.level == .notice && $0.metadata["upstream"] == "https://broken.test/q" })
    }

    @Test func withoutALoggerNothingIsLoggedAndNothingBreaks() async throws {
        let broken = ScriptedUpstream(.fail(.connectFailed))
        let engine = ResolverEngine(upstreams: [broken], clock: clock)
        await #expect(throws: DNSError.self) { try await engine.resolve("www.hd.test", type: .a) }
    }

    @Test func staleAnswerDelayWaitsForAFastRefresh() async throws {
        let upstream = ScriptedUpstream(clock: clock, .addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) { $0.staleAnswerDelay = .seconds(5) }
        _ = try await engine.resolve("www.hd.test", type: .a)
        clock.advance(by: .seconds(61))
        upstream.reply(.slow(.milliseconds(30), ["198.18.0.2"]))
        let lookup = Task { try await engine.resolve("www.hd.test", type: .a) }
        await clock.waitForSleepers(2)  // the 5-s timer and the refresh
        clock.advance(by: .milliseconds(30))
        let answer = try await lookup.value
        #expect(answer.source == .doh, "the refresh answered within the delay: a fresh answer, not stale")
        #expect(answer.addresses.map(\.ip.description) == ["198.18.0.2"])
        #expect(total("httpdns_cache_stale_served_total") == 0)
        clock.advance(by: .seconds(5))
        await tasks.drain()
    }

    @Test func staleAnswerDelayAnswersFromStaleWhenTheRefreshIsSlow() async throws {
        let upstream = ScriptedUpstream(clock: clock, .addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) {
            $0.staleAnswerDelay = .milliseconds(100)
            $0.timeout = .seconds(30)
        }
        _ = try await engine.resolve("www.hd.test", type: .a)
        clock.advance(by: .seconds(61))
        upstream.reply(.slow(.seconds(6), ["198.18.0.2"]))
        let lookup = Task { try await engine.resolve("www.hd.test", type: .a) }
        await clock.waitForSleepers(2)  // the 100-ms timer and the 6-s refresh
        clock.advance(by: .milliseconds(100))
        let answer = try await lookup.value
        #expect(answer.source == .stale, "the delay passed without a fresh answer")
        #expect(answer.addresses.map(\.ip.description) == ["198.18.0.1"])
        // The refresh goes on and lands in the cache.
        clock.advance(by: .seconds(6))
        await tasks.drain()
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a)?.addresses.map(\.ip.description) == ["198.18.0.2"])
    }

    @Test func staleAnswerDelayAnswersFromStaleAtOnceWhenTheRefreshFails() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) { $0.staleAnswerDelay = .seconds(20) }
        _ = try await engine.resolve("www.hd.test", type: .a)
        clock.advance(by: .seconds(61))
        upstream.reply(.fail(.connectFailed))
        // No time passes on the engine's clock: the failed refresh ends the wait, not the 20-s timer.
        let answer = try await engine.resolve("www.hd.test", type: .a)
        #expect(answer.source == .stale)
        clock.advance(by: .seconds(20))
        await tasks.drain()
    }
}

/// The hit fast path (ResolutionMemo) must never show an answer the cache no longer holds.
@Suite struct HitFastPathTests {
    let clock = ManualClock()

    @Test func aChangedCacheIsSeenAtOnceWithoutTimePassing() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let engine = ResolverEngine(upstreams: [upstream], clock: clock)
        _ = try await engine.resolve("www.hd.test", type: .a)
        #expect(try await engine.resolve("www.hd.test", type: .a).addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a)?.addresses.map(\.ip.description) == ["198.18.0.1"])

        engine.removeAll()
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a) == nil, "removeAll empties the fast path too")
        upstream.reply(.addresses(["198.18.0.2"], ttl: 300))
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .doh)
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a)?.addresses.map(\.ip.description) == ["198.18.0.2"])

        // Another name's store also invalidates (one generation), and the answer is rebuilt the same.
        _ = try await engine.resolve("other.hd.test", type: .a)
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .cache)
        #expect(upstream.queries == 3)
    }

    @Test func reportedTTLsFollowTheClockAcrossSeconds() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        var options = ResolverOptions()
        options.minTTL = .zero
        let engine = ResolverEngine(upstreams: [upstream], options: options, clock: clock)
        _ = try await engine.resolve("www.hd.test", type: .a)
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a)?.addresses.first?.ttl == 300)
        clock.advance(by: .seconds(1))
        #expect(engine.cachedResolution(for: "www.hd.test", type: .a)?.addresses.first?.ttl == 299)
        clock.advance(by: .seconds(100))
        #expect(try await engine.resolve("www.hd.test", type: .a).addresses.first?.ttl == 199)
    }

    @Test func differentSpellingsOfOneNameShareTheCacheEntry() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let engine = ResolverEngine(upstreams: [upstream], clock: clock)
        _ = try await engine.resolve("www.hd.test", type: .a)
        let upper = try await engine.resolve("WWW.HD.TEST", type: .a)
        #expect(upper.source == .cache)
        #expect(upper.host == "WWW.HD.TEST", "the host is echoed as the caller wrote it")
        #expect(upstream.queries == 1)
    }
}
