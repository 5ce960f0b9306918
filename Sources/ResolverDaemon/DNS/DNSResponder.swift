import DNSCore
import HTTPDNS

/// Answers DNS queries from the engine: the wire side of `/dns-query` and of the DNS stub.
///
/// A and AAAA come from the engine (remaining TTL, a CNAME to the canonical name); NXDOMAIN and
/// NODATA as such; upstream failures SERVFAIL (REFUSED when the upstream refused). Other types, and
/// names that are valid DNS but not host names (`a+b.example`), are forwarded as they are to the
/// trusted DoH upstreams and returned unchanged but for the ID and the question's letter case.
enum DNSResponder {
    /// A response and the smallest TTL in it (for `Cache-Control: max-age`).
    struct Answer: Sendable {
        var bytes: [UInt8]
        var minTTL: UInt32
    }

    /// The answer when the engine has it without a lookup (a fresh cached A or AAAA), built without
    /// suspending; nil when ``answer(_:resolver:now:)`` has to be awaited. For the event loop.
    static func answerWithoutWaiting(_ query: DNSQuery, resolver: HTTPDNSResolver,
                                     now: ContinuousClock.Instant = .now) -> Answer? {
        guard let type = query.addressType,
              let resolution = resolver.resolveWithoutWaiting(query.question.name.description, type: type) else { return nil }
        return response(to: query, resolution, now: now)
    }

    /// Answers `query`, looking up or forwarding as needed.
    static func answer(_ query: DNSQuery, resolver: HTTPDNSResolver, now: ContinuousClock.Instant = .now) async -> Answer {
        guard let type = query.addressType else { return await forward(query, resolver: resolver) }
        if let ready = answerWithoutWaiting(query, resolver: resolver, now: now) { return ready }
        do {
            let resolution = try await resolver.resolve(query.question.name.description, type: type)
            return response(to: query, resolution, now: .now)
        } catch {
            // A name DNS allows but a host name does not: the upstream decides (BIND says NXDOMAIN).
            if error.code == .invalidName, resolver.canForward { return await forward(query, resolver: resolver) }
            return response(to: query, error, resolver: resolver)
        }
    }

    /// The reply to a message that cannot be answered normally; nil when it gets none.
    static func reply(to problem: DNSQuery.Problem) -> [UInt8]? {
        switch problem {
        case .unanswerable:
            return nil
        case let .formatError(_, id, flags):
            return DNSResponseWriter(id: id, queryFlags: flags, rcode: ResponseCode.formatError.rawValue).finish()
        case let .notImplemented(_, id, flags):
            return DNSResponseWriter(id: id, queryFlags: flags, rcode: ResponseCode.notImplemented.rawValue).finish()
        case let .badVersion(query):
            // BADVERS is 16: 0 in the header, 1 in the OPT record's extended RCODE.
            return DNSResponseWriter(answering: query).finish(extendedRcode: 1)
        }
    }

    /// What fits in a UDP response to `query`: 512 bytes without EDNS, else its advertised size
    /// (at least 512, RFC 6891 §6.2.5) up to our own 1,232.
    static func udpLimit(of query: DNSQuery) -> Int {
        guard let edns = query.edns else { return 512 }
        return min(max(Int(edns.udpPayloadSize), 512), Int(DNSResponseWriter.udpPayloadSize))
    }

    /// The header, question and OPT of a response with TC set: "ask again over TCP".
    static func truncated(_ response: [UInt8], query: DNSQuery) -> [UInt8] {
        let rcode = response.count >= 4 ? UInt16(response[3] & 0x0f) : 0
        return DNSResponseWriter(answering: query, rcode: rcode, truncated: true).finish()
    }

    private static func response(to query: DNSQuery, _ resolution: Resolution, now: ContinuousClock.Instant) -> Answer {
        let remaining = max(0, (resolution.expiresAt - now).components.seconds)
        var writer = DNSResponseWriter(answering: query)
        var owner = DNSResponseWriter.questionNameOffset
        var minTTL = UInt32.max
        if let canonical = resolution.canonicalName, let target = try? DomainName(canonical), target != query.question.name {
            let ttl = UInt32(clamping: min(remaining, Int64(resolution.addresses.map(\.ttl).min() ?? 0)))
            owner = writer.appendCNAME(owner: owner, ttl: ttl, target: target)
            minTTL = ttl
        }
        for address in resolution.addresses {
            let ttl = UInt32(clamping: min(Int64(address.ttl), remaining))
            writer.appendAddress(owner: owner, ttl: ttl, address.ip)
            minTTL = min(minTTL, ttl)
        }
        return Answer(bytes: writer.finish(), minTTL: minTTL == .max ? 0 : minTTL)
    }

    private static func response(to query: DNSQuery, _ error: DNSError, resolver: HTTPDNSResolver) -> Answer {
        let rcode: ResponseCode = switch error.code {
        case .nxdomain: .nameError
        case .nodata: .noError
        case .invalidName: .formatError
        // The rebinding guard dropped every answer; or the upstream itself refused.
        case .rejectedPrivate, .refused: .refused
        default: .serverFailure
        }
        // The engine keeps the zone's SOA to itself: a negative answer goes without one, and HTTP
        // caches get the configured negative TTL.
        let negativeTTL = error.code == .nxdomain || error.code == .nodata
            ? UInt32(clamping: resolver.options.negativeTTL.components.seconds) : 0
        return Answer(bytes: DNSResponseWriter(answering: query, rcode: rcode.rawValue).finish(), minTTL: negativeTTL)
    }

    static func forward(_ query: DNSQuery, resolver: HTTPDNSResolver) async -> Answer {
        guard resolver.canForward else {
            return Answer(bytes: DNSResponseWriter(answering: query, rcode: ResponseCode.notImplemented.rawValue).finish(), minTTL: 0)
        }
        do {
            var response = try await resolver.forward(query.wire)
            DNSResponseWriter.restoreQuestion(&response, from: query)
            return Answer(bytes: response, minTTL: minTTL(of: response))
        } catch {
            return Answer(bytes: DNSResponseWriter(answering: query, rcode: ResponseCode.serverFailure.rawValue).finish(), minTTL: 0)
        }
    }

    /// The smallest TTL of a response's answers (OPT aside); for a negative answer, the SOA's
    /// negative TTL (RFC 2308 §5); 0 when neither says.
    static func minTTL(of response: [UInt8]) -> UInt32 {
        guard let message = try? DNSMessage(decoding: response) else { return 0 }
        let ttls = message.answers.filter { $0.type != .opt }.map(\.ttl)
        if let smallest = ttls.min() { return smallest }
        for record in message.authorities {
            if case .soa(let soa) = record.data { return min(record.ttl, soa.minimum) }
        }
        return 0
    }
}
