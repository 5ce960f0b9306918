import DNSCore
import DNSStubServer
import DNSWire
import HTTPDNS

/// Answers DNS queries from the engine: the wire side of `/dns-query` and of the DNS stub.
///
/// A and AAAA come from the engine (remaining TTL, a CNAME to the canonical name); NXDOMAIN and
/// NODATA as such; upstream failures SERVFAIL (REFUSED when the upstream refused). Other types, and
/// names that are valid DNS but not host names (`a+b.example`), are forwarded as they are to the
/// trusted DoH or DoT upstreams and returned unchanged but for the ID, the question's letter case
/// and — with DNSSEC validation on — the AD bit, which only what this daemon validated may carry;
/// or blocked, when a block list covers a name of their answer section (F33).
enum DNSResponder {
    typealias Answer = DNSAnswers.Answer

    /// The answer when there is one without a lookup — local data (records, a blocked name) for
    /// any type, or a fresh cached A or AAAA — built without suspending; nil when
    /// ``answer(_:resolver:)`` has to be awaited. For the event loop.
    static func answerWithoutWaiting(
        _ query: DNSQuery, resolver: HTTPDNSResolver,
        now: ResolverInstant? = nil
    ) -> Answer? {
        guard query.wire.count <= maxQuery else { return oversized(query) }
        if resolver.configuration.localZone != nil, let local = resolver.localAnswer(query.question.name, type: query.question.type) {
            return localAnswer(query, local, resolver: resolver)
        }
        return cachedAnswer(query, resolver: resolver, now: now)
    }

    /// A fresh cached A or AAAA for a name that is not local: the resolver's stages past the local
    /// data, with the name the query parser made.
    private static func cachedAnswer(_ query: DNSQuery, resolver: HTTPDNSResolver, now: ResolverInstant? = nil) -> Answer? {
        guard let type = query.addressType, query.question.name.isHostName,
            let resolution = resolver.resolveNow(Lookup(query.question.name, type: type, mode: .now, pastLocalData: true))
        else { return nil }
        return DNSAnswers.response(to: query, resolution, now: now ?? resolver.clock.now)
    }

    /// The answer from local data, or nil when a local CNAME chain leaves it (a lookup follows).
    private static func localAnswer(_ query: DNSQuery, _ local: LocalZone.Answer, resolver: HTTPDNSResolver) -> Answer? {
        switch local {
        case let .blocked(mode):
            return DNSAnswers.response(to: query, blocked: mode, ttl: resolver.configuration.localZone?.blockTTL ?? 0)
        case let .records(records, continueAt):
            guard continueAt == nil else { return nil }
            return DNSAnswers.response(to: query, local: records, now: resolver.clock.now)
        }
    }

    /// Answers `query`, looking up or forwarding as needed: what follows when
    /// ``answerWithoutWaiting(_:resolver:now:)`` had no answer (the cache is not asked for a hit
    /// again).
    static func answer(_ query: DNSQuery, resolver: HTTPDNSResolver) async -> Answer {
        guard query.wire.count <= maxQuery else { return oversized(query) }
        // `resolver.arpa` is answered before this (``DaemonState/answerWithoutWaiting(_:runtime:)``);
        // should a path come here with it, it is still not forwarded (RFC 9462 §6.1).
        if let special = DNSAnswers.response(to: query, resolverArpa: [], ttl: 0) { return special }
        if resolver.configuration.localZone != nil, let local = resolver.localAnswer(query.question.name, type: query.question.type) {
            if let ready = localAnswer(query, local, resolver: resolver) { return ready }
            guard case let .records(records, continueAt?) = local else { return await forward(query, resolver: resolver) }
            // The chain left the local data: its last name's addresses are looked up; other types
            // get the chain, which the client follows (as from an authoritative server).
            guard let type = query.addressType else { return DNSAnswers.response(to: query, local: records, now: resolver.clock.now) }
            do {
                let resolution = try await resolver.resolve(continueAt.description, type: type)
                return DNSAnswers.response(to: query, local: records, then: resolution, now: resolver.clock.now)
            } catch {
                return DNSAnswers.response(to: query, error, negativeTTL: UInt32(clamping: resolver.options.negativeTTL.components.seconds))
            }
        }
        guard let type = query.addressType else { return await forward(query, resolver: resolver) }
        // A name DNS allows but a host name does not: the upstream decides (BIND says NXDOMAIN).
        guard query.question.name.isHostName else {
            if resolver.canForward(query.question.name) { return await forward(query, resolver: resolver) }
            let error = DNSError(.invalidName, "\(query.question.name) is not a host name")
            return DNSAnswers.response(to: query, error, negativeTTL: UInt32(clamping: resolver.options.negativeTTL.components.seconds))
        }
        // CD with validation on: the client validates itself and wants the data as the upstream
        // has it, bogus or not (RFC 4035 §3.2.2) — with the RRSIGs when it set DO.
        if query.checkingDisabled, resolver.configuration.dnssec.policy != .off, resolver.canForward(query.question.name) {
            return await forward(query, resolver: resolver)
        }
        do {
            var lookup = Lookup(query.question.name, type: type, mode: .wait, pastLocalData: true)
            lookup.afterMiss = true
            let resolution = try await resolver.resolve(lookup)
            return DNSAnswers.response(to: query, resolution, now: resolver.clock.now)
        } catch {
            return DNSAnswers.response(to: query, error, negativeTTL: UInt32(clamping: resolver.options.negativeTTL.components.seconds))
        }
    }

    /// The largest query answered. A query is a question and an OPT record: a few hundred bytes,
    /// 468 when padded (RFC 8467). What a query weighs is held while its lookup is in flight — the
    /// message with the lookup's task, and when relayed whole its single-flight key and a base64
    /// GET path per upstream asked (two with hedging) — so 64 KiB queries over TCP, DoT or DoH
    /// multiplied the memory the lookup budget allows (R5 of issue 48's red team: 1,024 stalled
    /// 65,000-byte A queries held 147 MB, 100-byte ones 70 MB).
    static let maxQuery = 4_096

    /// FORMERR for a query over ``maxQuery``: a client that sent EDNS options — the only way a
    /// query gets that large — retries without them (RFC 6891 §7). Nothing is looked up or sent.
    static func oversized(_ query: DNSQuery) -> Answer {
        Answer(bytes: DNSResponseWriter(answering: query, rcode: ResponseCode.formatError.rawValue).finish(), minTTL: 0)
    }

    static func forward(_ query: DNSQuery, resolver: HTTPDNSResolver) async -> Answer {
        guard resolver.canForward(query.question.name) else {
            return Answer(bytes: DNSResponseWriter(answering: query, rcode: ResponseCode.notImplemented.rawValue).finish(), minTTL: 0)
        }
        do {
            var response = try await resolver.forward(query.wire)
            // Decoded once here (the forwarder checked it decodes): for the block check and the TTL.
            let message = try? DNSMessage(decoding: response)
            // CNAME cloaking in a relayed type (HTTPS, TXT, MX…): a listed name in the answer blocks
            // it as it does an address answer (F33).
            if let zone = resolver.configuration.localZone, let message, resolver.blockedName(inRelayed: message) != nil {
                return DNSAnswers.response(to: query, blocked: zone.blockAnswer, ttl: zone.blockTTL)
            }
            DNSResponseWriter.restoreQuestion(&response, from: query)
            // The upstream's padding was for this daemon's query: dropped here, so that a plain
            // UDP or TCP client never gets it (a larger reflected answer); DoT and DoH pad again
            // for a client that asked (DNSTransport.outgoing).
            response = EDNSPadding.unpadded(response)
            // With validation on, AD is this daemon's word for what it proved (RFC 6840 §5.8):
            // forwarded data was not validated here, so the upstream's AD — which a lying upstream
            // sets at will — is not passed on.
            if resolver.configuration.dnssec.policy != .off, response.count > 3 { response[3] &= ~0x20 }
            return Answer(bytes: response, minTTL: message.map(DNSAnswers.minTTL(of:)) ?? 0, provenance: .init(source: "forwarded"))
        } catch {
            // REFUSED when that is what the upstreams said (a plain DNS server refusing an AXFR).
            let rcode = error.code == .refused ? ResponseCode.refused : .serverFailure
            return Answer(bytes: DNSResponseWriter(answering: query, rcode: rcode.rawValue).finish(), minTTL: 0)
        }
    }
}
