import DNSCore

/// One address lookup as it goes through the resolver's stages (``HTTPDNSResolver/resolve(_:)``):
/// parsed once, asked of the cache once.
///
/// The stages, in order, each answering, passing to the next, or (without waiting) saying that a
/// lookup is needed: **local data and blocks** → **forward zones** (the zone's resolver runs the
/// rest) → **the cache** (kept answers, DNSSEC-labelled) → **DNSSEC and the upstreams** (the engine:
/// single flight, shared cache, the pool's attempt loop) — then the block lists' check of the
/// canonical name for anything not answered locally. The public String API (`resolve`,
/// `resolveWithoutWaiting`, `cachedResolution`) is a thin adapter over it, and the daemon enters
/// with the name its query parser made.
package struct Lookup: Sendable {
    /// How long the caller may wait.
    package enum Mode: Sendable {
        /// Until the upstreams have answered (``HTTPDNSResolver/resolve(_:)``).
        case wait
        /// Not at all: a kept answer that needs no lookup, counted as a hit (the event loop).
        case now
        /// Not at all, and stale answers too, without counting or prefetching (hot paths).
        case peek
    }

    package var host: String
    package var type: AddressQuery
    package var mode: Mode
    /// The caller has asked the local data already (the daemon answers it for every type).
    package var pastLocalData = false
    /// A `.now` pass of this lookup found nothing: the `.wait` pass does not ask the cache for a
    /// hit again (each type's entry is still read for stale answers and prefetch).
    package var afterMiss = false
    /// `host` as a DNS name once a stage has needed it (``parsedName()``), or as the caller gave it;
    /// nil for an IP literal or a string that is no host name. Left nil when no stage needs it, so
    /// a kept answer is found by the host string alone, unparsed; the engine parses it then (once).
    private(set) var name: DomainName?
    private var parsed: Bool

    /// A lookup of `host` (parsed when a stage needs it, once).
    package init(_ host: String, type: AddressQuery, mode: Mode) {
        self.host = host
        self.type = type
        self.mode = mode
        self.name = nil
        self.parsed = false
    }

    /// A lookup of a name parsed already (a DNS query's question).
    package init(_ name: DomainName, type: AddressQuery, mode: Mode, pastLocalData: Bool = false) {
        self.host = name.description
        self.name = name
        self.parsed = true
        self.type = type
        self.mode = mode
        self.pastLocalData = pastLocalData
    }

    /// `host` as a DNS name, parsed on the first call; nil for an IP literal or no host name.
    mutating func parsedName() -> DomainName? {
        if !parsed {
            parsed = true
            name = IPAddress(host) == nil ? try? DomainName(host) : nil
        }
        return name
    }

    /// This lookup, waiting.
    package func waiting() -> Lookup {
        var lookup = self
        lookup.mode = .wait
        lookup.afterMiss = false
        return lookup
    }
}

extension HTTPDNSResolver {
    /// What a stage did with a lookup.
    enum StageOutcome {
        case answer(Resolution)
        /// Nothing here: the next stage.
        case next
        /// Only a lookup can answer (`.now` and `.peek` stop here).
        case needsLookup
    }

    /// With ``/DNSCore/ResolverOptions/keepsResolverArpa``: `nxdomain` for a name at or under
    /// `resolver.arpa`, which is never asked of anyone.
    func refuseResolverArpa(_ name: DomainName) throws(DNSError) {
        guard options.keepsResolverArpa, ResolverDiscovery.isSpecialUse(name) else { return }
        throw DNSError(.nxdomain, "\(name) is under resolver.arpa, which this resolver answers itself and never sends on (RFC 9462)")
    }

    /// Runs `lookup` through the stages, waiting for the upstreams when it must.
    /// - Throws: ``/DNSCore/DNSError`` as ``resolve(_:type:)``.
    package func resolve(_ lookup: consuming Lookup) async throws(DNSError) -> Resolution {
        if lookup.mode != .wait { lookup = lookup.waiting() }
        if options.keepsResolverArpa, let name = lookup.parsedName() { try refuseResolverArpa(name) }
        // Without local data or forward zones, the first stages and the block check are no-ops:
        // skipped, so that a hit costs what the engine's does (BENCHMARKS.md "Cache hits").
        guard hasStagesBeforeCache else {
            return try await upstreamStage(lookup.host, name: lookup.name, type: lookup.type, afterMiss: lookup.afterMiss)
        }
        if case let .answer(local) = try await localStage(&lookup) { return local }
        if let forwarder = forwarder(for: &lookup) {
            lookup.pastLocalData = true
            return try blockStage(try await forwarder.resolve(lookup))
        }
        return try blockStage(try await upstreamStage(lookup.host, name: lookup.name, type: lookup.type, afterMiss: lookup.afterMiss))
    }

    /// Runs `lookup` (`.now` or `.peek`) through the stages that need no waiting: the answer, or
    /// nil where a lookup is needed.
    package func resolveNow(_ lookup: consuming Lookup) -> Resolution? {
        if lookup.mode == .wait { lookup.mode = .now }
        guard hasStagesBeforeCache else { return keptAnswer(lookup.host, name: lookup.name, type: lookup.type, mode: lookup.mode) }
        switch localStageNow(&lookup) {
        case let .answer(local): return local
        case .needsLookup: return nil
        case .next: break
        }
        if let forwarder = forwarder(for: &lookup) {
            lookup.pastLocalData = true
            return forwarder.resolveNow(lookup).flatMap { try? blockStage($0) }
        }
        return keptAnswer(lookup.host, name: lookup.name, type: lookup.type, mode: lookup.mode).flatMap { try? blockStage($0) }
    }

    /// Forward zones: the resolver of the zone the name is in, which runs the stages after this one.
    private func forwarder(for lookup: inout Lookup) -> HTTPDNSResolver? {
        guard !forwards.isEmpty, let name = lookup.parsedName() else { return nil }
        return forwarder(for: name)
    }

    /// Local data and blocks: the local answer (a chain that leaves the local data resolved from
    /// its last name), a blocked name's error, or the next stage.
    private func localStage(_ lookup: inout Lookup) async throws(DNSError) -> StageOutcome {
        guard !lookup.pastLocalData, let zone = configuration.localZone,
            let local = try await localResolution(lookup.host, name: lookup.parsedName(), type: lookup.type, zone: zone)
        else { return .next }
        return .answer(local)
    }

    private func localStageNow(_ lookup: inout Lookup) -> StageOutcome {
        guard !lookup.pastLocalData, let zone = configuration.localZone else { return .next }
        switch localShortcut(lookup.host, name: lookup.parsedName(), type: lookup.type, zone: zone) {
        case let .answer(resolution): return .answer(resolution)
        case .needsLookup: return .needsLookup
        case .notLocal: return .next
        }
    }

    /// The cache, without waiting: a kept answer — fresh only (`.now`) or stale too (`.peek`) —
    /// usable under the DNSSEC policy; nil where only a lookup can answer. (`.wait` asks the
    /// engine, which reads the cache once.)
    func keptAnswer(_ host: String, name: DomainName?, type: AddressQuery, mode: Lookup.Mode) -> Resolution? {
        switch mode {
        case .now, .wait: labelledWithoutWaiting(engine.resolveWithoutWaiting(host, name: name, type: type))
        case .peek: labelledWithoutWaiting(engine.cachedResolution(for: host, name: name, type: type))
        }
    }

    /// With DNSSEC on, a cached answer is usable without waiting only once its status is known
    /// (and, under `require`, not bogus).
    private func labelledWithoutWaiting(_ resolution: consuming Resolution?) -> Resolution? {
        guard dnssecPolicy != .off, var resolution, resolution.source != .literal else { return resolution }
        guard let status = resolution.dnssec ?? dnssecMemo.status(of: resolution, now: clock.now) else { return nil }
        if dnssecPolicy == .require, status.isBogus { return nil }
        resolution.dnssec = status
        return resolution
    }

    /// The cache, DNSSEC and the upstreams, waiting: the engine's lookup (a kept answer, else single
    /// flight, the shared cache and the pool's attempt loop), validated as configured.
    func upstreamStage(_ host: String, name: DomainName?, type: AddressQuery, afterMiss: Bool) async throws(DNSError) -> Resolution {
        guard dnssecPolicy != .off else { return try await engine.resolve(host, name: name, type: type, afterMiss: afterMiss) }
        // The hit path: a kept answer, labelled already (and not refused), returned at once without
        // suspending (its `elapsed` is the kept one: zero); one not labelled yet, or bogus under
        // `require`, is labelled (or refused) now.
        if !afterMiss, let hit = engine.resolveWithoutWaiting(host, name: name, type: type) {
            if let status = hit.dnssec, dnssecPolicy == .report || !status.isBogus { return hit }
            return try await applyingDNSSEC(to: hit, type: type)
        }
        return try await resolveValidating(host, name: name, type: type)
    }

    /// The block lists' check of an answer from upstream: a listed canonical name blocks it
    /// (CNAME cloaking).
    private func blockStage(_ resolution: Resolution) throws(DNSError) -> Resolution {
        guard let zone = configuration.localZone else { return resolution }
        return try checkCanonicalName(resolution, zone: zone)
    }
}
