import Testing

@testable import DNSCore

/// Serve-stale and prefetch as a pure function of (entry, now, options).
@Suite struct CacheDecisionTests {
    let stored = ResolverInstant(offset: .seconds(1_000))

    func entry(_ payload: CacheEntry.Payload, lifetime: Duration = .seconds(100), staleWindow: Duration = .seconds(600)) -> CacheEntry {
        CacheEntry(
            payload: payload, source: .doh, upstream: "u", storedAt: stored, expiresAt: stored + lifetime,
            staleUntil: stored + lifetime + staleWindow)
    }

    let addresses = CacheEntry.Payload.addresses([ResolvedAddress(ip: IPAddress("198.18.0.1")!, ttl: 100)], canonicalName: nil)

    @Test func freshAnswersAndTheirPrefetchWindow() {
        let options = ResolverOptions()
        #expect(CacheDecision(nil, at: stored, options: options, hasFallback: false) == .miss)
        #expect(CacheDecision(entry(addresses), at: stored + .seconds(50), options: options, hasFallback: false) == .fresh(prefetch: false))
        #expect(
            CacheDecision(entry(addresses), at: stored + .seconds(91), options: options, hasFallback: false) == .fresh(prefetch: true),
            "the last 10 % of its life")
        var off = options
        off.prefetch = false
        #expect(CacheDecision(entry(addresses), at: stored + .seconds(91), options: off, hasFallback: false) == .fresh(prefetch: false))
        #expect(
            CacheDecision(entry(.negative(.nxdomain)), at: stored + .seconds(95), options: options, hasFallback: false) == .fresh(prefetch: false),
            "negative answers are not prefetched")
    }

    @Test func staleAnswersWithinTheWindowOnly() {
        var options = ResolverOptions()
        #expect(CacheDecision(entry(addresses), at: stored + .seconds(100), options: options, hasFallback: false) == .stale(waitFirst: nil))
        #expect(CacheDecision(entry(addresses), at: stored + .seconds(699), options: options, hasFallback: false) == .stale(waitFirst: nil))
        #expect(CacheDecision(entry(addresses), at: stored + .seconds(700), options: options, hasFallback: false) == .miss)
        options.staleAnswerDelay = .milliseconds(1800)
        #expect(
            CacheDecision(entry(addresses), at: stored + .seconds(200), options: options, hasFallback: false)
                == .stale(waitFirst: .milliseconds(1800)), "RFC 8767's 1.8 s wait for a fresh answer first")
        #expect(
            CacheDecision(entry(.negative(.nodata)), at: stored + .seconds(101), options: options, hasFallback: false) == .miss,
            "an expired negative answer is never served stale")
    }

    @Test func aRememberedFailureGoesToTheFallbackOnlyWhenAllowed() {
        var options = ResolverOptions()
        let failure = entry(.failure(DNSError(.timeout, "t")), lifetime: .seconds(10), staleWindow: .zero)
        #expect(CacheDecision(failure, at: stored + .seconds(5), options: options, hasFallback: true) == .fresh(prefetch: false))
        options.fallback = .system
        #expect(CacheDecision(failure, at: stored + .seconds(5), options: options, hasFallback: true) == .rememberedFailureWithFallback)
        #expect(CacheDecision(failure, at: stored + .seconds(5), options: options, hasFallback: false) == .fresh(prefetch: false))
        #expect(CacheDecision(failure, at: stored + .seconds(10), options: options, hasFallback: true) == .miss)
    }
}
