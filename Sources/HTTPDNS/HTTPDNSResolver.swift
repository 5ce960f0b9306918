import CoreMetrics
import CurlSupport
import DNSCore
import Foundation
import Logging
import Synchronization

/// Resolves host names through trusted resolvers over HTTPS, never through the system's DNS.
///
/// ```swift
/// let resolver = try HTTPDNSResolver(configuration: .init(upstreams: [
///     .doh("https://dns.example.test/dns-query", bootstrap: ["192.0.2.53"]),
/// ]))
/// let resolution = try await resolver.resolve("api.example.test")
/// ```
///
/// Answers are cached by TTL (clamped to ``/DNSCore/ResolverOptions/minTTL``...``/DNSCore/ResolverOptions/maxTTL``),
/// served stale within ``/DNSCore/ResolverOptions/staleWindow`` while a refresh runs (RFC 8767), refreshed
/// early on hits in the last 10 % of their TTL, and concurrent lookups of one name share one query.
/// A and AAAA are asked in parallel. Upstreams are tried per ``/DNSCore/ResolverOptions/strategy``: a failing
/// upstream hands over at once, a slow one after its share of the remaining budget.
public final class HTTPDNSResolver: HostResolving, Sendable {
    public let configuration: HTTPDNSConfiguration
    /// The engine: cache, single-flight, upstream pool, fallback (the package's own business).
    package let engine: ResolverEngine
    /// DNSSEC statuses and proven zone keys (used when `configuration.dnssec.policy` is not off).
    let dnssecMemo = DNSSECMemo()
    /// `configuration.dnssec.policy`, read on every lookup without copying the configuration.
    let dnssecPolicy: DNSSECPolicy
    /// Split DNS: the resolver of each forward zone (``HTTPDNSConfiguration/forwardZones``).
    let forwards: [DomainName: HTTPDNSResolver]
    /// Local data or forward zones exist: a lookup passes those stages (and, with local data, the
    /// block check) around the cache. Without them a lookup goes straight to the cache stage.
    let hasStagesBeforeCache: Bool

    public var options: HTTPDNSOptions { engine.options }

    /// The resolver's clock: what ``/DNSCore/Resolution/expiresAt`` is measured in
    /// (`resolution.expiresAt - resolver.clock.now` is the time an answer has left).
    public var clock: any ResolverClock { engine.clock }

    /// A resolver over the configured DoH, JSON and vendor-API upstreams, reached at their bootstrap
    /// addresses.
    ///
    /// - Parameters:
    ///   - configuration: the trusted upstreams, the CA file and the names to resolve at once.
    ///   - options: cache TTL bounds, stale serving, prefetch, timeouts, strategy, fallback policy.
    ///   - fallback: the system's DNS (`SystemResolver`), used only when `options.fallback` is `.system`.
    ///   - clock: what TTLs, deadlines, budgets and sleeps are measured with (a test passes its own).
    ///   - metrics: where the engine's counters and timers go (`httpdns_*`, listed in docs/library.md);
    ///     by default the application's bootstrapped `MetricsSystem.factory`.
    ///   - logger: where upstream failures and circuit-breaker changes are logged; silent by default.
    ///   - plainDNS: makes the upstream for a forward zone's plain DNS server (`IP[:port]`):
    ///     `{ try SystemResolver(servers: [$0]) }`. Needed only when a forward zone has `plainDNS`.
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` when an upstream cannot be
    ///   reached without DNS or the CA file is unreadable.
    public convenience init(
        configuration: HTTPDNSConfiguration, options: HTTPDNSOptions = .init(),
        fallback: (any DNSUpstream)? = nil, clock: any ResolverClock = MonotonicClock(),
        metrics: (any MetricsFactory)? = nil, logger: Logger? = nil,
        plainDNS: ((String) throws(DNSError) -> any MessageExchanging)? = nil
    ) throws(DNSError) {
        try configuration.validate()
        let transport = HTTPTransport(
            engine: .shared, trust: TLSTrust(caFile: configuration.caFile),
            maxResponseBytes: options.maxResponseBytes)
        // A block list covers every alias of an upstream's chain, not only its end (F26).
        var flagged: (@Sendable (DomainName) -> Bool)?
        if let zone = configuration.localZone, zone.blockedCount > 0 {
            flagged = { @Sendable name in zone.isBlocked(name) }
        }
        func upstream(_ endpoint: UpstreamEndpoint) -> any DNSUpstream {
            switch endpoint.kind {
            case let .doh(method):
                var upstream = DoHUpstream(endpoint: endpoint, method: method, transport: transport)
                upstream.flaggedAliases = flagged
                return upstream
            case .json:
                var upstream = JSONUpstream(endpoint: endpoint, transport: transport)
                upstream.flaggedAliases = flagged
                return upstream
            case .dot:
                var upstream = DoTUpstream(endpoint: endpoint, trust: transport.trust)
                upstream.flaggedAliases = flagged
                return upstream
            case let .vendor(api): return VendorUpstream(endpoint: endpoint, api: api, transport: transport)
            }
        }
        var forwards: [DomainName: HTTPDNSResolver] = [:]
        for zone in configuration.forwardZones {
            var upstreams = zone.upstreams.map(upstream)
            for server in zone.plainDNS {
                guard let plainDNS else {
                    throw DNSError(.invalidConfiguration, "forward zone \(zone.zones[0]): plain DNS server \(server) needs the plainDNS factory")
                }
                upstreams.append(try plainDNS(server))
            }
            let child = HTTPDNSResolver(
                configuration: HTTPDNSConfiguration(upstreams: zone.upstreams), options: Self.forwardOptions(options, zone: zone.zones[0]),
                upstreams: upstreams,
                clock: clock, spawner: UnstructuredTasks(), metrics: metrics, logger: logger)
            for name in zone.zones { forwards[name] = child }
        }
        self.init(
            configuration: configuration, options: options, upstreams: configuration.upstreams.map(upstream), fallback: fallback, clock: clock,
            spawner: UnstructuredTasks(), metrics: metrics, logger: logger, forwards: forwards)
    }

    /// A forward zone's options: the resolver's, with private answers allowed (an internal zone's
    /// are what it is for) and no fallback. Its servers' health probe asks the zone's own apex SOA,
    /// not the daemon's readiness question: a zone's servers are sent no name outside it (an
    /// authoritative-only server refuses the root's NS, so a probe of it never closed its circuit).
    static func forwardOptions(_ options: HTTPDNSOptions, zone: DomainName) -> HTTPDNSOptions {
        var options = options
        options.allowPrivate = true
        options.fallback = .none
        options.healthCheckName = zone.description
        options.healthCheckType = .soa
        return options
    }

    /// Builds a resolver over any upstreams (tests inject fakes here).
    public convenience init(
        configuration: HTTPDNSConfiguration = .init(upstreams: []), options: HTTPDNSOptions = .init(),
        upstreams: [any DNSUpstream], fallback: (any DNSUpstream)? = nil,
        clock: any ResolverClock = MonotonicClock(), metrics: (any MetricsFactory)? = nil, logger: Logger? = nil
    ) {
        self.init(
            configuration: configuration, options: options, upstreams: upstreams, fallback: fallback, clock: clock,
            spawner: UnstructuredTasks(), metrics: metrics, logger: logger)
    }

    /// As above, with the engine's background work (refreshes, prefetches, pre-resolving) started
    /// by `spawner`: tests pass one they can drain.
    package init(
        configuration: HTTPDNSConfiguration = .init(upstreams: []), options: HTTPDNSOptions = .init(),
        upstreams: [any DNSUpstream], fallback: (any DNSUpstream)? = nil,
        clock: any ResolverClock = MonotonicClock(), spawner: any TaskSpawner, metrics: (any MetricsFactory)? = nil,
        logger: Logger? = nil, forwards: [DomainName: HTTPDNSResolver] = [:]
    ) {
        self.configuration = configuration
        self.dnssecPolicy = configuration.dnssec.policy
        self.forwards = forwards
        self.hasStagesBeforeCache = configuration.localZone != nil || !forwards.isEmpty
        self.engine = ResolverEngine(
            upstreams: upstreams, options: options, fallback: fallback, clock: clock, spawner: spawner,
            metrics: metrics, logger: logger)
        if !configuration.preresolve.isEmpty {
            prefetch(configuration.preresolve)
        }
    }

    /// The resolver of the forward zone `host` is in (the longest that holds it), or nil for the
    /// trusted upstreams.
    func forwarder(for host: String) -> HTTPDNSResolver? {
        guard !forwards.isEmpty, IPAddress(host) == nil, let name = try? DomainName(host) else { return nil }
        return forwarder(for: name)
    }

    func forwarder(for name: DomainName) -> HTTPDNSResolver? {
        guard !forwards.isEmpty else { return nil }
        let wire = name.wire
        var start = 0
        while wire[start] != 0 {
            if let resolver = forwards[start == 0 ? name : DomainName(uncheckedWire: Array(wire[start...]))] { return resolver }
            start += Int(wire[start]) + 1
        }
        return nil
    }

    /// Resolves `host` to addresses.
    ///
    /// IP literals come back as they are (source ``/DNSCore/Resolution/Source/literal``). Answers in special
    /// ranges are dropped unless ``/DNSCore/ResolverOptions/allowPrivate``.
    /// - Throws: ``/DNSCore/DNSError``: `invalid_name`, `nxdomain`, `nodata`, `rejected_private`, or the
    ///   upstreams' failures (one code when they agree, `upstream_failed` when not, each listed).
    public func resolve(_ host: String, type: AddressQuery = .both) async throws(DNSError) -> Resolution {
        // Without local data or forward zones the cache is the first stage: straight to it, with no
        // `Lookup` to build (BENCHMARKS.md "Cache hits and memory").
        guard hasStagesBeforeCache else { return try await upstreamStage(host, name: nil, type: type, afterMiss: false) }
        return try await resolve(Lookup(host, type: type, mode: .wait))
    }

    /// `resolve`'s answer when it needs no lookup (an IP literal or a fresh cached answer, counted
    /// as a hit), without suspending; nil when `resolve` has to go out. For event-loop code.
    public func resolveWithoutWaiting(_ host: String, type: AddressQuery = .both) -> Resolution? {
        guard hasStagesBeforeCache else { return keptAnswer(host, name: nil, type: type, mode: .now) }
        return resolveNow(Lookup(host, type: type, mode: .now))
    }

    /// The cached answer for `host` (fresh or stale) without I/O, or nil. For hot paths.
    public func cachedResolution(for host: String, type: AddressQuery = .both) -> Resolution? {
        guard hasStagesBeforeCache else { return keptAnswer(host, name: nil, type: type, mode: .peek) }
        return resolveNow(Lookup(host, type: type, mode: .peek))
    }

    /// Resolves `hosts` in the background to warm the cache.
    public func prefetch(_ hosts: [String], type: AddressQuery = .both) {
        guard !forwards.isEmpty else { return engine.prefetch(hosts, type: type) }
        var trusted: [String] = []
        for host in hosts {
            if let forwarder = forwarder(for: host) { forwarder.prefetch([host], type: type) } else { trusted.append(host) }
        }
        engine.prefetch(trusted, type: type)
    }

    /// Resolves `hosts` concurrently and waits for all of them (pre-resolve at start-up, when the
    /// caller wants to know the cache is warm before serving).
    ///
    /// When the preferred upstream has a batch API (the vendor HTTPDNS services), the names are first
    /// asked in groups of its batch size; names a batch left out are then asked one by one.
    /// - Returns: each host's resolution or error, in the order given.
    public func warm(_ hosts: [String], type: AddressQuery = .both) async -> [(host: String, result: Result<Resolution, DNSError>)] {
        // Names of forward zones never go to a batch API of the trusted side.
        let batched = await engine.warmInBatches(hosts.filter { forwarder(for: $0) == nil }, type: type)
        return await withTaskGroup(of: (Int, Result<Resolution, DNSError>).self) { group in
            for (index, host) in hosts.enumerated() {
                group.addTask {
                    do throws(DNSError) {
                        var resolution = try await self.resolve(host, type: type)
                        // Fetched by this call's batch: say where from, not "cache".
                        if resolution.source == .cache, let name = try? DomainName(host), batched.answered.contains(name) {
                            resolution.source = batched.source
                        }
                        return (index, .success(resolution))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var results = [Result<Resolution, DNSError>?](repeating: nil, count: hosts.count)
            for await (index, result) in group { results[index] = result }
            return zip(hosts, results).map { ($0, $1!) }
        }
    }

    /// `host → IP` for each of `hosts` that resolves: the shape of AsyncHTTPClient's
    /// `Configuration.dnsOverride` (and of `curl --resolve`), whose clients connect to the IP while TLS
    /// keeps the name. The map is a snapshot: make a new one (and a new client) when the answers'
    /// TTLs run out. Hosts that fail are left out; `warm(_:)` says why.
    public func addressOverrides(for hosts: [String], type: AddressQuery = .both) async -> [String: String] {
        var overrides: [String: String] = [:]
        for (host, result) in await warm(hosts, type: type) {
            if case let .success(resolution) = result, let first = resolution.addresses.first { overrides[host] = first.ip.description }
        }
        return overrides
    }

    /// Each trusted upstream's identifier and health, in configured order (the daemon's readiness).
    package var upstreamHealth: [(upstream: String, health: UpstreamPool.Health)] {
        Array(zip(engine.pool.upstreams.map(\.identifier), engine.pool.healthSnapshot))
    }

    /// Whether some trusted upstream responded within `window` and has not failed since.
    package func hasReachableUpstream(within window: Duration) -> Bool {
        let now = engine.clock.now
        return engine.pool.healthSnapshot.contains { $0.isReachable(now: now, window: window) }
    }

    /// Sends `probe` to every upstream idle for `idle` (see `UpstreamPool.probeIdle`).
    package func probeIdleUpstreams(_ probe: DNSMessage.Question, idle: Duration, timeout: Duration) async {
        await engine.pool.probeIdle(probe, idle: idle, timeout: timeout)
    }

    /// Forgets every cached answer.
    public func removeAll() {
        for forwarder in forwards.values { forwarder.removeAll() }
        engine.removeAll()
    }

    /// Writes the cache to `path` atomically (a temporary file in the same directory, then rename).
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/cacheWriteFailed`` when the file cannot be written.
    public func saveCache(to path: String) throws(DNSError) {
        let bytes = engine.snapshot(wallMilliseconds: Self.wallMilliseconds())
        let temporary = path + ".tmp-\(getpid())"
        guard FileManager.default.createFile(atPath: temporary, contents: Data(bytes)) else {
            throw DNSError(.cacheWriteFailed, "cannot write the cache file '\(temporary)'")
        }
        guard rename(temporary, path) == 0 else {
            try? FileManager.default.removeItem(atPath: temporary)
            throw DNSError(.cacheWriteFailed, "cannot move the cache file into place at '\(path)'")
        }
    }

    /// Loads a cache written by ``saveCache(to:)``. A missing file loads nothing; a corrupt,
    /// truncated or foreign file throws and leaves the cache as it was, so callers can report and go on.
    /// - Returns: the number of entries loaded.
    @discardableResult
    public func loadCache(from path: String) throws(DNSError) -> Int {
        guard FileManager.default.fileExists(atPath: path) else { return 0 }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DNSError(.corruptCacheFile, "cannot read the cache file '\(path)'")
        }
        do {
            return try engine.restore(Array(data), wallMilliseconds: Self.wallMilliseconds())
        } catch {
            throw DNSError(error.code, "'\(path)': \(error.message)")
        }
    }

    /// Snapshots the cache to `path` every `interval` of the resolver's clock until the returned task
    /// is cancelled, and once more when it is (so a shutdown that cancels it keeps the latest
    /// answers). A failed write is reported to `onError` and retried at the next tick; the process
    /// keeps serving.
    public func persistPeriodically(
        to path: String, every interval: Duration,
        onError: @escaping @Sendable (DNSError) -> Void = { _ in }
    ) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                try? await self.clock.sleep(for: interval)
                do throws(DNSError) { try self.saveCache(to: path) } catch { onError(error) }
            }
        }
    }

    private static func wallMilliseconds() -> UInt64 {
        UInt64(max(0, Date().timeIntervalSince1970 * 1000))
    }
}
