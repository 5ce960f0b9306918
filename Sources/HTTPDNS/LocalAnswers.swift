import DNSCore

extension HTTPDNSResolver {
    /// What the local data (``HTTPDNSConfiguration/localZone``) answers for `name` and `type`, counted
    /// in `httpdns_local_answers_total`; nil when it says nothing (look the name up). What the daemon
    /// asks before anything else, for every query type.
    public func localAnswer(_ name: DomainName, type: RecordType) -> LocalZone.Answer? {
        guard let zone = configuration.localZone, let answer = zone.answer(name, type: type) else { return nil }
        switch answer {
        case .records: engine.metrics.localRecords.increment()
        case .blocked: engine.metrics.blocked.increment()
        }
        return answer
    }

    /// The name that blocks a relayed response (any type the daemon forwards, and HTTPS/SVCB
    /// lookups): the first owner or CNAME target in its answer section that a block list covers
    /// (``/DNSCore/DNSMessage`` `firstListedName(where:)`), counted in
    /// `httpdns_local_answers_total{kind="blocked"}`; nil when none is or nothing is blocked. CNAME
    /// cloaking through a listed name is blocked for every type, not only for addresses (F33 of the
    /// threat model).
    public func blockedName(inRelayed response: DNSMessage) -> DomainName? {
        guard let zone = configuration.localZone, zone.blockedCount > 0, let listed = response.firstListedName(where: zone.isBlocked) else {
            return nil
        }
        engine.metrics.blocked.increment()
        return listed
    }

    /// The error a blocked name's non-address lookup ends in: the block list's answer (`null-ip`
    /// has no address to give here, so the name has no such record).
    func blockedError(_ host: String, by listed: DomainName, type: RecordType, zone: LocalZone) -> DNSError {
        let reason = listed.description == host ? "a block list covers it" : "\(listed) in its answer is on a block list"
        switch zone.blockAnswer {
        case .nxdomain: return DNSError(.nxdomain, "\(host) is blocked (\(reason))")
        case .refused: return DNSError(.refused, "\(host) is blocked (\(reason))")
        case .nullIP: return DNSError(.nodata, "\(host) is blocked (\(reason)): no \(type) records")
        }
    }

    /// `resolve`'s answer from the local data, or nil when the name is not local (nor blocked).
    /// A local CNAME chain that leaves the local data is resolved from its last target as usual.
    /// `name` is `host` parsed (nil for an IP literal or no host name: not local).
    func localResolution(_ host: String, name: DomainName?, type: AddressQuery, zone: LocalZone) async throws(DNSError) -> Resolution? {
        guard let name else { return nil }
        guard let (records, continueAt) = try localRecords(name, host: host, type: type, zone: zone) else { return nil }
        let chainTTL = records.filter { $0.type == .cname }.map(\.ttl).min()
        if let target = continueAt {
            var resolution = try await resolve(target.description, type: type)
            resolution.host = host
            resolution.canonicalName = resolution.canonicalName ?? target.description
            if let chainTTL {
                resolution.addresses = resolution.addresses.map { ResolvedAddress(ip: $0.ip, ttl: min($0.ttl, chainTTL)) }
            }
            return resolution
        }
        return try resolution(host, type: type, from: records)
    }

    /// The addresses of local `records` (a CNAME chain first) as a resolution.
    /// - Throws: `nodata` when there are none.
    private func resolution(_ host: String, type: AddressQuery, from records: [LocalZone.Record]) throws(DNSError) -> Resolution {
        let chainTTL = records.filter { $0.type == .cname }.map(\.ttl).min() ?? .max
        let addresses = records.compactMap { record -> ResolvedAddress? in
            guard case let .address(ip) = record.data else { return nil }
            return ResolvedAddress(ip: ip, ttl: min(record.ttl, chainTTL))
        }
        guard !addresses.isEmpty else {
            throw DNSError(.nodata, "\(host) has no \(type == .both ? "A or AAAA" : type.rawValue.uppercased()) record in the local data")
        }
        return localResolution(host, addresses, canonicalName: records.last { $0.type == .cname }.flatMap(Self.target)?.description)
    }

    /// What the local data says without waiting, for ``resolveWithoutWaiting(_:type:)`` and
    /// ``cachedResolution(for:type:)``.
    enum LocalShortcut {
        /// The name is not local: ask the engine.
        case notLocal
        /// The name is local but its answer needs a lookup or is an error: go through `resolve`.
        case needsLookup
        case answer(Resolution)
    }

    func localShortcut(_ host: String, name: DomainName?, type: AddressQuery, zone: LocalZone) -> LocalShortcut {
        guard let name else { return .notLocal }
        do {
            guard let (records, continueAt) = try localRecords(name, host: host, type: type, zone: zone) else { return .notLocal }
            guard continueAt == nil else { return .needsLookup }
            return .answer(try resolution(host, type: type, from: records))
        } catch {
            return .needsLookup
        }
    }

    /// The records answering `name` for each type of `type` (a blocked name with `null-ip` as
    /// records of its own), and where a CNAME chain leaves the local data; nil when the name is not
    /// local. Throws the blocked answer's error (`nxdomain`, `refused`).
    private func localRecords(
        _ name: DomainName, host: String, type: AddressQuery, zone: LocalZone
    ) throws(DNSError) -> (
        [LocalZone.Record], DomainName?
    )? {
        var records: [LocalZone.Record] = []
        var continueAt: DomainName?
        var chainDone = false
        for recordType in ordered(type.recordTypes) {
            guard let answer = localAnswer(name, type: recordType) else { return nil }
            switch answer {
            case let .blocked(mode):
                switch mode {
                case .nxdomain: throw DNSError(.nxdomain, "\(host) is blocked (a block list covers it)")
                case .refused: throw DNSError(.refused, "\(host) is blocked (a block list covers it)")
                case .nullIP:
                    let ip: IPAddress = recordType == .a ? .v4(0) : .v6(0, 0)
                    records.append(LocalZone.Record(owner: name, type: recordType, ttl: zone.blockTTL, data: .address(ip)))
                }
            case let .records(list, target):
                // Both types follow the same chain: keep its CNAMEs once.
                records.append(contentsOf: chainDone ? list.filter { $0.type != .cname } : list)
                chainDone = true
                continueAt = target
            }
        }
        return (records, continueAt)
    }

    /// A and AAAA in the order addresses are returned (``/DNSCore/ResolverOptions/preferIPv6``).
    private func ordered(_ types: [RecordType]) -> [RecordType] {
        options.preferIPv6 ? types.sorted { $0 == .aaaa && $1 != .aaaa } : types
    }

    private func localResolution(_ host: String, _ addresses: [ResolvedAddress], canonicalName: String?) -> Resolution {
        let ttl = addresses.map(\.ttl).min() ?? 0
        return Resolution(
            host: host, addresses: addresses, canonicalName: canonicalName, source: .local, upstream: nil, elapsed: .zero,
            expiresAt: clock.now + .seconds(Int64(ttl)))
    }

    private static func target(of record: LocalZone.Record) -> DomainName? {
        if case let .name(name) = record.data { return name }
        return nil
    }

    /// Whether a block list covers the canonical name of an answer from upstream (CNAME cloaking:
    /// `tracker.site.test CNAME site.tracker-cdn.test`), so the block cannot be stepped around
    /// with an alias.
    func checkCanonicalName(_ resolution: Resolution, zone: LocalZone) throws(DNSError) -> Resolution {
        // Read as DNS writes names, not as a host name: `a*b.tracker.test` is a name too (F26).
        guard let canonical = resolution.canonicalName, let name = try? DomainName(presentation: canonical), zone.isBlocked(name) else {
            return resolution
        }
        engine.metrics.blocked.increment()
        switch zone.blockAnswer {
        case .nxdomain: throw DNSError(.nxdomain, "\(resolution.host) is blocked (its canonical name \(canonical) is on a block list)")
        case .refused: throw DNSError(.refused, "\(resolution.host) is blocked (its canonical name \(canonical) is on a block list)")
        case .nullIP:
            let addresses = resolution.addresses.map { ResolvedAddress(ip: $0.ip.family == .ipv4 ? .v4(0) : .v6(0, 0), ttl: zone.blockTTL) }
            return localResolution(resolution.host, Array(Set(addresses)).sorted { $0.ip < $1.ip }, canonicalName: canonical)
        }
    }
}
