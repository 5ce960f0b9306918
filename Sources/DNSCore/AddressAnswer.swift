/// An address record with the TTL it may be cached for.
public struct ResolvedAddress: Sendable, Hashable, CustomStringConvertible {
    public var ip: IPAddress
    /// Seconds the record may be used, capped by every CNAME on the way to it.
    public var ttl: UInt32

    public init(ip: IPAddress, ttl: UInt32) {
        self.ip = ip
        self.ttl = ttl
    }

    public var description: String { "\(ip) (ttl \(ttl))" }
}

/// What a validated response says about one (name, type) question.
public enum AddressAnswer: Sendable, Hashable {
    /// Address records found at the end of the CNAME chain.
    case addresses([ResolvedAddress], canonicalName: DomainName)
    /// The name does not exist; `negativeTTL` from the SOA, when the response carried one (RFC 2308).
    case nxdomain(negativeTTL: UInt32?)
    /// The name exists but has no record of this type.
    case nodata(negativeTTL: UInt32?)
}

extension DNSMessage {
    /// How many CNAMEs a response may chain before it is treated as malformed.
    public static let maxCNAMEChain = 16

    /// Checks that this message answers `question` sent with `id`, then extracts the addresses.
    ///
    /// The CNAME chain is followed from the question's name inside the response only; records for
    /// names not reached through that chain are ignored, never returned.
    ///
    /// - Throws: ``WireError`` when the message is not a response to that query (QR, opcode, ID,
    ///   question echo compared case-insensitively) or the chain is too long; ``DNSError`` for
    ///   SERVFAIL, REFUSED and other error RCODEs.
    /// - Parameters:
    ///   - question: what was asked.
    ///   - id: the query's ID.
    ///   - flagging: names a block list covers: when an alias in the middle of the chain is one, the
    ///     answer's canonical name is that alias, so that the check of canonical names blocks it
    ///     (CNAME cloaking through a listed name: F26 of redteam-4).
    /// - Returns: the addresses at the end of the chain, or NXDOMAIN / NODATA.
    package func addressAnswer(for question: Question, id: UInt16, flagging: (@Sendable (DomainName) -> Bool)? = nil) throws -> AddressAnswer {
        try validate(answering: question, id: id)
        let rcode = responseCode
        switch rcode {
        case .noError:
            break
        case .nameError:
            return .nxdomain(negativeTTL: negativeTTL(for: question))
        case .serverFailure:
            throw DNSError(.serverFailure, "the resolver answered SERVFAIL for \(question.name)")
        default:
            throw DNSError(.refused, "the resolver answered \(rcode) for \(question.name)")
        }

        var target = question.name
        var flagged: DomainName?
        var chainTTL = UInt32.max
        var visited: Set<DomainName> = []  // the names of the chain, filled once it has an alias
        for _ in 0...Self.maxCNAMEChain {
            var found: [ResolvedAddress] = []
            var next: DomainName?
            for record in answers where record.name == target && record.recordClass == Self.classIN {
                if record.type == question.type, case let .address(ip) = record.data {
                    found.append(ResolvedAddress(ip: ip, ttl: Swift.min(record.ttl, chainTTL)))
                } else if record.type == .cname, case let .cname(alias) = record.data, next == nil {
                    next = alias
                    chainTTL = Swift.min(chainTTL, record.ttl)
                }
            }
            if !found.isEmpty { return .addresses(found, canonicalName: flagged ?? target) }
            guard let alias = next else { return .nodata(negativeTTL: negativeTTL(for: question)) }
            if visited.isEmpty { visited.insert(target) }
            guard visited.insert(alias).inserted else {
                throw DNSError(.malformedResponse, "CNAME loop at \(alias) in the answer for \(question.name)")
            }
            target = alias
            if flagged == nil, let flagging, flagging(alias) { flagged = alias }
        }
        throw DNSError(.malformedResponse, "CNAME chain for \(question.name) is longer than \(Self.maxCNAMEChain)")
    }

    /// `addressAnswer(for:id:)` with every failure as a ``DNSError``: the form transports use.
    /// `flagging`: names whose appearance as an alias makes it the answer's canonical name (block
    /// lists' CNAME cloaking).
    public func answer(to question: Question, id: UInt16, flagging: (@Sendable (DomainName) -> Bool)? = nil) throws(DNSError) -> AddressAnswer {
        do {
            return try addressAnswer(for: question, id: id, flagging: flagging)
        } catch let error as WireError {
            throw DNSError(error.code, error.description)
        } catch let error as DNSError {
            throw error
        } catch {
            throw DNSError(.malformedResponse, "\(error)")
        }
    }

    /// Decodes `bytes` and extracts the answer to `question`; `id` nil accepts the message's own ID
    /// (for transports that matched it already).
    public static func answer(
        decoding bytes: [UInt8], to question: Question, id: UInt16?, flagging: (@Sendable (DomainName) -> Bool)? = nil
    ) throws(DNSError) -> AddressAnswer {
        try upstreamAnswer(decoding: bytes, to: question, id: id, flagging: flagging).answer
    }

    /// The first name in the answer section for which `listed` holds: any record's owner or any
    /// CNAME's target, of any class, whatever its place in the chain. What a block list checks in
    /// a relayed answer of any type (CNAME cloaking in HTTPS, TXT, MX…, F33 of the threat model;
    /// address answers are checked by ``answer(to:id:flagging:)``). Every name, not only the chain
    /// from the question as this resolver would follow it: a client may follow another of two CNAMEs
    /// at one owner, a CNAME of another class, or a DNAME's records without their CNAME, as AdGuard
    /// Home and Blocky check every CNAME target. One pass; each distinct name is tested once.
    package func firstListedName(where listed: (DomainName) -> Bool) -> DomainName? {
        var seen: Set<DomainName> = []
        for record in answers {
            if seen.insert(record.name).inserted, listed(record.name) { return record.name }
            if case let .cname(alias) = record.data, seen.insert(alias).inserted, listed(alias) { return alias }
        }
        return nil
    }

    /// Throws unless this is a response to the query `question` with `id`.
    package func validate(answering question: Question, id expectedID: UInt16) throws(WireError) {
        guard isResponse else { throw .notAResponse }
        guard opcode == 0 else { throw .opcodeMismatch(got: opcode) }
        guard id == expectedID else { throw .idMismatch(expected: expectedID, got: id) }
        guard questions.count == 1 else {
            throw .questionMismatch("\(questions.count) questions instead of 1")
        }
        let echoed = questions[0]
        guard echoed.name == question.name else {
            throw .questionMismatch("asked \(question.name), answered \(echoed.name)")
        }
        guard echoed.type == question.type, echoed.recordClass == question.recordClass else {
            throw .questionMismatch("asked \(question.type), answered \(echoed.type)")
        }
    }

    /// The negative-caching TTL of an answer to `question`: that of the SOA ``negativeAuthority(for:answer:)``
    /// keeps (class IN, owned by the name or a zone above it), so that the cached entry lives as
    /// long as the SOA it is sent with says — an SOA of another zone or class first in the section
    /// does not set the entry's life while another one is sent (a hostile upstream's way past
    /// `negative_ttl`, F48-1). Nil without such an SOA.
    package func negativeTTL(for question: Question) -> UInt32? {
        negativeAuthority(for: question, answer: .nodata(negativeTTL: nil))?.ttl
    }

    /// The negative-caching TTL: the smaller of the SOA record's TTL and its MINIMUM (RFC 2308 §5).
    public var negativeTTL: UInt32? {
        for record in authorities where record.type == .soa {
            if case let .soa(soa) = record.data { return Swift.min(record.ttl, soa.minimum) }
        }
        return nil
    }
}
