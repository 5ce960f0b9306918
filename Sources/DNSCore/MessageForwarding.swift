extension ResolverEngine {
    /// Whether any upstream carries whole DNS messages (DoH, DoT, plain DNS): what forwarding needs.
    package var canForward: Bool { pool.upstreams.contains { $0 is any MessageExchanging } }

    /// Sends `wire` — a query whose question is `question`, with an ID of 0 (RFC 8484 §4.1) — to the
    /// upstreams that carry whole messages, through the pool's attempt loop (order and strategy,
    /// budget shares, hedging, circuits, RTT, metrics, the engine's clock), and returns the first
    /// response that answers it, as the upstream sent it. Identical queries in flight share one
    /// exchange (single flight). A response that does not decode or does not echo the question is
    /// that upstream's failure and moves on to the next one; an RCODE (SERVFAIL, REFUSED…) is an
    /// answer. Nothing is cached.
    /// - Throws: ``DNSError``: every upstream's failure combined (each attempt listed),
    ///   `invalid_configuration` when no upstream carries messages, `cancelled`.
    package func forward(_ wire: [UInt8], question: DNSMessage.Question) async throws(DNSError) -> [UInt8] {
        guard canForward else {
            throw DNSError(.invalidConfiguration, "no DoH or DoT upstream to forward \(question.type) queries to (JSON upstreams carry A/AAAA only)")
        }
        let result = await forwarding.run(wire) { [self] in
            let deadline = clock.now + options.timeout
            let outcome = await pool.attempt(.message(wire, question), deadline: deadline)
            if let response = outcome.message { return .success(response) }
            if outcome.failures.contains(where: { $0.code == .cancelled }) { return .failure(DNSError(.cancelled, "cancelled")) }
            return .failure(DNSError.combining(outcome.failures))
        }
        return try result.get()
    }

    /// A forwarded response must fit a DNS message, decode, be a response with ID 0, echo the
    /// question, and carry at most one OPT record, in its additional section.
    package static func check(_ response: [UInt8], answers question: DNSMessage.Question) throws(DNSError) {
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
        // RFC 6891 §6.1.1: more than one OPT record, or one outside the additional section, is
        // FORMERR; passed on, its padding could not be removed for a plain client (F51-P4).
        guard message.additionals.lazy.filter({ $0.type == .opt }).count <= 1,
            !message.answers.contains(where: { $0.type == .opt }), !message.authorities.contains(where: { $0.type == .opt })
        else {
            throw DNSError(.malformedResponse, "forwarded response: more than one OPT record, or one outside the additional section")
        }
    }
}
