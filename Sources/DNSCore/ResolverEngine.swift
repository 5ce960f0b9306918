import CoreMetrics
import Logging
import Synchronization

/// The resolution engine: cache, serve-stale, prefetch, single-flight, upstream pool and fallback.
///
/// Pure Swift with every dependency injected (upstreams, clock), so it is tested without a network.
/// `HTTPDNSResolver` is this engine over DoH, DoT, JSON and commercial-API upstreams.
package final class ResolverEngine: Sendable {
    package let options: ResolverOptions
    package let pool: UpstreamPool
    package let cache: ResolutionCache
    private let fallback: (any DNSUpstream)?
    package let clock: any ResolverClock
    /// Where background refreshes and prefetches run (tests drain it).
    private let spawner: any TaskSpawner
    private let flights = SingleFlight<CacheKey, FetchOutcome>()
    /// Forwarded messages in flight, by their bytes with an ID of 0: identical queries share one.
    package let forwarding = SingleFlight<[UInt8], [UInt8]>()
    private let memo = ResolutionMemo()
    package let metrics: ResolverMetrics
    private let logger: Logger
    /// The cache shared with other resolvers, when attached (``attachSharedCache(_:)``).
    private let shared = Mutex<(any SharedCache)?>(nil)

    /// How an upstream round for one (name, type) ended.
    enum FetchOutcome: Sendable {
        /// An upstream answered (addresses, NXDOMAIN or NODATA); `entry` is now in the cache, and
        /// `failures` are the upstreams that failed before it.
        case answered(CacheEntry, failures: [DNSError.Attempt])
        /// Every upstream failed. `stale` is the answer left in place, still within its stale
        /// window (RFC 8767: served); without one, the failure is remembered for `failureTTL`.
        case failed(DNSError, stale: CacheEntry?)
        /// The round was cancelled: it says nothing about the upstreams, and nothing was stored.
        case cancelled
    }

    /// - Parameters:
    ///   - upstreams: trusted resolvers, in order of preference.
    ///   - options: timeouts, TTL clamps, strategy, serve-stale and the rest (``ResolverOptions``).
    ///   - fallback: the system's DNS, used only under ``ResolverOptions/Fallback/system``.
    ///   - clock: monotonic time for TTLs, stale windows and circuit breakers.
    ///   - spawner: where background work (prefetch, refreshes) runs; tests drain it instead of sleeping.
    ///   - metrics: where the counters and timers of ``ResolverMetrics`` go; by default the factory
    ///     the application bootstrapped (`MetricsSystem.factory`). The engine never bootstraps one.
    ///   - logger: upstream failures (debug), circuit-breaker changes (warning, notice) and serve-stale
    ///     events (debug); by default nothing is logged.
    package init(
        upstreams: [any DNSUpstream], options: ResolverOptions = .init(),
        fallback: (any DNSUpstream)? = nil, clock: any ResolverClock = MonotonicClock(),
        spawner: any TaskSpawner = UnstructuredTasks(), metrics: (any MetricsFactory)? = nil, logger: Logger? = nil
    ) {
        self.options = options
        self.spawner = spawner
        let logger = logger ?? .silent
        self.metrics = ResolverMetrics(factory: metrics, upstreams: upstreams.map(\.identifier))
        self.logger = logger
        let probe = DNSMessage.Question(name: (try? DomainName(options.healthCheckName)) ?? .root, type: options.healthCheckType)
        self.pool = UpstreamPool(
            upstreams, strategy: options.strategy, clock: clock, probe: probe, probeTimeout: options.timeout, spawner: spawner,
            hedging: options.hedging,
            metrics: self.metrics, logger: logger)
        self.cache = ResolutionCache(capacity: options.cacheCapacity)
        self.fallback = fallback
        self.clock = clock
    }

    /// Resolves `host`: an IP literal as it is, a fresh cached answer at once, else one lookup per
    /// address family shared by every caller asking the same (single flight), served stale when
    /// the options allow. Throws the lookup's ``DNSError``.
    ///
    /// `name` is `host` parsed already, so that it is not parsed again. `afterMiss` says the caller
    /// has just asked for a hit (``resolveWithoutWaiting(_:name:type:)``) and got none: the cache is
    /// not asked for one again (each type's lookup still reads its entry, for stale answers and
    /// prefetch).
    package func resolve(
        _ host: String, name parsedName: DomainName? = nil, type: AddressQuery = .both, afterMiss: Bool = false
    ) async throws(DNSError) -> Resolution {
        let started = clock.now
        var parsed = parsedName
        if !afterMiss, var hit = hit(host, type, parsed: &parsed) {
            hit.elapsed = clock.now - started
            return hit
        }
        let name: DomainName
        if let parsed { name = parsed } else { name = try DomainName(host) }
        guard !pool.upstreams.isEmpty || fallback != nil else {
            throw DNSError(.invalidConfiguration, "no trusted upstream is configured")
        }
        let outcomes: [TypeOutcome]
        switch type {
        case .a, .aaaa:
            outcomes = [await lookup(name, type.recordTypes[0])]
        case .both:
            async let v4 = lookup(name, .a)
            async let v6 = lookup(name, .aaaa)
            outcomes = await [v4, v6]
        }
        if Task.isCancelled { throw DNSError(.cancelled, "the lookup of \(host) was cancelled") }
        return try merge(host: host, name: name, outcomes: outcomes, elapsed: clock.now - started)
    }

    /// The hit path of `resolve` alone, for callers that must not suspend (an event loop): an IP
    /// literal, or a fresh answer that needs no lookup (not stale, not a remembered failure, not in
    /// its prefetch window), counted as a hit like `resolve` counts it. Nil when `resolve` would
    /// have to go out: call it then. Negative answers are nil here too.
    /// `name` is `host` parsed already, if the caller has it.
    package func resolveWithoutWaiting(_ host: String, name: DomainName? = nil, type: AddressQuery = .both) -> Resolution? {
        var parsed = name
        return hit(host, type, parsed: &parsed)
    }

    /// `resolveWithoutWaiting`, leaving the name it parsed (if it got that far) in `parsed`, so that
    /// a miss does not parse it again; a name in `parsed` on entry is used as it is.
    private func hit(_ host: String, _ type: AddressQuery, parsed: inout DomainName?) -> Resolution? {
        if let literal = IPAddress(host) {
            return Resolution(
                host: host, addresses: [ResolvedAddress(ip: literal, ttl: 0)], source: .literal,
                upstream: nil, elapsed: .zero, expiresAt: clock.now)
        }
        // A finished resolution kept from the last second, or one built from fresh entries.
        let now = clock.now
        guard let hit = memo.resolution(for: host, type: type, now: now) ?? fromCache(host, type, now: now, parsed: &parsed)?.usable else {
            return nil
        }
        metrics.hits.increment(by: type == .both ? 2 : 1)
        return hit
    }

    /// The cached answer for `host`, fresh or stale, without any I/O: for hot paths that must not
    /// suspend. Nil when nothing usable is cached. A peek: it neither counts as a hit in the metrics
    /// nor starts a prefetch.
    package func cachedResolution(for host: String, name: DomainName? = nil, type: AddressQuery = .both) -> Resolution? {
        let now = clock.now
        if let hit = memo.resolution(for: host, type: type, now: now) { return hit }
        var parsed = name
        return fromCache(host, type, now: now, parsed: &parsed)?.resolution
    }

    /// A resolution built from the cache alone (fresh or stale), and the same resolution as `usable`
    /// when a lookup may return it without the slow path: every entry fresh, none a remembered
    /// failure, none in its prefetch window. Usable ones are kept in the memo.
    private func fromCache(
        _ host: String, _ type: AddressQuery, now: ResolverInstant, parsed: inout DomainName?
    )
        -> (resolution: Resolution, usable: Resolution?)?
    {
        let generation = memo.currentGeneration
        guard let name = parsed ?? (try? DomainName(host)) else { return nil }
        parsed = name
        var outcomes: [TypeOutcome] = []
        var validUntil = now + .seconds(1)
        var usable = true
        for recordType in type.recordTypes {
            guard let entry = cache.entry(for: CacheKey(name, recordType)),
                let outcome = outcome(from: entry, type: recordType, now: now, allowStale: true)
            else { return nil }
            switch entry.payload {
            case .addresses:
                let prefetchFrom = options.prefetch ? entry.expiresAt - (entry.expiresAt - entry.storedAt) / 10 : entry.expiresAt
                validUntil = min(validUntil, prefetchFrom)
            case .negative:
                validUntil = min(validUntil, entry.expiresAt)
            case .failure:
                usable = false
            }
            usable = usable && !outcome.stale
            outcomes.append(outcome)
        }
        guard let resolution = try? merge(host: host, name: name, outcomes: outcomes, elapsed: .zero) else { return nil }
        guard usable, now < validUntil else { return (resolution, nil) }
        memo.store(resolution, for: host, type: type, validUntil: validUntil, generation: generation)
        return (resolution, resolution)
    }

    /// Resolves `hosts` in the background to warm the cache (pre-resolve at start-up).
    package func prefetch(_ hosts: [String], type: AddressQuery = .both) {
        spawner.spawn {
            await self.warmInBatches(hosts, type: type)
            for host in hosts {
                self.spawner.spawn { _ = try? await self.resolve(host, type: type) }
            }
        }
    }

    /// Forgets every cached answer.
    package func removeAll() {
        cache.removeAll()
        memo.removeAll()
    }

    /// Labels the kept resolution of `host` with its DNSSEC status (see ``ResolutionMemo``).
    package func label(_ host: String, type: AddressQuery, with status: DNSSECStatus, addresses: [ResolvedAddress]) {
        memo.label(host, type: type, with: status, addresses: addresses)
    }

    /// Forgets `host`'s cached addresses (both types), such as answers that failed validation.
    package func forget(_ host: String) {
        guard let name = try? DomainName(host) else { return }
        cache.remove(CacheKey(name, .a))
        cache.remove(CacheKey(name, .aaaa))
        memo.invalidate()
    }

    /// Lookups of (`name`, `type`) waiting on another's upstream round (for tests).
    package func followers(of name: String, type: RecordType) -> Int {
        guard let name = try? DomainName(name) else { return 0 }
        return flights.followers(CacheKey(name, type))
    }

    /// Entries in the cache now.
    package var cachedEntryCount: Int { cache.count }

    /// Asks `sharedCache` after each local miss, before the upstreams, and gives it every upstream
    /// answer (addresses, NXDOMAIN, NODATA; never failures).
    package func attachSharedCache(_ sharedCache: any SharedCache) {
        shared.withLock { $0 = sharedCache }
    }

    /// The cache as bytes for persistence (see `CacheSnapshot`); `wallMilliseconds` is the Unix
    /// time now, which anchors the expiries across a restart.
    package func snapshot(wallMilliseconds: UInt64) -> [UInt8] {
        CacheSnapshot.encode(cache.snapshot(), monotonicNow: clock.now, wallMilliseconds: wallMilliseconds)
    }

    /// Loads a snapshot into the cache; entries past their stale window are dropped.
    /// - Returns: the number of entries loaded.
    /// - Throws: ``DNSError`` for a corrupt, truncated or foreign file; nothing is loaded then.
    @discardableResult
    package func restore(_ bytes: [UInt8], wallMilliseconds: UInt64) throws(DNSError) -> Int {
        let entries = try CacheSnapshot.decode(bytes, monotonicNow: clock.now, wallMilliseconds: wallMilliseconds)
        for (key, entry) in entries { store(entry, for: key) }
        return entries.count
    }

    // MARK: One record type

    /// What one record type contributes to a resolution.
    struct TypeOutcome: Sendable {
        var type: RecordType
        var payload: CacheEntry.Payload
        /// Where the answer came from; nil for a failure, which came from nowhere.
        var source: Resolution.Source?
        var upstream: String?
        var expiresAt: ResolverInstant
        var stale = false
        var failures: [DNSError.Attempt] = []
    }

    func lookup(_ name: DomainName, _ type: RecordType) async -> TypeOutcome {
        let key = CacheKey(name, type)
        let now = clock.now
        let entry = cache.entry(for: key)
        switch CacheDecision(entry, at: now, options: options, hasFallback: fallback != nil) {
        case let .fresh(prefetch):
            if prefetch, refreshInBackground(key) { metrics.nearExpiryPrefetches.increment() }
            metrics.hits.increment()
            if let entry, let fresh = outcome(from: entry, type: type, now: now, allowStale: false) { return fresh }
        case .rememberedFailureWithFallback:
            metrics.misses.increment()
            if let fallback { return await askFallback(fallback, key, failures: []) }
        case let .stale(waitFirst):
            // RFC 8767: answer from stale, at once or when no fresh answer came within the delay,
            // and refresh behind the caller's back.
            if let delay = waitFirst, let fetched = await refresh(key, waitingAtMost: delay) {
                return await finish(key, type, fetched, startedAt: now)
            }
            if refreshInBackground(key) { metrics.stalePrefetches.increment() }
            metrics.staleServed.increment()
            logger.debug("serving stale", metadata: ["name": "\(name)", "type": "\(type)"])
            if let entry, let stale = outcome(from: entry, type: type, now: clock.now, allowStale: true) { return stale }
        case .miss:
            break
        }
        metrics.misses.increment()
        return await finish(key, type, await round(key, afterMiss: true), startedAt: now)
    }

    /// One upstream round for `key`, shared by concurrent callers; a cancelled wait is `.cancelled`.
    ///
    /// `afterMiss`: the caller found nothing usable in the cache. Between that look and joining the
    /// flight, another flight for `key` may have ended (it runs on another thread); the round then
    /// takes what that flight stored when the cache's own rule (``CacheDecision``) calls it fresh,
    /// instead of asking the upstreams again.
    func round(_ key: CacheKey, afterMiss: Bool = false) async -> FetchOutcome {
        // SingleFlight restarts the work for the followers when its leader is cancelled: it must see
        // a cancelled round as its failure.
        let work: @Sendable () async -> Result<FetchOutcome, DNSError> = {
            if afterMiss, let landed = self.cache.entry(for: key),
                case .fresh = CacheDecision(landed, at: self.clock.now, options: self.options, hasFallback: self.fallback != nil)
            {
                return .success(.answered(landed, failures: []))
            }
            let outcome = await self.fetch(key)
            if case .cancelled = outcome { return .failure(DNSError(.cancelled, "cancelled")) }
            return .success(outcome)
        }
        switch await flights.run(key, work) {
        case let .success(outcome): return outcome
        case .failure: return .cancelled
        }
    }

    /// The outcome of a finished upstream round for `key`: ``finished(_:_:_:startedAt:)``, else
    /// the system resolver's.
    private func finish(
        _ key: CacheKey, _ type: RecordType, _ result: FetchOutcome,
        startedAt now: ResolverInstant
    ) async -> TypeOutcome {
        switch finished(key, type, result, startedAt: now) {
        case let .outcome(outcome): return outcome
        case let .askFallback(fallback, failures): return await askFallback(fallback, key, failures: failures)
        }
    }

    /// What a finished round comes to without suspending: the outcome, or the fallback to ask.
    private enum Finished {
        case outcome(TypeOutcome)
        case askFallback(any DNSUpstream, [DNSError.Attempt])
    }

    /// The synchronous part of ``finish(_:_:_:startedAt:)``, kept out of the async function: an
    /// async function's context holds every temporary of its body and is allocated per call in the
    /// task's allocator (past its first slab, with malloc), and this body's made it ~9.6 KB a lookup
    /// (BENCHMARKS.md, "DNS over TLS").
    @inline(never)
    private func finished(
        _ key: CacheKey, _ type: RecordType, _ result: FetchOutcome,
        startedAt now: ResolverInstant
    ) -> Finished {
        switch result {
        case let .answered(entry, failures):
            var result =
                outcome(from: entry, type: type, now: clock.now, allowStale: true, fetched: true)
                ?? TypeOutcome(
                    type: type, payload: Self.expired(entry.payload), source: entry.source, upstream: entry.upstream,
                    expiresAt: entry.expiresAt)
            result.failures = failures
            if result.stale { metrics.staleServed.increment() }
            return .outcome(result)
        case let .failed(error, stale):
            if let stale, var result = outcome(from: stale, type: type, now: clock.now, allowStale: true) {
                result.failures = error.attempts
                if result.stale { metrics.staleServed.increment() }
                return .outcome(result)
            }
            if options.fallback == .system, let fallback {
                return .askFallback(fallback, error.attempts)
            }
            return .outcome(
                TypeOutcome(
                    type: type, payload: .failure(error), source: nil, upstream: nil, expiresAt: now,
                    failures: error.attempts))
        case .cancelled:
            let error = DNSError(.cancelled, "cancelled")
            return .outcome(
                TypeOutcome(
                    type: type, payload: .failure(error), source: nil, upstream: nil, expiresAt: now,
                    failures: []))
        }
    }

    /// Waits for a refresh of `key` for at most `delay`; nil when it takes longer, in which case it
    /// goes on in the background and lands in the cache.
    private func refresh(_ key: CacheKey, waitingAtMost delay: Duration) async -> FetchOutcome? {
        let first = FirstOf<FetchOutcome?>()
        return await withCheckedContinuation { continuation in
            first.arm(continuation)
            let clock = self.clock
            let deadline = clock.now + delay
            spawner.spawn {
                try? await clock.sleep(until: deadline)
                first.resume(with: nil)
            }
            spawner.spawn {
                let result = await self.round(key)
                first.resume(with: result)
            }
        }
    }

    /// Starts a background refresh of `key` unless one runs; returns whether it started one.
    @discardableResult
    private func refreshInBackground(_ key: CacheKey) -> Bool {
        guard !flights.isRunning(key) else { return false }
        spawner.spawn { _ = await self.round(key) }
        return true
    }

    private func store(_ entry: CacheEntry, for key: CacheKey) {
        if cache.store(entry, for: key) { metrics.evictions.increment() }
        memo.invalidate()
    }

    /// Asks the pool and stores what it learns. A total failure keeps a stale answer in place (so it
    /// goes on being served until its window ends) and is otherwise remembered for `failureTTL`.
    private func fetch(_ key: CacheKey) async -> FetchOutcome {
        let sharedCache = shared.withLock { $0 }
        if let sharedCache, let entry = await sharedCache.entry(for: key, now: clock.now) {
            // Only a fresh answer to this very question; anything else is a miss.
            let now = clock.now
            let answer = if case .failure = entry.payload { false } else { true }
            if answer, entry.storedAt <= now, now < entry.expiresAt {
                metrics.sharedHits.increment()
                store(entry, for: key)
                return .answered(entry, failures: [])
            }
        }
        let outcome = await pool.attempt(.lookup(DNSMessage.Question(name: key.name, type: key.type)), deadline: clock.now + options.timeout)
        let now = clock.now
        guard let answer = outcome.answer, let upstream = outcome.upstream else {
            let error = DNSError.combining(outcome.failures)
            // A cancelled query says nothing about the upstreams: remember nothing.
            if error.code == .cancelled || Task.isCancelled { return .cancelled }
            if let existing = cache.entry(for: key), case .addresses = existing.payload, now < existing.staleUntil {
                return .failed(error, stale: existing)
            }
            store(
                CacheEntry(
                    payload: .failure(error), source: .doh, upstream: nil, storedAt: now,
                    expiresAt: now + options.failureTTL, staleUntil: now + options.failureTTL), for: key)
            return .failed(error, stale: nil)
        }
        let entry = cacheEntry(for: answer, of: key, from: upstream, at: now)
        store(entry, for: key)
        sharedCache?.store(entry, for: key, now: now)
        return .answered(entry, failures: outcome.failures)
    }

    /// The cache entry for an upstream's answer: addresses live as long as their smallest TTL,
    /// clamped; NXDOMAIN and NODATA as long as the SOA says, at most `negativeTTL`.
    private func cacheEntry(for answer: UpstreamAnswer, of key: CacheKey, from upstream: any DNSUpstream, at now: ResolverInstant) -> CacheEntry {
        let entry: CacheEntry
        switch answer.answer {
        case let .addresses(addresses, canonicalName):
            // Every address lives as long as the entry: the smallest TTL, clamped.
            let lifetime = clamp(addresses.lazy.map(\.ttl).min() ?? 0)
            let seconds = UInt32(clamping: lifetime.components.seconds)
            entry = CacheEntry(
                payload: .addresses(
                    addresses.map { ResolvedAddress(ip: $0.ip, ttl: seconds) },
                    canonicalName: canonicalName == key.name ? nil : canonicalName),
                source: upstream.source, upstream: upstream.identifier, storedAt: now,
                expiresAt: now + lifetime, staleUntil: now + lifetime + options.staleWindow)
        case let .nxdomain(negative), let .nodata(negative):
            let code: DNSError.Code = if case .nxdomain = answer.answer { .nxdomain } else { .nodata }
            let ttl = min(negative.map { Duration.seconds(Int64($0)) } ?? options.negativeTTL, options.negativeTTL)
            entry = CacheEntry(
                payload: .negative(code, authority: answer.authority), source: upstream.source, upstream: upstream.identifier,
                storedAt: now, expiresAt: now + ttl, staleUntil: now + ttl)
        }
        return entry
    }

    /// An answer that is over as it arrives (a TTL of 0): a negative one's SOA goes with a TTL of
    /// 0 too, never the TTL the upstream wrote (which `negative_ttl` would have capped).
    private static func expired(_ payload: CacheEntry.Payload) -> CacheEntry.Payload {
        guard case let .negative(code, authority?) = payload else { return payload }
        var kept = authority
        kept.ttl = 0
        return .negative(code, authority: kept)
    }

    /// Warms the cache for `hosts` through the preferred upstream's batch API, when it has one:
    /// the names without a fresh answer, in groups of its batch size, the groups concurrently. What
    /// a batch leaves out (or a failed batch) is left to the per-name lookups that follow, so this
    /// never makes an answer worse, only the number of requests smaller.
    /// - Returns: the names the batches answered for every asked type, and the upstream's source.
    @discardableResult
    package func warmInBatches(_ hosts: [String], type: AddressQuery = .both) async -> (answered: Set<DomainName>, source: Resolution.Source) {
        guard let batcher = pool.upstreams.first as? any BatchingUpstream, batcher.batchSize > 1 else { return ([], .cache) }
        let now = clock.now
        var seen = Set<DomainName>()
        let names = hosts.compactMap { host -> DomainName? in
            guard IPAddress(host) == nil, let name = try? DomainName(host), seen.insert(name).inserted else { return nil }
            let fresh = type.recordTypes.allSatisfy { type in
                cache.entry(for: CacheKey(name, type)).map { now < $0.expiresAt } ?? false
            }
            return fresh ? nil : name
        }
        guard names.count > 1 else { return ([], batcher.source) }
        let groups = stride(from: 0, to: names.count, by: batcher.batchSize).map {
            Array(names[$0..<min($0 + batcher.batchSize, names.count)])
        }
        let answered = await withTaskGroup(of: [DomainName].self) { group in
            for batch in groups {
                group.addTask {
                    let answers: [(DNSMessage.Question, AddressAnswer)]
                    do {
                        answers = try await batcher.queryBatch(batch, timeout: self.options.timeout)
                    } catch {
                        self.logger.debug("batch lookup failed", metadata: ["upstream": "\(batcher.identifier)", "error": "\(error)"])
                        return []
                    }
                    let now = self.clock.now
                    var types: [DomainName: Int] = [:]
                    for (question, answer) in answers where batch.contains(question.name) && type.recordTypes.contains(question.type) {
                        let key = CacheKey(question.name, question.type)
                        self.store(self.cacheEntry(for: UpstreamAnswer(answer), of: key, from: batcher, at: now), for: key)
                        types[question.name, default: 0] += 1
                    }
                    return types.filter { $0.value == type.recordTypes.count }.map(\.key)
                }
            }
            return await group.reduce(into: Set<DomainName>()) { $0.formUnion($1) }
        }
        return (answered, batcher.source)
    }

    private func askFallback(_ fallback: any DNSUpstream, _ key: CacheKey, failures: [DNSError.Attempt]) async -> TypeOutcome {
        let now = clock.now
        do {
            let answer = try await fallback.query(DNSMessage.Question(name: key.name, type: key.type), timeout: options.timeout)
            switch answer {
            case let .addresses(addresses, canonicalName):
                let ttl = addresses.map(\.ttl).min() ?? 0
                metrics.fallbackAnswers.increment()
                return TypeOutcome(
                    type: key.type, payload: .addresses(addresses, canonicalName: canonicalName),
                    source: .system, upstream: fallback.identifier, expiresAt: now + .seconds(Int64(ttl)),
                    failures: failures)
            case .nxdomain:
                return TypeOutcome(
                    type: key.type, payload: .negative(.nxdomain), source: .system,
                    upstream: fallback.identifier, expiresAt: now, failures: failures)
            case .nodata:
                return TypeOutcome(
                    type: key.type, payload: .negative(.nodata), source: .system,
                    upstream: fallback.identifier, expiresAt: now, failures: failures)
            }
        } catch {
            let all = failures + [.init(upstream: fallback.identifier, code: error.code, message: error.message)]
            return TypeOutcome(
                type: key.type, payload: .failure(DNSError.combining(all)), source: .system,
                upstream: nil, expiresAt: now, failures: all)
        }
    }

    /// The clamped cache lifetime for a TTL in seconds.
    private func clamp(_ ttl: UInt32) -> Duration {
        min(max(.seconds(Int64(ttl)), options.minTTL), options.maxTTL)
    }

    /// Turns a cache entry into an outcome at `now`, with remaining TTLs; nil when it is unusable.
    private func outcome(
        from entry: CacheEntry, type: RecordType, now: ResolverInstant, allowStale: Bool,
        fetched: Bool = false
    ) -> TypeOutcome? {
        let fresh = now < entry.expiresAt
        guard fresh || (allowStale && now < entry.staleUntil) else { return nil }
        var payload = entry.payload
        if case let .addresses(addresses, canonicalName) = entry.payload {
            // Whole seconds left, rounded up: an answer fetched now reports its full TTL.
            let left = (entry.expiresAt - now).components
            let remaining = fresh ? UInt32(clamping: left.seconds + (left.attoseconds > 0 ? 1 : 0)) : options.staleAnswerTTL
            payload = .addresses(
                addresses.map { ResolvedAddress(ip: $0.ip, ttl: min($0.ttl, remaining)) },
                canonicalName: canonicalName)
        } else if case let .negative(code, authority?) = entry.payload {
            // The SOA's TTL counts down with the entry (RFC 2308 §5), rounded up as above.
            let left = (entry.expiresAt - now).components
            var kept = authority
            kept.ttl = min(authority.ttl, fresh ? UInt32(clamping: left.seconds + (left.attoseconds > 0 ? 1 : 0)) : 0)
            payload = .negative(code, authority: kept)
        }
        let source: Resolution.Source = !fresh ? .stale : (fetched ? entry.source : .cache)
        return TypeOutcome(
            type: type, payload: payload, source: source, upstream: entry.upstream,
            expiresAt: fresh ? entry.expiresAt : now + .seconds(Int64(options.staleAnswerTTL)),
            stale: !fresh,
            failures: { if case let .failure(error) = entry.payload { return error.attempts } else { return [] } }())
    }

    // MARK: Merging the record types

    private func merge(host: String, name: DomainName, outcomes: [TypeOutcome], elapsed: Duration) throws(DNSError) -> Resolution {
        var addresses: [ResolvedAddress] = []
        var rejected: [String] = []
        var canonical: DomainName?
        var answering: TypeOutcome?
        var nxdomain = false
        var authority: NegativeAuthority?
        var failures: [DNSError.Attempt] = []
        var expiresAt: ResolverInstant?
        for outcome in outcomes {
            // A and AAAA asked of the same upstreams often fail alike: each failure once.
            for failure in outcome.failures where !failures.contains(failure) { failures.append(failure) }
            switch outcome.payload {
            case let .addresses(found, canonicalName):
                canonical = canonical ?? canonicalName
                answering = answering ?? outcome
                expiresAt = min(expiresAt ?? outcome.expiresAt, outcome.expiresAt)
                if addresses.isEmpty, options.allowPrivate || !found.contains(where: { $0.ip.specialPurposeRange != nil }) {
                    addresses = found  // the common case: kept as it is, no copy
                    continue
                }
                for address in found {
                    if !options.allowPrivate, let range = address.ip.specialPurposeRange {
                        rejected.append("\(address.ip) (\(range))")
                    } else {
                        addresses.append(address)
                    }
                }
            case let .negative(code, soa):
                // NXDOMAIN's SOA over a NODATA's: the name's absence is the answer.
                if code == .nxdomain, !nxdomain { authority = soa } else if authority == nil { authority = soa }
                nxdomain = nxdomain || code == .nxdomain
                answering = answering ?? outcome
            case .failure:
                break
            }
        }
        if !addresses.isEmpty, let answering {
            addresses.sort { lhs, rhs in
                lhs.ip.family != rhs.ip.family && (lhs.ip.family == .ipv6) == options.preferIPv6
            }
            return Resolution(
                host: host, addresses: addresses,
                canonicalName: canonical.flatMap { $0 == name ? nil : $0.description },
                source: outcomes.contains { $0.stale } ? .stale : answering.source ?? .cache,
                upstream: answering.upstream, elapsed: elapsed,
                expiresAt: expiresAt ?? clock.now, failedAttempts: failures)
        }
        if !rejected.isEmpty {
            throw DNSError(
                .rejectedPrivate,
                "\(host) resolved only to special-purpose addresses "
                    + "(\(rejected.joined(separator: ", "))); allow them with --allow-private")
        }
        if nxdomain {
            var error = DNSError(
                .nxdomain, "\(host) does not exist (NXDOMAIN from \(answering?.upstream ?? "upstream"))",
                attempts: failures)
            error.authority = authority
            throw error
        }
        if outcomes.allSatisfy({ if case .negative = $0.payload { return true } else { return false } }) {
            let types = outcomes.map(\.type.description).joined(separator: "/")
            var error = DNSError(.nodata, "\(host) has no \(types) records", attempts: failures)
            error.authority = authority
            throw error
        }
        // Every type failed, or one said NODATA while the other failed: report the failures.
        var collected: [DNSError.Attempt] = []
        for outcome in outcomes {
            guard case let .failure(error) = outcome.payload else { continue }
            let attempts =
                error.attempts.isEmpty
                ? [.init(upstream: outcome.upstream ?? "-", code: error.code, message: error.message)]
                : error.attempts
            for attempt in attempts where !collected.contains(attempt) { collected.append(attempt) }
        }
        var error = DNSError.combining(collected)
        error.message = "\(host): \(error.message)"
        throw error
    }
}

/// A continuation resumed by whichever of several tasks finishes first; later results are dropped.
private final class FirstOf<Value: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Value, Never>?, done: Bool)>((nil, false))

    func arm(_ continuation: CheckedContinuation<Value, Never>) {
        state.withLock { $0.continuation = continuation }
    }

    func resume(with value: Value) {
        let continuation = state.withLock { state -> CheckedContinuation<Value, Never>? in
            guard !state.done, let continuation = state.continuation else { return nil }
            state.done = true
            state.continuation = nil
            return continuation
        }
        continuation?.resume(returning: value)
    }
}
