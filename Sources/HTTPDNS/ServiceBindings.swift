import DNSCore

extension HTTPDNSResolver {
    /// The HTTPS or SVCB records of `host`, asked of the trusted DoH upstreams (the forwarding path:
    /// JSON upstreams carry A/AAAA only; not cached).
    ///
    /// ```swift
    /// let answer = try await resolver.serviceBindings(for: "www.example.test")
    /// for record in answer.records where !record.isAlias { print(record.alpn, record.port ?? 443) }
    /// ```
    /// A name a block list covers, or whose CNAME chain passes through one, ends in the block's
    /// answer (`nxdomain`, `refused`; `nodata` for `null-ip`).
    /// - Throws: ``/DNSCore/DNSError``: `nxdomain`, `nodata` (the name has no such record), `server_failure`,
    ///   `refused`, `malformed_response` (a record whose data does not decode), `invalid_name`
    ///   (also for an IP literal), or what ``forward(_:)`` throws.
    public func serviceBindings(for host: String, type: RecordType = .https) async throws(DNSError) -> ServiceBindingAnswer {
        guard type == .https || type == .svcb else {
            throw DNSError(.invalidQuery, "service binding lookups are HTTPS or SVCB, not \(type)")
        }
        guard IPAddress(host) == nil else { throw DNSError(.invalidName, "\(host) is an IP address: it has no \(type) records") }
        let name = try DomainName(host)
        let zone = configuration.localZone
        if let zone, zone.isBlocked(name) {
            engine.metrics.blocked.increment()
            throw blockedError(host, by: name, type: type, zone: zone)
        }
        let start = ContinuousClock.now
        // RD set; an ID of 0 as RFC 8484 §4.1 asks.
        let query = DNSMessage(id: 0, flags: 0x0100, questions: [.init(name: name, type: type)]).encode()
        let wire = try await forward(query)
        if let zone, let listed = blockedAlias(inRelayed: wire) { throw blockedError(host, by: listed, type: type, zone: zone) }
        let response: DNSMessage
        do { response = try DNSMessage(decoding: wire) } catch { throw DNSError(.malformedResponse, "\(error)") }
        let (records, ttl, owner) = try ServiceBindingAnswer.records(in: response, for: name, type: type)
        return ServiceBindingAnswer(
            host: host, type: type, records: records, ttl: ttl, canonicalName: owner == name ? nil : owner.description,
            elapsed: .now - start)
    }
}
