import DNSCore

extension HTTPDNSResolver {
    /// Whether ``forward(_:)`` has an upstream to use: one that carries whole messages (DoH, DoT);
    /// JSON and the commercial APIs carry addresses only.
    public var canForward: Bool { engine.canForward }

    /// Whether ``forward(_:)`` has an upstream for a query about `name`: its forward zone's, or the
    /// trusted ones.
    public func canForward(_ name: DomainName) -> Bool { forwarder(for: name)?.canForward ?? canForward }

    /// Sends a DNS query message, as it is but for an ID of 0 (RFC 8484 §4.1), to the trusted DoH
    /// upstreams and returns the first response, unchanged but for the caller's ID restored.
    ///
    /// What the daemon does with query types the engine does not answer (MX, TXT, HTTPS, …), and
    /// what HTTPS/SVCB lookups and DNSSEC chain fetches send. It goes through the same attempt loop
    /// as address lookups: the pool's order and strategy with open circuits last, each upstream's
    /// share of the remaining budget, hedging, and every outcome recorded — a forwarded failure
    /// opens a circuit and shows in readiness like any other. A transport failure or a response
    /// that does not answer this query moves to the next upstream; the upstream's RCODE (SERVFAIL,
    /// REFUSED…) is an answer and is returned. Identical queries in flight share one exchange. JSON
    /// upstreams cannot carry a message and are skipped. Nothing is cached.
    /// - Throws: ``/DNSCore/DNSError``: `malformed_response`/`mismatched_response` or the transport's code
    ///   when every upstream failed (each attempt listed), `invalid_configuration` without a DoH
    ///   upstream, `invalid_query` when `query` is not a query with one question.
    public func forward(_ query: [UInt8]) async throws(DNSError) -> [UInt8] {
        let question = try DNSMessage.question(ofQuery: query)
        try refuseResolverArpa(question.name)
        if let forwarder = forwarder(for: question.name) { return try await forwarder.forward(query) }
        let id = UInt16(query[0]) << 8 | UInt16(query[1])
        var wire = query
        wire[0] = 0
        wire[1] = 0
        var response = try await engine.forward(wire, question: question)
        response[0] = UInt8(id >> 8)
        response[1] = UInt8(id & 0xff)
        return response
    }
}
