import DNSCore

extension HTTPDNSResolver {
    /// The HTTPS or SVCB records of `host`, asked of the trusted DoH upstreams (the forwarding path:
    /// JSON upstreams carry A/AAAA only; not cached).
    ///
    /// ```swift
    /// let answer = try await resolver.serviceBindings(for: "www.example.test")
    /// for record in answer.records where !record.isAlias { print(record.alpn, record.port ?? 443) }
    /// ```
    /// Local data is asked first: a local name without such records is `nodata`, a local alias to
    /// a name outside the local data is followed. A name a block list covers, or whose answer holds
    /// one (CNAME cloaking), ends in the block's answer (`nxdomain`, `refused`; `nodata` for `null-ip`).
    /// - Throws: ``/DNSCore/DNSError``: `nxdomain`, `nodata` (the name has no such record), `server_failure`,
    ///   `refused`, `malformed_response` (a record whose data does not decode), `invalid_name`
    ///   (also for an IP literal), or what ``forward(_:)`` throws.
    public func serviceBindings(for host: String, type: RecordType = .https) async throws(DNSError) -> ServiceBindingAnswer {
        guard type == .https || type == .svcb else {
            throw DNSError(.invalidQuery, "service binding lookups are HTTPS or SVCB, not \(type)")
        }
        guard IPAddress(host) == nil else { throw DNSError(.invalidName, "\(host) is an IP address: it has no \(type) records") }
        let name = try DomainName(host)
        try refuseResolverArpa(name)
        let zone = configuration.localZone
        // Local data first, as the daemon answers every type: a local name has no such records
        // (local records are A, AAAA, CNAME, PTR and TXT) unless its local chain leaves the local
        // data; a blocked one gets the block's answer, without asking anyone.
        if let zone {
            switch localAnswer(name, type: type) {
            case .blocked?:
                throw blockedError(host, by: name, type: type, zone: zone)
            case let .records(_, continueAt?)?:
                var answer = try await serviceBindings(for: continueAt.description, type: type)
                answer.host = host
                answer.canonicalName = answer.canonicalName ?? continueAt.description
                return answer
            case .records(_, nil)?:
                throw DNSError(.nodata, "\(host) is local data without \(type) records")
            case nil:
                break
            }
        }
        let start = ContinuousClock.now
        // RD set; an ID of 0 as RFC 8484 §4.1 asks.
        let query = DNSMessage(id: 0, flags: 0x0100, questions: [.init(name: name, type: type)]).encode()
        let wire = try await forward(query)
        let response: DNSMessage
        do { response = try DNSMessage(decoding: wire) } catch { throw DNSError(.malformedResponse, "\(error)") }
        if let zone, let listed = blockedName(inRelayed: response) { throw blockedError(host, by: listed, type: type, zone: zone) }
        let (records, ttl, owner) = try ServiceBindingAnswer.records(in: response, for: name, type: type)
        return ServiceBindingAnswer(
            host: host, type: type, records: records, ttl: ttl, canonicalName: owner == name ? nil : owner.description,
            elapsed: .now - start)
    }
}
