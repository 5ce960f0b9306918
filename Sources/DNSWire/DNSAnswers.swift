import DNSCore

/// Responses to DNS queries, built from what the engine said (a ``Resolution`` or an error code):
/// the part of answering that needs no resolver, shared by `/dns-query` and the stub, and fuzzed
/// with the query parser (Fuzz/StubDatagramFuzzer.swift, Fuzz/DoHRequestFuzzer.swift).
package enum DNSAnswers {
    /// A response and the smallest TTL in it (for `Cache-Control: max-age`).
    package struct Answer: Sendable {
        package var bytes: [UInt8]
        package var minTTL: UInt32
        /// Where the answer came from, for the query log; nil for error replies.
        package var provenance: Provenance?

        package init(bytes: [UInt8], minTTL: UInt32, provenance: Provenance? = nil) {
            self.bytes = bytes
            self.minTTL = minTTL
            self.provenance = provenance
        }
    }

    /// Where an answer came from: `cache`, `doh`, `local`, `blocked`, `forwarded`, … with the
    /// upstream and the DNSSEC status when there are.
    package struct Provenance: Sendable {
        package var source: String
        package var upstream: String?
        package var dnssec: String?

        package init(source: String, upstream: String? = nil, dnssec: String? = nil) {
            self.source = source
            self.upstream = upstream
            self.dnssec = dnssec
        }
    }

    /// The reply to a message that cannot be answered normally; nil when it gets none.
    package static func reply(to problem: DNSQuery.Problem) -> [UInt8]? {
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
    package static func udpLimit(of query: DNSQuery) -> Int {
        guard let edns = query.edns else { return 512 }
        return min(max(Int(edns.udpPayloadSize), 512), Int(DNSResponseWriter.udpPayloadSize))
    }

    /// `response` if it is a message DNS can carry (at most 65,535 bytes), else a SERVFAIL with
    /// its ID and flags and no sections: the last guard before a 2-byte length is written. Every
    /// response the daemon builds or forwards is bounded before it gets here.
    package static func sendable(_ response: [UInt8]) -> [UInt8] {
        guard response.count > DNSResponseWriter.maxMessageSize else { return response }
        guard response.count >= DNSQuery.headerSize else { return [] }
        var header = Array(response[..<DNSQuery.headerSize])
        header[3] = header[3] & 0xf0 | 2  // SERVFAIL
        for index in 4..<DNSQuery.headerSize { header[index] = 0 }
        return header
    }

    /// The header, question and OPT of a response with TC set: "ask again over TCP".
    package static func truncated(_ response: [UInt8], query: DNSQuery) -> [UInt8] {
        let rcode = response.count >= 4 ? UInt16(response[3] & 0x0f) : 0
        return DNSResponseWriter(answering: query, rcode: rcode, truncated: true).finish()
    }

    /// The response carrying `resolution`: a CNAME to the canonical name when there is one, the
    /// addresses with their TTLs capped at what remains of the answer's life.
    package static func response(to query: DNSQuery, _ resolution: Resolution, now: ResolverInstant) -> Answer {
        var writer = DNSResponseWriter(answering: query)
        let minTTL = response(to: query, resolution, now: now, owner: DNSResponseWriter.questionNameOffset, writer: &writer)
        if resolution.dnssec == .secure, query.wantsAuthenticData { writer.markAuthentic() }
        return Answer(bytes: writer.finish(), minTTL: minTTL == .max ? 0 : minTTL, provenance: provenance(of: resolution))
    }

    package static func provenance(of resolution: Resolution) -> Provenance {
        Provenance(source: resolution.source.rawValue, upstream: resolution.upstream, dnssec: resolution.dnssec?.name)
    }

    /// Writes `resolution`'s CNAME (when its canonical name is not the name at `owner`) and
    /// addresses for the name at `owner`; returns the smallest TTL written (`.max` for none).
    private static func response(
        to query: DNSQuery, _ resolution: Resolution, now: ResolverInstant, owner start: Int, writer: inout DNSResponseWriter
    ) -> UInt32 {
        let remaining = max(0, (resolution.expiresAt - now).components.seconds)
        var owner = start
        var minTTL = UInt32.max
        if let canonical = resolution.canonicalName, let target = try? DomainName(canonical), target.description != resolution.host.lowercased(),
            target != query.question.name
        {
            let ttl = UInt32(clamping: min(remaining, Int64(resolution.addresses.map(\.ttl).min() ?? 0)))
            owner = writer.appendCNAME(owner: owner, ttl: ttl, target: target)
            minTTL = ttl
        }
        for address in resolution.addresses {
            let ttl = UInt32(clamping: min(Int64(address.ttl), remaining))
            writer.appendAddress(owner: owner, ttl: ttl, address.ip)
            minTTL = min(minTTL, ttl)
        }
        return minTTL
    }

    /// The response from local data: `records` (a CNAME chain first, as ``LocalZone/answer(_:type:)``
    /// gives them) with AA set when they are the whole answer, then — where the chain left the local
    /// data — `resolution`'s CNAME and addresses for the chain's last name.
    package static func response(
        to query: DNSQuery, local records: [LocalZone.Record], then resolution: Resolution? = nil, now: ResolverInstant
    ) -> Answer {
        var writer = DNSResponseWriter(answering: query)
        var owner = DNSResponseWriter.questionNameOffset
        var minTTL = UInt32.max
        for record in records {
            if record.type == .cname, case let .name(target) = record.data {
                owner = writer.appendCNAME(owner: owner, ttl: record.ttl, target: target)
            } else {
                writer.appendRecord(owner: owner, type: record.type, ttl: record.ttl, rdata: record.rdata)
            }
            minTTL = min(minTTL, record.ttl)
        }
        if let resolution {
            let rest = response(to: query, resolution, now: now, owner: owner, writer: &writer)
            minTTL = min(minTTL, rest)
        } else {
            writer.markAuthoritative()
        }
        var provenance = resolution.map(provenance(of:)) ?? Provenance(source: "local")
        if resolution != nil { provenance.source = "local+" + provenance.source }
        return Answer(bytes: writer.finish(), minTTL: minTTL == .max ? 0 : minTTL, provenance: provenance)
    }

    /// The response to a blocked name (`block.answer`): NXDOMAIN, REFUSED, or `0.0.0.0`/`::` for A
    /// and AAAA and no data for other types; AA set and an Extended DNS Error 15, "Blocked"
    /// (RFC 8914 §4.16), so that a client can tell a block from a name that does not exist.
    package static func response(to query: DNSQuery, blocked mode: LocalZone.BlockAnswer, ttl: UInt32) -> Answer {
        let rcode: ResponseCode =
            switch mode {
            case .nxdomain: .nameError
            case .refused: .refused
            case .nullIP: .noError
            }
        var writer = DNSResponseWriter(answering: query, rcode: rcode.rawValue)
        writer.markAuthoritative()
        writer.extendedError = (15, "Blocked")
        if mode == .nullIP, let type = query.addressType {
            writer.appendAddress(owner: DNSResponseWriter.questionNameOffset, ttl: ttl, type == .a ? .v4(0) : .v6(0, 0))
        }
        return Answer(bytes: writer.finish(), minTTL: mode == .refused ? 0 : ttl, provenance: Provenance(source: "blocked"))
    }

    /// The response to a question at or under `resolver.arpa` (RFC 9462), answered here and never
    /// forwarded: `_dns.resolver.arpa` SVCB gets `designations` (NODATA when there are none); any
    /// other type there, or `resolver.arpa` itself, NODATA; any other name under it NXDOMAIN.
    /// Authoritative, with a synthesized SOA for `resolver.arpa` in negative answers so that a
    /// downstream cache may keep them (RFC 2308 §5). Nil for a name outside `resolver.arpa`.
    package static func response(to query: DNSQuery, resolverArpa designations: [ServiceBinding], ttl: UInt32) -> Answer? {
        let name = query.question.name
        guard ResolverDiscovery.isSpecialUse(name) else { return nil }
        let exists = name == ResolverDiscovery.name || name == ResolverDiscovery.zone
        var writer = DNSResponseWriter(answering: query, rcode: exists ? 0 : ResponseCode.nameError.rawValue)
        writer.markAuthoritative()
        if name == ResolverDiscovery.name, query.question.type == .svcb, !designations.isEmpty {
            for record in designations {
                writer.appendRecord(owner: DNSResponseWriter.questionNameOffset, type: .svcb, ttl: ttl, rdata: record.rdata)
            }
        } else {
            let soa = DNSMessage.SOA(
                primary: ResolverDiscovery.zone, mailbox: .root, serial: 1, refresh: 3600, retry: 600, expire: 86400, minimum: ttl)
            writer.appendAuthority(NegativeAuthority(zone: ResolverDiscovery.zone, soa: soa, ttl: ttl))
        }
        return Answer(bytes: writer.finish(), minTTL: ttl, provenance: Provenance(source: "local"))
    }

    /// The response to a lookup that ended in `code`: NXDOMAIN and NODATA with `negativeTTL` for
    /// HTTP caches, the rest with their RCODE.
    /// A negative answer carries the zone's SOA in its authority section when the upstream sent
    /// one (RFC 2308 §3), its TTL what remains of the cached answer's, and that TTL for HTTP caches.
    package static func response(to query: DNSQuery, _ error: DNSError, negativeTTL: UInt32) -> Answer {
        response(to: query, error.code, negativeTTL: negativeTTL, dnssec: error.dnssec, detail: error.message, authority: error.authority)
    }

    /// As above from the code alone; `dnssec` labels a proven denial (AD) or a bogus answer (EDE 6,
    /// "DNSSEC Bogus", with `detail` as its extra text).
    package static func response(
        to query: DNSQuery, _ code: DNSError.Code, negativeTTL: UInt32, dnssec: DNSSECStatus? = nil, detail: String? = nil,
        authority: NegativeAuthority? = nil
    ) -> Answer {
        let rcode: ResponseCode =
            switch code {
            case .nxdomain: .nameError
            case .nodata: .noError
            case .invalidName: .formatError
            // The rebinding guard dropped every answer; or the upstream itself refused.
            case .rejectedPrivate, .refused: .refused
            default: .serverFailure
            }
        let negative = code == .nxdomain || code == .nodata
        // Without an SOA (vendor APIs, the system resolver), HTTP caches get the configured negative TTL.
        let ttl = negative ? authority.map { min($0.ttl, negativeTTL) } ?? negativeTTL : 0
        var writer = DNSResponseWriter(answering: query, rcode: rcode.rawValue)
        // Not under AD: DNSSEC proved the denial from a signed response of its own, not this SOA,
        // which came with the plain answer (F48-5). And never longer than `negative_ttl`.
        let authenticated = dnssec == .secure && negative && query.wantsAuthenticData
        if negative, !authenticated, var authority, query.question.name.isWithin(authority.zone) {
            authority.ttl = min(authority.ttl, negativeTTL)
            writer.appendAuthority(authority)
        }
        if code == .dnssecBogus { writer.extendedError = (6, detail ?? "DNSSEC Bogus") }
        if authenticated { writer.markAuthentic() }
        return Answer(bytes: writer.finish(), minTTL: ttl, provenance: Provenance(source: "error", dnssec: dnssec?.name))
    }

    /// The smallest TTL of a response's answers (OPT aside); for a negative answer, the SOA's
    /// negative TTL (RFC 2308 §5); 0 when neither says.
    package static func minTTL(of message: DNSMessage) -> UInt32 {
        message.answers.filter { $0.type != .opt }.map(\.ttl).min() ?? message.negativeTTL ?? 0
    }
}
