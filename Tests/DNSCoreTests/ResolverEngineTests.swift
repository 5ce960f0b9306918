import Synchronization
import TestSupport
import Testing

@testable import DNSCore

@Suite struct ResolverEngineTests {
    let clock = ManualClock()
    /// The engine's background refreshes, drained by the tests instead of waited for.
    let tasks = DrainableTasks()

    func engine(
        _ upstreams: [ScriptedUpstream], fallback: ScriptedUpstream? = nil,
        configure: (inout ResolverOptions) -> Void = { _ in }
    ) -> ResolverEngine {
        var options = ResolverOptions(timeout: .seconds(2))
        configure(&options)
        return ResolverEngine(upstreams: upstreams, options: options, fallback: fallback, clock: clock, spawner: tasks)
    }

    @Test func freshAnswersComeFromTheCacheWithRemainingTTL() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let engine = engine([upstream])
        let first = try await engine.resolve("www.hd.test", type: .a)
        #expect(first.source == .doh)
        #expect(first.addresses.map(\.ttl) == [300])
        clock.advance(by: .seconds(100))
        let second = try await engine.resolve("WWW.hd.test.", type: .a)
        #expect(second.source == .cache)
        #expect(second.addresses.map(\.ttl) == [200])
        #expect(upstream.queries == 1)
    }

    @Test func ttlsAreClampedToTheConfiguredRange() async throws {
        let short = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 5))
        let engine = engine([short]) {
            $0.minTTL = .seconds(60)
            $0.maxTTL = .seconds(600)
        }
        #expect(try await engine.resolve("short.hd.test", type: .a).addresses.map(\.ttl) == [60])
        clock.advance(by: .seconds(59))
        #expect(try await engine.resolve("short.hd.test", type: .a).source == .cache)
        #expect(short.queries == 1)

        let long = ScriptedUpstream(.addresses(["198.18.0.2"], ttl: 999_999))
        let other = self.engine([long]) {
            $0.minTTL = .seconds(60)
            $0.maxTTL = .seconds(600)
        }
        #expect(try await other.resolve("long.hd.test", type: .a).addresses.map(\.ttl) == [600])
    }

    @Test func negativeAnswersAreCachedBySOAMinimumCappedByNegativeTTL() async throws {
        let upstream = ScriptedUpstream(.nxdomain(soaMinimum: 10))
        let engine = engine([upstream]) { $0.negativeTTL = .seconds(30) }
        await #expect { try await engine.resolve("nope.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .nxdomain }
        clock.advance(by: .seconds(9))
        await #expect { try await engine.resolve("nope.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .nxdomain }
        #expect(upstream.queries == 1, "cached for the SOA minimum, 10 s")
        clock.advance(by: .seconds(2))
        _ = try? await engine.resolve("nope.hd.test", type: .a)
        #expect(upstream.queries == 2)

        let longSOA = ScriptedUpstream(.nxdomain(soaMinimum: 3600))
        let capped = self.engine([longSOA]) { $0.negativeTTL = .seconds(30) }
        _ = try? await capped.resolve("nope.hd.test", type: .a)
        clock.advance(by: .seconds(31))
        _ = try? await capped.resolve("nope.hd.test", type: .a)
        #expect(longSOA.queries == 2, "capped at negative_ttl, 30 s")
    }

    @Test func totalFailuresAreRememberedBriefly() async throws {
        let upstream = ScriptedUpstream(.fail(.connectFailed))
        let engine = engine([upstream]) { $0.failureTTL = .seconds(10) }
        for _ in 0..<5 {
            await #expect { try await engine.resolve("www.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .connectFailed }
        }
        #expect(upstream.queries == 1, "a dead resolver is not hammered")
        clock.advance(by: .seconds(11))
        upstream.reply(.addresses(["198.18.0.1"], ttl: 300))
        #expect(try await engine.resolve("www.hd.test", type: .a).addresses.count == 1)
    }

    @Test func staleAnswerIsServedAtOnceAndRefreshedInTheBackground() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) {
            $0.minTTL = .zero
            $0.staleWindow = .seconds(3600)
        }
        _ = try await engine.resolve("www.hd.test", type: .a)
        clock.advance(by: .seconds(61))
        upstream.reply(.addresses(["198.18.0.2"], ttl: 60))
        let stale = try await engine.resolve("www.hd.test", type: .a)
        #expect(stale.source == .stale)
        #expect(stale.isStale)
        #expect(stale.addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(stale.addresses.map(\.ttl) == [30], "RFC 8767: stale answers carry TTL 30")
        await tasks.drain()
        #expect(upstream.queries == 2)
        let refreshed = try await engine.resolve("www.hd.test", type: .a)
        #expect(refreshed.source == .cache)
        #expect(refreshed.addresses.map(\.ip.description) == ["198.18.0.2"])
    }

    @Test func staleAnswerIsServedWhileRefreshesFailUntilTheWindowEnds() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) {
            $0.minTTL = .zero
            $0.staleWindow = .seconds(600)
        }
        _ = try await engine.resolve("www.hd.test", type: .a)
        upstream.reply(.fail(.timeout))
        clock.advance(by: .seconds(120))
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .stale)
        await tasks.drain()
        clock.advance(by: .seconds(400))
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .stale, "failed refreshes keep the stale answer")
        await tasks.drain()
        clock.advance(by: .seconds(200))  // 720 s after storing: past expiry (60) + window (600)
        await #expect { try await engine.resolve("www.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .timeout }
    }

    @Test func staleAnswerIsServedWhenAllUpstreamsFailOnAMiss() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream]) { $0.minTTL = .zero }
        _ = try await engine.resolve("www.hd.test", type: .a)
        clock.advance(by: .seconds(61))
        upstream.reply(.fail(.connectFailed))
        // The cached entry is stale; the background refresh fails; a lookup still answers.
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .stale)
    }

    @Test func prefetchRefreshesHitsInTheLastTenPercentOfTheTTL() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 100))
        let engine = engine([upstream]) { $0.minTTL = .zero }
        _ = try await engine.resolve("hot.hd.test", type: .a)
        clock.advance(by: .seconds(89))
        _ = try await engine.resolve("hot.hd.test", type: .a)
        await tasks.drain()
        #expect(upstream.queries == 1, "89 % of the TTL: no prefetch yet")
        clock.advance(by: .seconds(2))
        let hit = try await engine.resolve("hot.hd.test", type: .a)
        #expect(hit.source == .cache)
        await tasks.drain()
        #expect(upstream.queries == 2, "91 %: refreshed in the background")
        clock.advance(by: .seconds(50))
        #expect(try await engine.resolve("hot.hd.test", type: .a).source == .cache, "a name in steady use never misses")
    }

    @Test func concurrentLookupsOfOneNameCauseOneQuery() async throws {
        let upstream = ScriptedUpstream(.slow(.milliseconds(100), ["198.18.0.1"]))
        let engine = engine([upstream])
        let results = await withTaskGroup(of: Int.self) { group in
            for _ in 0..<1000 {
                group.addTask { (try? await engine.resolve("www.hd.test", type: .a))?.addresses.count ?? 0 }
            }
            return await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(results.count == 1000 && results.allSatisfy { $0 == 1 })
        #expect(upstream.queries == 1)
    }

    /// A caller that missed the cache while a flight ran on another thread, and came to join it only
    /// after it ended, takes the answer that flight stored instead of asking again (a CI run once saw
    /// 2 queries for 1,000 concurrent lookups against the real BIND). The gap is a few instructions
    /// wide, so the test plays the late caller's round by hand; a refresh still asks.
    @Test func aCallerThatMissedJustBeforeAFlightEndedTakesItsAnswer() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 300))
        let engine = engine([upstream])
        _ = try await engine.resolve("www.hd.test", type: .a)  // the flight that ended
        let key = CacheKey(try DomainName("www.hd.test"), .a)
        guard case let .answered(entry, _) = await engine.round(key, afterMiss: true) else {
            Issue.record("the stored answer was not taken")
            return
        }
        guard case let .addresses(addresses, _) = entry.payload else {
            Issue.record("not addresses: \(entry.payload)")
            return
        }
        #expect(addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(upstream.queries == 1)
        _ = await engine.round(key)  // a refresh (prefetch, stale) asks whatever the cache holds
        #expect(upstream.queries == 2)
        clock.advance(by: .seconds(300))  // expired: a miss asks again
        _ = await engine.round(key, afterMiss: true)
        #expect(upstream.queries == 3)
    }

    /// One lookup leading a slow query (5 s of the engine's clock) and a second one waiting on it.
    func leaderAndFollower() async throws -> (ResolverEngine, ScriptedUpstream, Task<Resolution, Error>, Task<Resolution, Error>) {
        let upstream = ScriptedUpstream(clock: clock, .slow(.seconds(5), ["198.18.0.1"]))
        let engine = engine([upstream]) { $0.timeout = .seconds(20) }
        let leader = Task { try await engine.resolve("www.hd.test", type: .a) }
        await clock.waitForSleepers(1)  // the leader's query is under way
        let follower = Task { try await engine.resolve("www.hd.test", type: .a) }
        while engine.followers(of: "www.hd.test", type: .a) < 1 { await Task.yield() }
        return (engine, upstream, leader, follower)
    }

    @Test func cancellingTheLeaderDoesNotCancelTheOthers() async throws {
        let (engine, upstream, leader, follower) = try await leaderAndFollower()
        leader.cancel()
        await #expect { try await leader.value } throws: { ($0 as? DNSError)?.code == .cancelled }
        await clock.waitForSleepers(1)  // the query, started again for the follower
        clock.advance(by: .seconds(5))
        #expect(try await follower.value.addresses.map(\.ip.description) == ["198.18.0.1"])
        // The cancelled caller led the flight, so the query was started again for the other.
        #expect(upstream.queries == 2)
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .cache, "a cancellation is never cached")
    }

    @Test func cancellingAFollowerLeavesTheLeadersQueryAlone() async throws {
        let (_, upstream, leader, follower) = try await leaderAndFollower()
        follower.cancel()
        await #expect { try await follower.value } throws: { ($0 as? DNSError)?.code == .cancelled }
        clock.advance(by: .seconds(5))
        #expect(try await leader.value.addresses.map(\.ip.description) == ["198.18.0.1"])
        #expect(upstream.queries == 1)
    }

    @Test func evictionKeepsRecentlyUsedNames() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 3600))
        let engine = ResolverEngine(
            upstreams: [upstream],
            options: {
                var options = ResolverOptions()
                options.cacheCapacity = 16
                return options
            }(), clock: clock)
        _ = try await engine.resolve("hot.hd.test", type: .a)
        for index in 0..<64 {
            _ = try await engine.resolve("hot.hd.test", type: .a)  // keeps its reference bit set
            _ = try await engine.resolve("cold\(index).hd.test", type: .a)
        }
        #expect(engine.cachedEntryCount <= 16)
        #expect(engine.cache.evictions > 0)
        let before = upstream.queries
        #expect(try await engine.resolve("hot.hd.test", type: .a).source == .cache)
        #expect(upstream.queries == before)
    }

    @Test func cachedResolutionNeedsNoIO() async throws {
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1", "2001:2::1"], ttl: 300))
        let engine = engine([upstream])
        #expect(engine.cachedResolution(for: "www.hd.test") == nil)
        _ = try await engine.resolve("www.hd.test")
        let cached = try #require(engine.cachedResolution(for: "www.hd.test"))
        #expect(cached.addresses.map(\.ip.description) == ["2001:2::1", "198.18.0.1"])
        #expect(cached.source == .cache)
        engine.removeAll()
        #expect(engine.cachedResolution(for: "www.hd.test") == nil)
    }

    @Test func wallClockJumpsDoNotMatterOnlyMonotonicTime() async throws {
        // The engine reads only the injected monotonic clock; without advancing it, entries stay fresh.
        let upstream = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let engine = engine([upstream])
        _ = try await engine.resolve("www.hd.test", type: .a)
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .cache)
        #expect(upstream.queries == 1)
    }

    // MARK: Fallback policy

    @Test func systemFallbackAnswersOnlyWhenTrustedUpstreamsFail() async throws {
        let trusted = ScriptedUpstream(.fail(.timeout))
        let system = ScriptedUpstream("system", source: .system, .addresses(["198.18.9.9"], ttl: 30))
        let engine = engine([trusted], fallback: system) { $0.fallback = .system }
        let resolution = try await engine.resolve("www.hd.test", type: .a)
        #expect(resolution.source == .system)
        #expect(resolution.upstream == "system")
        #expect(resolution.addresses.map(\.ip.description) == ["198.18.9.9"])

        let healthy = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 30))
        let unused = ScriptedUpstream("system", source: .system, .addresses(["198.18.9.9"], ttl: 30))
        _ = try await self.engine([healthy], fallback: unused) { $0.fallback = .system }.resolve("www.hd.test", type: .a)
        #expect(unused.queries == 0)
    }

    @Test func strictPolicyNeverAsksTheSystem() async throws {
        let trusted = ScriptedUpstream(.fail(.timeout))
        let system = ScriptedUpstream("system", source: .system, .addresses(["198.18.9.9"], ttl: 30))
        let engine = engine([trusted], fallback: system) { $0.fallback = .none }
        await #expect { try await engine.resolve("www.hd.test", type: .a) } throws: { ($0 as? DNSError)?.code == .timeout }
        #expect(system.queries == 0)
    }

    @Test func staleBeatsSystemFallback() async throws {
        let trusted = ScriptedUpstream(.addresses(["198.18.0.1"], ttl: 60))
        let system = ScriptedUpstream("system", source: .system, .addresses(["198.18.9.9"], ttl: 30))
        let engine = engine([trusted], fallback: system) {
            $0.fallback = .system
            $0.minTTL = .zero
        }
        _ = try await engine.resolve("www.hd.test", type: .a)
        trusted.reply(.fail(.timeout))
        clock.advance(by: .seconds(61))
        #expect(try await engine.resolve("www.hd.test", type: .a).source == .stale)
        #expect(system.queries == 0)
    }
}

@Suite struct UpstreamPoolTests {
    let clock = ManualClock()

    @Test func anOpenCircuitIsProbedOffTheUsersPathAndClosedOnlyByAnAnswer() async throws {
        let tasks = DrainableTasks()
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.connectFailed))
        let healthy = ScriptedUpstream("https://healthy.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let probe = DNSMessage.Question(name: try DomainName("probe.hd.test"), type: .a)
        let pool = UpstreamPool(
            [broken, healthy], clock: clock, failureThreshold: 3, baseBackoff: .seconds(1), probe: probe, probeTimeout: .seconds(2),
            spawner: tasks)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        for _ in 0..<3 { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        #expect(broken.queries == 3)
        #expect(pool.isOpen(0))
        #expect(pool.order() == [1, 0], "an open circuit is tried last")
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        #expect(broken.queries == 3, "skipped while open")

        // Past the backoff: the lookup still goes to the healthy upstream; a probe goes to the broken one.
        clock.advance(by: .seconds(2))
        let answered = await pool.query(question, deadline: clock.now + .seconds(1))
        #expect(answered.upstream?.identifier == "https://healthy.test/q")
        await tasks.drain()
        #expect(broken.events.map(\.name) == ["www.hd.test", "www.hd.test", "www.hd.test", "probe.hd.test"])
        #expect(broken.events.last?.timeout == .seconds(2))
        #expect(pool.isOpen(0) && pool.healthSnapshot[0].backoff == .seconds(2), "a failed probe doubles the backoff")
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        await tasks.drain()
        #expect(broken.queries == 4, "the next probe is not due yet")
        #expect(pool.order() == [1, 0])

        // It recovers: nothing reaches it until a probe has been answered, then lookups do again.
        broken.reply(.addresses(["198.18.0.2"], ttl: 300))
        clock.advance(by: .seconds(3))
        #expect(await pool.query(question, deadline: clock.now + .seconds(1)).upstream?.identifier == "https://healthy.test/q")
        await tasks.drain()
        #expect(broken.events.last?.name == "probe.hd.test")
        #expect(!pool.isOpen(0) && pool.order() == [0, 1])
        #expect(await pool.query(question, deadline: clock.now + .seconds(1)).upstream?.identifier == "https://broken.test/q")
    }

    @Test func aProbeRunsOnceAtATimeAndWithoutLookups() async throws {
        let tasks = DrainableTasks()
        let broken = ScriptedUpstream("https://broken.test/q", clock: clock, .fail(.timeout))
        let healthy = ScriptedUpstream("https://healthy.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let pool = UpstreamPool([broken, healthy], clock: clock, failureThreshold: 1, baseBackoff: .seconds(1), spawner: tasks)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        #expect(pool.isOpen(0))
        // The readiness loop's call starts the due probe with no lookup at all; a slow probe is
        // not doubled by the lookups and calls that come while it is in flight.
        broken.reply(.slow(.seconds(1), ["198.18.0.2"]))
        clock.advance(by: .seconds(1))
        pool.probeDue()
        for _ in 0..<5 {
            pool.probeDue()
            _ = await pool.query(question, deadline: clock.now + .seconds(1))
        }
        await clock.waitForSleepers(1)
        #expect(broken.queries == 2 && clock.sleepers == 1, "one probe, asleep in the upstream")
        #expect(pool.healthSnapshot[0].probing)
        clock.advance(by: .seconds(1))
        await tasks.drain()
        #expect(broken.queries == 2 && !pool.isOpen(0) && !pool.healthSnapshot[0].probing)
    }

    @Test func aStalledUpstreamIsHedgedAfterItsDelayAndThreeMissesOpenItsCircuit() async throws {
        let stalled = ScriptedUpstream("https://stalled.test/q", clock: clock, .slow(.seconds(10), ["198.18.0.9"]))
        let healthy = ScriptedUpstream("https://healthy.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let pool = UpstreamPool([stalled, healthy], clock: clock, failureThreshold: 3, spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        #expect(pool.hedgeDelay(0) == .milliseconds(200), "not yet measured")
        var delays: [Duration] = []
        for round in 1...3 {
            let started = clock.now
            let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
            await clock.waitForSleepers(2)  // the stalled upstream, and the hedge timer
            #expect(healthy.queries == round - 1, "not asked before the hedge delay")
            delays.append(pool.hedgeDelay(0))
            clock.advance(by: delays[round - 1])
            let outcome = await lookup.value
            #expect(outcome.upstream?.identifier == "https://healthy.test/q")
            #expect(clock.now - started == delays[round - 1], "the lookup took the hedge delay, no more")
            #expect(clock.sleepers == 0, "the stalled attempt was cancelled, not left behind")
            #expect(pool.healthSnapshot[0].consecutiveFailures == round, "an attempt outrun counts as failed")
        }
        // An outrun attempt is no round trip (Karn's rule): the delay stays what answers made it. (A
        // daemon whose first readiness probe timed out once hedged its first lookups at the 1 s bound.)
        #expect(delays == [.milliseconds(200), .milliseconds(200), .milliseconds(200)])
        #expect(pool.isOpen(0))
        // Open: the next lookup goes to the healthy upstream at once, nothing waits.
        let direct = await pool.query(question, deadline: clock.now + .seconds(3))
        #expect(direct.upstream?.identifier == "https://healthy.test/q" && stalled.queries == 3)
    }

    /// One upstream whose first connection is stalled (a lost segment holds every answer behind it)
    /// and whose second connection answers.
    final class TwoConnections: SecondConnectionUpstream, @unchecked Sendable {
        // Safety: both parts are immutable; ScriptedUpstream is thread-safe.
        let first: ScriptedUpstream
        let second: ScriptedUpstream
        init(first: ScriptedUpstream, second: ScriptedUpstream) { (self.first, self.second) = (first, second) }
        var identifier: String { first.identifier }
        var source: Resolution.Source { .dot }
        func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
            try await first.query(question, timeout: timeout)
        }
        func makeSecondConnection() -> any DNSUpstream { second }
    }

    @Test func aLoneUpstreamLatePastItsHedgeDelayIsAskedAgainOnItsSecondConnectionUncharged() async throws {
        let first = ScriptedUpstream("tls://only.test", clock: clock, .slow(.seconds(10), ["198.18.0.9"]))
        let second = ScriptedUpstream("tls://only.test", clock: clock, .slow(.milliseconds(160), ["198.18.0.1"]))
        let pool = UpstreamPool([TwoConnections(first: first, second: second)], clock: clock, failureThreshold: 1, spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        let started = clock.now
        let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(2)  // the first connection's wait, and the hedge timer
        #expect(second.queries == 0, "not asked before the hedge delay")
        clock.advance(by: .milliseconds(200))  // the unmeasured hedge delay
        await clock.waitForSleepers(2)  // the first connection's wait, and the second's
        #expect(second.queries == 1 && first.queries == 1)
        clock.advance(by: .milliseconds(160))
        let outcome = await lookup.value
        guard case .addresses(let addresses, _)? = outcome.answer?.answer else {
            Issue.record("no answer: \(outcome.failures)")
            return
        }
        #expect(addresses.map(\.ip.description) == ["198.18.0.1"], "the second connection's answer")
        #expect(clock.now - started == .milliseconds(360), "the hedge delay and the second connection's round trip")
        #expect(outcome.failures.isEmpty, "the same server answered: nothing failed")
        #expect(pool.healthSnapshot[0].consecutiveFailures == 0 && !pool.isOpen(0), "its lateness was the connection's, not the server's")
        #expect(pool.healthSnapshot[0].secondConnectionBudget.tokens == HedgeBudget.burst - 1, "one copy spent, nothing earned by a late answer")
        // With another upstream left whose circuit is open, the second connection is asked, not it
        // (an open circuit is asked only when everything else failed).
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.serverFailure))
        let stalled = ScriptedUpstream("tls://two.test", clock: clock, .slow(.seconds(10), ["198.18.0.9"]))
        let spare = ScriptedUpstream("tls://two.test", clock: clock, .slow(.milliseconds(160), ["198.18.0.2"]))
        let mixed = UpstreamPool(
            [broken, TwoConnections(first: stalled, second: spare)], clock: clock, failureThreshold: 1, spawner: DrainableTasks())
        for round in 1...2 {
            let lookup = Task { await mixed.query(question, deadline: clock.now + .seconds(3)) }
            await clock.waitForSleepers(2)
            #expect(mixed.isOpen(0) && broken.queries == 1, "opened by its first failure, not asked again")
            clock.advance(by: mixed.hedgeDelay(1))
            await clock.waitForSleepers(2)
            #expect(spare.queries == round)
            clock.advance(by: .milliseconds(160))
            #expect(await lookup.value.upstream?.identifier == "tls://two.test")
        }
        // A server whose answers take a second — its hedge delay at the 1 s bound — is slow or busy,
        // not stalled by a lost segment: it is not sent a second copy of each query (F60-1).
        let slowFirst = ScriptedUpstream("tls://slow.test", clock: clock, .slow(.seconds(1), ["198.18.0.3"]))
        let slowSecond = ScriptedUpstream("tls://slow.test", clock: clock, .slow(.seconds(10), ["198.18.0.4"]))
        let slowPool = UpstreamPool([TwoConnections(first: slowFirst, second: slowSecond)], clock: clock, spawner: DrainableTasks())
        let training = Task { await slowPool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(200))  // unmeasured: the second connection is asked
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(800))
        #expect(await training.value.upstream?.identifier == "tls://slow.test" && slowSecond.queries == 1)
        #expect(slowPool.hedgeDelay(0) == .seconds(1), "RTT 1 s: the delay is at its bound")
        let waitedForFirst = Task { await slowPool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(1)
        #expect(clock.sleepers == 1, "no hedge timer")
        clock.advance(by: .seconds(1))
        #expect(await waitedForFirst.value.upstream?.identifier == "tls://slow.test" && slowSecond.queries == 1, "not asked again")
        #expect(slowPool.healthSnapshot[0].secondConnectionBudget.tokens == HedgeBudget.burst - 1, "an answer at the bound earns nothing")
        // Without hedging the second connection is never asked.
        let plain = UpstreamPool([TwoConnections(first: first, second: second)], clock: clock, spawner: DrainableTasks(), hedging: false)
        let waited = Task { await plain.query(question, deadline: clock.now + .seconds(1)) }
        await clock.waitForSleepers(1)
        #expect(clock.sleepers == 1, "no hedge timer")
        clock.advance(by: .seconds(1))
        #expect(await waited.value.reply == nil && second.queries == 1)
    }

    /// F60-3: a second connection that fails other than by a timeout (closed after the handshake,
    /// reset on path) rests 10 s: one failed lookup there costs up to three handshakes.
    @Test func aSecondConnectionThatFailsRestsTenSeconds() async throws {
        let first = ScriptedUpstream("tls://rest.test", clock: clock, .slow(.milliseconds(300), ["198.18.0.5"]))
        let second = ScriptedUpstream("tls://rest.test", .fail(.connectFailed))
        let pool = UpstreamPool([TwoConnections(first: first, second: second)], clock: clock, spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        let one = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(200))  // the unmeasured hedge delay: the second fails at once
        for _ in 0..<10_000 where second.queries == 0 { await Task.yield() }
        #expect(second.queries == 1)
        let failedAt = clock.now
        clock.advance(by: .milliseconds(100))
        #expect(await one.value.upstream?.identifier == "tls://rest.test", "the first connection's answer")
        #expect(pool.healthSnapshot[0].secondConnectionRestsUntil == failedAt + .seconds(10))
        #expect(pool.healthSnapshot[0].consecutiveFailures == 0, "not charged to the server")
        // Late again within the rest: the second connection is not asked.
        first.reply(.slow(.milliseconds(950), ["198.18.0.5"]))
        let delay = pool.hedgeDelay(0)
        #expect(delay < .milliseconds(950))
        let two = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(1)
        #expect(clock.sleepers == 1, "resting: no hedge timer at all")
        clock.advance(by: delay)
        for _ in 0..<1_000 { await Task.yield() }  // the hedge timer's turn: it asks nobody
        clock.advance(by: .milliseconds(950) - delay)
        #expect(await two.value.upstream?.identifier == "tls://rest.test" && second.queries == 1)
    }

    @Test func theSecondConnectionsBudgetIsABurstOfTwentyThenAQuarterPerAnswerInTime() {
        var budget = HedgeBudget()
        var taken = 0
        while budget.take() { taken += 1 }
        #expect(taken == 20, "the burst")
        // A server late on every lookup (busy: F60-6) earns nothing: no more copies at all.
        let more = budget.take()
        #expect(!more)
        // Answers in time earn a quarter each: one copy per four of them, no more.
        taken = 0
        for _ in 0..<400 {
            budget.earn()
            if budget.take() { taken += 1 }
        }
        #expect(taken == 100)
        // Answers that need no copy save up to the burst again, not past it.
        for _ in 0..<1_000 { budget.earn() }
        #expect(budget.tokens == HedgeBudget.burst)
    }

    @Test func theHedgeDelayIsTheMeasuredRTTPlusFourDeviationsWithinItsBounds() async throws {
        let slow = ScriptedUpstream("https://slow.test/q", clock: clock, .slow(.milliseconds(100), ["198.18.0.9"]))
        let other = ScriptedUpstream("https://other.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let pool = UpstreamPool([slow, other], clock: clock, spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(100))  // answers before the 200 ms hedge delay
        #expect(await lookup.value.upstream?.identifier == "https://slow.test/q" && other.queries == 0)
        // RTT 100 ms, deviation half of it at first: 100 + 4 × 50 ms.
        #expect(pool.hedgeDelay(0) == .milliseconds(300))
        // An instant upstream's delay is the 50 ms floor; a hedge never waits more than 1 s.
        let instant = UpstreamPool([other, slow], clock: clock, spawner: DrainableTasks())
        _ = await instant.query(question, deadline: clock.now + .seconds(3))
        #expect(instant.hedgeDelay(0) == .milliseconds(50))
        let crawling = ScriptedUpstream("https://crawling.test/q", clock: clock, .slow(.seconds(2), ["198.18.0.9"]))
        let late = UpstreamPool([crawling, other], clock: clock, spawner: DrainableTasks(), hedging: false)
        let waited = Task { await late.query(question, deadline: clock.now + .seconds(5)) }
        await clock.waitForSleepers(1)
        #expect(clock.sleepers == 1, "without hedging no timer runs")
        clock.advance(by: .seconds(2))
        #expect(await waited.value.upstream?.identifier == "https://crawling.test/q" && other.queries == 1)
        #expect(late.hedgeDelay(0) == .seconds(1))
    }

    @Test func anUpstreamThatAnswersOnlyTheProbeWaitsLongerEachTime() async throws {
        // F48-2: it answers the probe (NS) and drops every lookup (A).
        let tasks = DrainableTasks()
        let useless = ScriptedUpstream("https://useless.test/q") { type in type == .ns ? .nodata : .fail(.timeout) }
        let healthy = ScriptedUpstream("https://healthy.test/q", .addresses(["198.18.0.1"], ttl: 300))
        let pool = UpstreamPool([useless, healthy], clock: clock, failureThreshold: 3, baseBackoff: .seconds(1), spawner: tasks, hedging: false)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        var backoffs: [Duration] = []
        for _ in 0..<4 {
            while !pool.isOpen(0) { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
            backoffs.append(pool.healthSnapshot[0].backoff)
            clock.advance(by: pool.healthSnapshot[0].backoff)
            _ = await pool.query(question, deadline: clock.now + .seconds(1))  // starts the probe
            await tasks.drain()
            #expect(!pool.isOpen(0), "the probe's answer closes it, on probation")
        }
        #expect(backoffs == [.seconds(1), .seconds(2), .seconds(4), .seconds(8)])
        // The readiness loop's idle probes leave an open circuit to its own: no probe outside the backoff.
        while !pool.isOpen(0) { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        let asked = useless.queries
        await pool.probeIdle(DNSMessage.Question(name: .root, type: .ns), idle: .zero, timeout: .seconds(1))
        #expect(useless.queries == asked && pool.isOpen(0))
        // Once lookups are answered again, the next failure starts from the base backoff.
        useless.reply(.addresses(["198.18.0.2"], ttl: 300))
        clock.advance(by: .seconds(16))
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        await tasks.drain()
        #expect(await pool.query(question, deadline: clock.now + .seconds(1)).upstream?.identifier == "https://useless.test/q")
        useless.reply(.fail(.timeout))
        while !pool.isOpen(0) { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        #expect(pool.healthSnapshot[0].backoff == .seconds(1))
    }

    @Test func aHedgeIsChargedOnlyWhenItsOwnDelayPassed() async throws {
        // F48-3: the first answers late but before the second: the second is not charged.
        let first = ScriptedUpstream("https://first.test/q", clock: clock, .slow(.milliseconds(300), ["198.18.0.1"]))
        let second = ScriptedUpstream("https://second.test/q", clock: clock, .slow(.seconds(1), ["198.18.0.2"]))
        let pool = UpstreamPool([first, second], clock: clock, spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
        await clock.waitForSleepers(2)  // the first's answer and its hedge timer
        clock.advance(by: .milliseconds(200))
        await clock.waitForSleepers(2)  // the first's answer and the second's (the last has no timer)
        #expect(second.queries == 1)
        clock.advance(by: .milliseconds(100))
        let outcome = await lookup.value
        #expect(outcome.upstream?.identifier == "https://first.test/q" && outcome.failures.isEmpty)
        #expect(pool.healthSnapshot[1].consecutiveFailures == 0 && pool.healthSnapshot[0].consecutiveFailures == 0)
    }

    @Test func hedgingAsksAtMostTwoAtATimeAndAFailureStartsTheNextAtOnce() async throws {
        let slow = ScriptedUpstream("https://slow.test/q", clock: clock, .slow(.seconds(10), ["198.18.0.1"]))
        let failing = ScriptedUpstream("https://failing.test/q", .fail(.serverFailure))
        let slower = ScriptedUpstream("https://slower.test/q", clock: clock, .slow(.seconds(10), ["198.18.0.2"]))
        let fast = ScriptedUpstream("https://fast.test/q", .addresses(["198.18.0.3"], ttl: 300))
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        // F48-4: two late upstreams, the third is not asked while both run.
        let two = UpstreamPool([slow, slower, fast], clock: clock, spawner: DrainableTasks())
        let capped = Task { await two.query(question, deadline: clock.now + .seconds(30)) }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(200))  // the slow one's delay: the slower one is asked too
        await clock.waitForSleepers(3)  // both answers and the slower one's timer
        clock.advance(by: .milliseconds(200))  // its delay passes too: still two, no third
        #expect(fast.queries == 0 && slower.queries == 1)
        capped.cancel()
        _ = await capped.value
        // F48-6: the second fails at once while the first still runs: the third starts at once.
        let start = clock.now
        let pool = UpstreamPool([slow, failing, fast], clock: clock, spawner: DrainableTasks())
        let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(30)) }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(200))
        let outcome = await lookup.value
        #expect(outcome.upstream?.identifier == "https://fast.test/q" && clock.now - start == .milliseconds(200))
    }

    @Test func withEveryCircuitOpenLookupsStillAskTheUpstreams() async throws {
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.connectFailed))
        let pool = UpstreamPool([broken], clock: clock, failureThreshold: 3, baseBackoff: .seconds(60), spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        for _ in 0..<3 { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        #expect(pool.isOpen(0))
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        #expect(broken.queries == 4, "nothing else is left: a dead upstream is asked rather than nothing")
    }

    @Test func anOpenCircuitsBackoffMovesOnlyWithItsProbes() async throws {
        // R4: lookups failing on an open circuit (nothing else left) do not double its backoff.
        let tasks = DrainableTasks()
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.connectFailed))
        let pool = UpstreamPool([broken], clock: clock, failureThreshold: 3, baseBackoff: .seconds(1), spawner: tasks)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        for _ in 0..<3 { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        #expect(pool.isOpen(0) && pool.healthSnapshot[0].backoff == .seconds(1))
        for _ in 0..<10 { _ = await pool.query(question, deadline: clock.now + .seconds(1)) }
        #expect(broken.queries == 13 && pool.healthSnapshot[0].backoff == .seconds(1), "ten lookups later: still 1 s")
        // Its probe fails: now it doubles.
        clock.advance(by: .seconds(1))
        pool.probeDue()
        await tasks.drain()
        #expect(pool.healthSnapshot[0].backoff == .seconds(2))
    }

    @Test func anOpenCircuitIsNeverAHedgeTarget() async throws {
        // R4: an open circuit is asked only when every closed one has failed.
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.connectFailed))
        let slow = ScriptedUpstream("https://slow.test/q", clock: clock, .slow(.milliseconds(500), ["198.18.0.1"]))
        let pool = UpstreamPool([broken, slow], clock: clock, failureThreshold: 3, baseBackoff: .seconds(60), spawner: DrainableTasks())
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        for _ in 0..<3 {
            let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(3)) }
            await clock.waitForSleepers(2)  // the slow answer, and the broken one's hedge timer
            clock.advance(by: .milliseconds(500))
            _ = await lookup.value
        }
        #expect(pool.isOpen(0) && broken.queries == 3)
        // The slow one is first now; its hedge delay (RTT 500 ms + deviations) passes: the open one
        // is not asked, and no timer runs for it.
        let lookup = Task { await pool.query(question, deadline: clock.now + .seconds(10)) }
        await clock.waitForSleepers(1)
        for _ in 0..<100 { await Task.yield() }
        #expect(clock.sleepers == 1, "only the slow upstream's own wait, no hedge timer")
        clock.advance(by: .milliseconds(500))
        #expect(await lookup.value.upstream?.identifier == "https://slow.test/q" && broken.queries == 3)
        // When the closed one fails, the open one is asked (nothing else is left).
        slow.reply(.fail(.connectFailed))
        _ = await pool.query(question, deadline: clock.now + .seconds(3))
        #expect(broken.queries == 4)
    }

    @Test func fastestStrategyPrefersTheLowerDecayedRTT() async throws {
        let slow = ScriptedUpstream("https://slow.test/q", .slow(.milliseconds(40), ["198.18.0.1"]))
        let fast = ScriptedUpstream("https://fast.test/q", .addresses(["198.18.0.2"], ttl: 300))
        // Round-trip times are measured on the pool's clock: a real one here, as the fake sleeps in real time.
        let clock = MonotonicClock()
        let pool = UpstreamPool([slow, fast], strategy: .fastest, clock: clock)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        // Both unmeasured at first: each gets measured once.
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        _ = await pool.query(question, deadline: clock.now + .seconds(1))
        var winners: [String] = []
        for _ in 0..<10 { winners.append(await pool.query(question, deadline: clock.now + .seconds(1)).upstream?.identifier ?? "-") }
        #expect(winners.filter { $0 == "https://fast.test/q" }.count >= 9)
    }

    @Test func raceStrategyTakesTheFirstValidAnswer() async throws {
        let slow = ScriptedUpstream("https://slow.test/q", .slow(.seconds(20), ["198.18.0.1"]))
        let fast = ScriptedUpstream("https://fast.test/q", .addresses(["198.18.0.2"], ttl: 300))
        let pool = UpstreamPool([slow, fast], strategy: .race, clock: clock)
        let question = DNSMessage.Question(name: try DomainName("www.hd.test"), type: .a)
        let start = ContinuousClock.now
        let outcome = await pool.query(question, deadline: clock.now + .seconds(40))
        #expect(outcome.upstream?.identifier == "https://fast.test/q")
        #expect(ContinuousClock.now - start < .seconds(8), "the slow one (20 s) is cancelled, not waited for")
        #expect(slow.queries == 1 && fast.queries == 1)
    }

    @Test func raceFallsBackWhenTheFirstAnswerIsAFailure() async throws {
        let broken = ScriptedUpstream("https://broken.test/q", .fail(.malformedResponse))
        let slow = ScriptedUpstream("https://slow.test/q", .slow(.milliseconds(50), ["198.18.0.1"]))
        let pool = UpstreamPool([broken, slow], strategy: .race, clock: clock)
        let outcome = await pool.query(.init(name: try DomainName("www.hd.test"), type: .a), deadline: clock.now + .seconds(2))
        #expect(outcome.upstream?.identifier == "https://slow.test/q")
        #expect(outcome.failures.map(\.code) == [.malformedResponse])
    }
}
