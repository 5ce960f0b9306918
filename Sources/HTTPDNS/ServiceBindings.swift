import DNSCore

extension HTTPDNSResolver {
    /// The HTTPS or SVCB records of `host`, asked of the trusted DoH upstreams (the forwarding path:
    /// JSON upstreams carry A/AAAA only; not cached).
    ///
    /// ```swift
    /// let answer = try await resolver.serviceBindings(for: "www.example.test")
    /// for record in answer.records where !record.isAlias { print(record.alpn, record.port ?? 443) }
    /// ```
    /// - Throws: ``DNSError``: `nxdomain`, `nodata` (the name has no such record), `server_failure`,
    ///   `refused`, `malformed_response` (a record whose data does not decode), `invalid_name`
    ///   (also for an IP literal), or what ``forward(_:)`` throws.
    public func serviceBindings(for host: String, type: RecordType = .https) async throws(DNSError) -> ServiceBindingAnswer {
        guard type == .https || type == .svcb else {
            throw DNSError(.invalidQuery, "service binding lookups are HTTPS or SVCB, not \(type)")
        }
        guard IPAddress(host) == nil else { throw DNSError(.invalidName, "\(host) is an IP address: it has no \(type) records") }
        let name = try DomainName(host)
        let start = ContinuousClock.now
        // RD set; an ID of 0 as RFC 8484 §4.1 asks.
        let query = DNSMessage(id: 0, flags: 0x0100, questions: [.init(name: name, type: type)]).encode()
        let wire = try await forward(query)
        let response: DNSMessage
        do { response = try DNSMessage(decoding: wire) } catch { throw DNSError(.malformedResponse, "\(error)") }
        switch response.responseCode {
        case .noError: break
        case .nameError: throw DNSError(.nxdomain, "\(host) does not exist")
        case .refused: throw DNSError(.refused, "the resolver refused the \(type) query for \(host)")
        default: throw DNSError(.serverFailure, "the resolver answered \(response.responseCode) for \(host) \(type)")
        }
        // Follow the CNAME chain from the question's name, as the answer section gives it.
        var owner = name
        var ttl = UInt32.max
        var seen: Set<DomainName> = [owner]
        while let cname = response.answers.first(where: { $0.type == .cname && $0.name == owner }), case .cname(let target) = cname.data {
            guard seen.insert(target).inserted else { throw DNSError(.malformedResponse, "a CNAME loop at \(target)") }
            ttl = min(ttl, cname.ttl)
            owner = target
        }
        var records: [ServiceBinding] = []
        for record in response.answers where record.type == type && record.name == owner {
            guard case .opaque(let rdata) = record.data else { continue }
            records.append(try ServiceBinding(rdata: rdata))
            ttl = min(ttl, record.ttl)
        }
        guard !records.isEmpty else { throw DNSError(.nodata, "\(host) has no \(type) records") }
        records.sort { $0.priority < $1.priority }
        return ServiceBindingAnswer(
            host: host, type: type, records: records, ttl: ttl, canonicalName: owner == name ? nil : owner.description,
            elapsed: .now - start)
    }
}
