import DNSCore

extension HTTPDNSResolver {
    /// Whether ``forward(_:)`` has an upstream to use: one that carries whole messages (DoH, DoT);
    /// JSON and the commercial APIs carry addresses only.
    public var canForward: Bool { engine.pool.upstreams.contains { $0 is any MessageExchanging } }

    /// Whether ``forward(_:)`` has an upstream for a query about `name`: its forward zone's, or the
    /// trusted ones.
    public func canForward(_ name: DomainName) -> Bool { forwarder(for: name)?.canForward ?? canForward }

    /// Sends a DNS query message, as it is but for an ID of 0 (RFC 8484 §4.1), to the trusted DoH
    /// upstreams and returns the first response, unchanged but for the caller's ID restored.
    ///
    /// What the daemon does with query types the engine does not answer (MX, TXT, HTTPS, …). The
    /// upstreams are tried in the pool's order (circuit breakers included), each within its share of
    /// the remaining budget; a transport failure or a response that does not answer this query moves
    /// to the next one. The upstream's RCODE
    /// (SERVFAIL, REFUSED…) is an answer and is returned. JSON upstreams cannot carry a message and
    /// are skipped. Nothing is cached.
    /// - Throws: ``/DNSCore/DNSError``: `malformed_response`/`mismatched_response` or the transport's code
    ///   when every upstream failed (each attempt listed), `invalid_configuration` without a DoH
    ///   upstream, `invalid_query` when `query` is not a query with one question.
    public func forward(_ query: [UInt8]) async throws(DNSError) -> [UInt8] {
        let question = try DNSMessage.question(ofQuery: query)
        if let forwarder = forwarder(for: question.name) { return try await forwarder.forward(query) }
        let id = UInt16(query[0]) << 8 | UInt16(query[1])
        var wire = query
        wire[0] = 0
        wire[1] = 0
        let pool = engine.pool
        let deadline = ContinuousClock.now + options.timeout
        var failures: [DNSError.Attempt] = []
        let candidates = pool.order().compactMap { pool.upstreams[$0] as? any MessageExchanging }
        guard !candidates.isEmpty else {
            throw DNSError(.invalidConfiguration, "no DoH upstream to forward \(question.type) queries to (JSON upstreams carry A/AAAA only)")
        }
        for (position, upstream) in candidates.enumerated() {
            let remaining = deadline - .now
            guard remaining > .milliseconds(1) else { break }
            do {
                // As for lookups: a silent upstream gets its share of what is left, not all of it.
                var response = try await upstream.exchange(wire, timeout: remaining / (candidates.count - position))
                try Self.check(response, answers: question)
                response[0] = UInt8(id >> 8)
                response[1] = UInt8(id & 0xff)
                return response
            } catch {
                failures.append(.init(upstream: upstream.identifier, code: error.code, message: error.message))
            }
        }
        guard !failures.isEmpty else { throw DNSError(.timeout, "no time left to forward the query") }
        throw DNSError.combining(failures)
    }

    /// A forwarded response must decode, be a response with ID 0, and echo the question.
    static func check(_ response: [UInt8], answers question: DNSMessage.Question) throws(DNSError) {
        // No DNS message is longer than its 2-byte TCP length can say (RFC 8484 §6): the caller
        // could not pass a larger one on.
        guard response.count <= DNSMessage.maxSize else {
            throw DNSError(.responseTooLarge, "the forwarded response is \(response.count) bytes, more than a DNS message can be")
        }
        let message: DNSMessage
        do { message = try DNSMessage(decoding: response) } catch {
            throw DNSError(.malformedResponse, "forwarded response: \(error)")
        }
        guard message.isResponse, message.id == 0, message.questions == [question] else {
            throw DNSError(.mismatchedResponse, "the forwarded response does not answer the query")
        }
    }
}
