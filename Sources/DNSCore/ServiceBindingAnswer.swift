/// The answer to an HTTPS (type 65) or SVCB (type 64) lookup (RFC 9460), through the trusted
/// resolvers.
///
/// The records say how to connect (ALPN, port, ECH) and may carry address hints. Hints are only
/// hints: the trusted A/AAAA answers decide where to connect, and a hint they do not hold is never
/// dialled (``ServiceBinding/hintsOutside(_:)``; forged HTTPS records with hints are injected on
/// hijacked paths). Nothing in this library connects to a hint.
public struct ServiceBindingAnswer: Sendable, Hashable {
    /// The name asked, as given.
    public var host: String
    /// ``RecordType/https`` or ``RecordType/svcb``.
    public var type: RecordType
    /// The records, in priority order (an alias-mode record, priority 0, first).
    public var records: [ServiceBinding]
    /// The smallest TTL of the records and the CNAMEs that led to them.
    public var ttl: UInt32
    /// Where CNAMEs led, when they did.
    public var canonicalName: String?
    public var elapsed: Duration

    public init(host: String, type: RecordType, records: [ServiceBinding], ttl: UInt32, canonicalName: String?, elapsed: Duration) {
        self.host = host
        self.type = type
        self.records = records
        self.ttl = ttl
        self.canonicalName = canonicalName
        self.elapsed = elapsed
    }

    /// The `type` records that answer `name` in `response`, following its CNAMEs: the records in
    /// priority order, the smallest TTL along the chain, and the owner they were found at.
    /// - Throws: ``DNSError``: `nxdomain`, `nodata`, `refused`, `server_failure` from the RCODE;
    ///   `malformed_response` for a CNAME loop or a record that does not decode.
    public static func records(
        in response: DNSMessage, for name: DomainName, type: RecordType
    ) throws(DNSError) -> (records: [ServiceBinding], ttl: UInt32, owner: DomainName) {
        switch response.responseCode {
        case .noError: break
        case .nameError: throw DNSError(.nxdomain, "\(name) does not exist")
        case .refused: throw DNSError(.refused, "the resolver refused the \(type) query for \(name)")
        default: throw DNSError(.serverFailure, "the resolver answered \(response.responseCode) for \(name) \(type)")
        }
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
        guard !records.isEmpty else { throw DNSError(.nodata, "\(name) has no \(type) records") }
        records.sort { $0.priority < $1.priority }
        return (records, ttl, owner)
    }
}
