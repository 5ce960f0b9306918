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
}
