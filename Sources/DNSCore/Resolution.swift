/// The answer to a lookup: the addresses, where they came from, and until when they may be used.
///
/// ```swift
/// let resolution = try await resolver.resolve("api.example.test")
/// for address in resolution.addresses { print(address.ip, address.ttl) }
/// print(resolution.source, resolution.upstream ?? "-")
/// ```
public struct Resolution: Sendable, Hashable {
    /// Where an answer came from.
    public enum Source: String, Sendable, Hashable, CaseIterable {
        /// A trusted RFC 8484 DoH resolver.
        case doh
        /// A trusted resolver speaking the JSON API.
        case json
        /// A trusted RFC 7858 DNS-over-TLS resolver.
        case dot
        /// A fresh cached answer.
        case cache
        /// An expired cached answer served within the stale window (RFC 8767).
        case stale
        /// The system (plain, hijackable) DNS, used only when policy allows fallback.
        case system
        /// The host was an IP literal; nothing was resolved.
        case literal
        /// A commercial HTTPDNS service's own API (Alibaba, Tencent, Baidu).
        case httpdns
        /// Local data (``LocalZone``: `records:`, hosts files, a block list's `null-ip`); never cached.
        case local
    }

    /// The host as the caller gave it.
    public var host: String
    /// Addresses in the order the caller should try them.
    public var addresses: [ResolvedAddress]
    /// The name at the end of the CNAME chain, when it differs from the host.
    public var canonicalName: String?
    public var source: Source
    /// The URL of the upstream that answered; nil for literals.
    public var upstream: String?
    /// Wall time the lookup took.
    public var elapsed: Duration
    /// Monotonic instant after which the answer is stale (the smallest TTL).
    public var expiresAt: ResolverInstant
    /// Upstreams that failed before one answered, in order.
    public var failedAttempts: [DNSError.Attempt]
    /// What DNSSEC validation proved about the addresses; nil when the policy is `off`.
    public var dnssec: DNSSECStatus?

    public init(
        host: String, addresses: [ResolvedAddress], canonicalName: String? = nil, source: Source,
        upstream: String?, elapsed: Duration, expiresAt: ResolverInstant,
        failedAttempts: [DNSError.Attempt] = []
    ) {
        self.host = host
        self.addresses = addresses
        self.canonicalName = canonicalName
        self.source = source
        self.upstream = upstream
        self.elapsed = elapsed
        self.expiresAt = expiresAt
        self.failedAttempts = failedAttempts
    }

    /// Whether this is an expired answer served under RFC 8767.
    public var isStale: Bool { source == .stale }
}

/// Turns host names into addresses: `HTTPDNSResolver`, or anything a caller puts in its place (what
/// `AddressRanker` and the hijack detector ask).
public protocol HostResolving: Sendable {
    /// Resolves `host`.
    /// - Throws: ``DNSError``.
    func resolve(_ host: String, type: AddressQuery) async throws(DNSError) -> Resolution
}

/// A trusted resolver that answers one (name, type) question. Implemented by the DoH and JSON
/// transports; tests inject fakes.
public protocol DNSUpstream: Sendable {
    /// The URL that identifies this upstream in results and errors.
    var identifier: String { get }
    /// What a successful answer from this upstream is marked as.
    var source: Resolution.Source { get }
    /// Asks the question within `timeout`.
    /// - Throws: ``DNSError``; NXDOMAIN and NODATA are answers, not errors.
    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer
}

/// An upstream that carries whole DNS messages (RFC 8484 DoH, plain DNS): what forwarding the query
/// types the engine does not answer (TXT, MX, PTR, …) needs.
public protocol MessageExchanging: DNSUpstream {
    /// Sends `query` as it is and returns the response's bytes, with the query's ID; the caller
    /// checks that it answers the question.
    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8]
}

/// An upstream that can answer several names in one request (the vendor HTTPDNS APIs' batch
/// resolution). The engine uses it to warm the cache ahead of per-name lookups.
public protocol BatchingUpstream: DNSUpstream {
    /// The most names one request carries.
    var batchSize: Int { get }
    /// Asks for A and AAAA of every name in one request.
    /// - Returns: the answers the upstream gave, per (name, type); names it left out are missing.
    /// - Throws: ``DNSError`` when the request as a whole failed.
    func queryBatch(_ names: [DomainName], timeout: Duration) async throws(DNSError) -> [(DNSMessage.Question, AddressAnswer)]
}
