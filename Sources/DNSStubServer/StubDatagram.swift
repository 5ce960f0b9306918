import DNSCore

// The fuzz target (Scripts/fuzz.sh) builds this file into one module with the wire code.
#if canImport(DNSWire)
import DNSWire
#endif

/// One datagram to the stub, answered as far as it can be without a lookup.
package enum StubDatagram {
    package enum Reply {
        /// Send these bytes (an error reply: small whatever the transport).
        case now([UInt8])
        /// Send this answer to the query (over UDP through ``fitted(_:to:)``).
        case answer(DNSAnswers.Answer, DNSQuery)
        /// Look the query up, then send the answer through ``fitted(_:to:)``.
        case lookup(DNSQuery)
        /// Send nothing (not a query).
        case none
    }

    /// Parses `wire` and answers what needs no lookup: errors, and what `cached` knows.
    static func reply(to wire: [UInt8], cached: (DNSQuery) -> DNSAnswers.Answer?) -> (reply: Reply, malformed: Bool) {
        let query: DNSQuery
        do {
            query = try DNSQuery(wire)
        } catch {
            return (DNSAnswers.reply(to: error).map(Reply.now) ?? .none, true)
        }
        if let answer = cached(query) { return (.answer(answer, query), false) }
        return (.lookup(query), false)
    }

    /// `response` as sent over UDP: with TC and no records when it is larger than the client takes.
    static func fitted(_ response: [UInt8], to query: DNSQuery) -> [UInt8] {
        response.count > DNSAnswers.udpLimit(of: query) ? DNSAnswers.truncated(response, query: query) : response
    }
}
