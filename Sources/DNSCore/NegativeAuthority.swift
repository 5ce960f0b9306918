/// The zone's SOA record that came with a negative answer (RFC 2308 §3): kept with the cached
/// NXDOMAIN or NODATA and sent again with it, so that a downstream cache can keep the negative
/// answer too (RFC 2308 §5 lets a cache keep one only with its SOA).
///
/// Only an SOA for the question's own name or a zone above it is kept: one for another name (a
/// CNAME's target's zone, which the answer does not show, or anything else) would tell a downstream
/// cache about a zone the response does not answer for.
public struct NegativeAuthority: Sendable, Hashable {
    /// The fields in one immutable box: a reference in every error, cache payload and async frame
    /// that carries one, not 50 bytes (a burst of 1,024 stalled lookups grew 2.9 MB more with the
    /// fields inline: the adversarial suite's bound).
    private final class Storage: Sendable {
        let zone: DomainName
        let soa: DNSMessage.SOA
        let ttl: UInt32

        init(zone: DomainName, soa: DNSMessage.SOA, ttl: UInt32) {
            self.zone = zone
            self.soa = soa
            self.ttl = ttl
        }
    }

    private var storage: Storage

    /// The SOA record's owner: the zone apex.
    public var zone: DomainName {
        get { storage.zone }
        set { storage = Storage(zone: newValue, soa: storage.soa, ttl: storage.ttl) }
    }
    public var soa: DNSMessage.SOA {
        get { storage.soa }
        set { storage = Storage(zone: storage.zone, soa: newValue, ttl: storage.ttl) }
    }
    /// Seconds a downstream cache may keep the negative answer: the smaller of the SOA record's TTL
    /// and its MINIMUM when received (RFC 2308 §5); in an error from the cache, what remains.
    public var ttl: UInt32 {
        get { storage.ttl }
        set { storage = Storage(zone: storage.zone, soa: storage.soa, ttl: newValue) }
    }

    public init(zone: DomainName, soa: DNSMessage.SOA, ttl: UInt32) {
        storage = Storage(zone: zone, soa: soa, ttl: ttl)
    }

    public static func == (lhs: NegativeAuthority, rhs: NegativeAuthority) -> Bool {
        lhs.storage === rhs.storage || (lhs.zone == rhs.zone && lhs.soa == rhs.soa && lhs.ttl == rhs.ttl)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(zone)
        hasher.combine(soa)
        hasher.combine(ttl)
    }
}

/// An upstream's answer to one question with, for NXDOMAIN and NODATA, the SOA its response carried.
public struct UpstreamAnswer: Sendable, Hashable {
    public var answer: AddressAnswer
    /// For NXDOMAIN and NODATA: the zone's SOA, when the response carried one for the question's
    /// name or a zone above it; nil otherwise.
    public var authority: NegativeAuthority?

    public init(_ answer: AddressAnswer, authority: NegativeAuthority? = nil) {
        self.answer = answer
        self.authority = authority
    }
}

extension DomainName {
    /// Whether this name is `zone` or below it.
    public func isWithin(_ zone: DomainName) -> Bool {
        guard wire.count >= zone.wire.count else { return false }
        var index = 0
        while true {
            let rest = wire.count - index
            if rest == zone.wire.count { return wire[index...].elementsEqual(zone.wire) }
            guard rest > zone.wire.count, wire[index] != 0 else { return false }
            index += Int(wire[index]) + 1
        }
    }
}

extension DNSMessage {
    /// For a negative `answer` to `question`: the first SOA record of class IN in the authority
    /// section whose owner is the question's name or a zone above it, with the TTL a cache may keep
    /// it for (``negativeTTL``'s rule). Nil for addresses, or when there is none.
    public func negativeAuthority(for question: Question, answer: AddressAnswer) -> NegativeAuthority? {
        if case .addresses = answer { return nil }
        for record in authorities where record.type == .soa && record.recordClass == Self.classIN {
            guard case let .soa(soa) = record.data, question.name.isWithin(record.name) else { continue }
            return NegativeAuthority(zone: record.name, soa: soa, ttl: Swift.min(record.ttl, soa.minimum))
        }
        return nil
    }

    /// ``answer(decoding:to:id:flagging:)`` with the negative answer's SOA: the form the DNS-message
    /// transports (DoH, DoT, plain DNS) use.
    public static func upstreamAnswer(
        decoding bytes: [UInt8], to question: Question, id: UInt16?, flagging: (@Sendable (DomainName) -> Bool)? = nil
    ) throws(DNSError) -> UpstreamAnswer {
        let message: DNSMessage
        do {
            message = try DNSMessage(decoding: bytes)
        } catch {
            throw DNSError(error.code, error.description)
        }
        let answer = try message.answer(to: question, id: id ?? message.id, flagging: flagging)
        return UpstreamAnswer(answer, authority: message.negativeAuthority(for: question, answer: answer))
    }
}
