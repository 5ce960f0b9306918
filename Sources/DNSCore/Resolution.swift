/// The answer to a lookup: the addresses, where they came from, and until when they may be used.
///
/// ```swift
/// let resolution = try await resolver.resolve("api.example.test")
/// for address in resolution.addresses { print(address.ip, address.ttl) }
/// print(resolution.source, resolution.upstream ?? "-")
/// ```
public struct Resolution: Sendable, Hashable, CustomReflectable {
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

    /// The fields, in one box shared by every copy and copied before a write (copy on write): a
    /// cache hit returns a copy of a kept resolution, and copying one reference instead of the
    /// five strings and arrays here took a third off a hit (BENCHMARKS.md, "Cache hits and memory").
    ///
    /// `@unchecked Sendable`: a box is written only through ``unique()``, which copies it unless
    /// this value holds the only reference, so no box that two values (or threads) share is ever
    /// written.
    private final class Box: @unchecked Sendable {
        var host: String
        var addresses: [ResolvedAddress]
        var canonicalName: String?
        var source: Source
        var upstream: String?
        var elapsed: Duration
        var expiresAt: ResolverInstant
        var failedAttempts: [DNSError.Attempt]
        var dnssec: DNSSECStatus?

        init(
            host: String, addresses: [ResolvedAddress], canonicalName: String?, source: Source, upstream: String?,
            elapsed: Duration, expiresAt: ResolverInstant, failedAttempts: [DNSError.Attempt], dnssec: DNSSECStatus?
        ) {
            self.host = host
            self.addresses = addresses
            self.canonicalName = canonicalName
            self.source = source
            self.upstream = upstream
            self.elapsed = elapsed
            self.expiresAt = expiresAt
            self.failedAttempts = failedAttempts
            self.dnssec = dnssec
        }

        func copy() -> Box {
            Box(
                host: host, addresses: addresses, canonicalName: canonicalName, source: source, upstream: upstream, elapsed: elapsed,
                expiresAt: expiresAt, failedAttempts: failedAttempts, dnssec: dnssec)
        }
    }

    private var box: Box

    private mutating func unique() -> Box {
        if !isKnownUniquelyReferenced(&box) { box = box.copy() }
        return box
    }

    /// The host as the caller gave it.
    public var host: String {
        get { box.host }
        set { unique().host = newValue }
    }
    /// Addresses in the order the caller should try them.
    public var addresses: [ResolvedAddress] {
        get { box.addresses }
        set { unique().addresses = newValue }
    }
    /// The name at the end of the CNAME chain, when it differs from the host.
    public var canonicalName: String? {
        get { box.canonicalName }
        set { unique().canonicalName = newValue }
    }
    public var source: Source {
        get { box.source }
        set { unique().source = newValue }
    }
    /// The URL of the upstream that answered; nil for literals.
    public var upstream: String? {
        get { box.upstream }
        set { unique().upstream = newValue }
    }
    /// Wall time the lookup took.
    public var elapsed: Duration {
        get { box.elapsed }
        set { unique().elapsed = newValue }
    }
    /// Monotonic instant after which the answer is stale (the smallest TTL).
    public var expiresAt: ResolverInstant {
        get { box.expiresAt }
        set { unique().expiresAt = newValue }
    }
    /// Upstreams that failed before one answered, in order.
    public var failedAttempts: [DNSError.Attempt] {
        get { box.failedAttempts }
        set { unique().failedAttempts = newValue }
    }
    /// What DNSSEC validation proved about the addresses; nil when the policy is `off`.
    public var dnssec: DNSSECStatus? {
        get { box.dnssec }
        set { unique().dnssec = newValue }
    }

    public init(
        host: String, addresses: [ResolvedAddress], canonicalName: String? = nil, source: Source,
        upstream: String?, elapsed: Duration, expiresAt: ResolverInstant,
        failedAttempts: [DNSError.Attempt] = []
    ) {
        box = Box(
            host: host, addresses: addresses, canonicalName: canonicalName, source: source, upstream: upstream, elapsed: elapsed,
            expiresAt: expiresAt, failedAttempts: failedAttempts, dnssec: nil)
    }

    public static func == (lhs: Resolution, rhs: Resolution) -> Bool {
        if lhs.box === rhs.box { return true }
        return lhs.host == rhs.host && lhs.addresses == rhs.addresses && lhs.canonicalName == rhs.canonicalName
            && lhs.source == rhs.source && lhs.upstream == rhs.upstream && lhs.elapsed == rhs.elapsed
            && lhs.expiresAt == rhs.expiresAt && lhs.failedAttempts == rhs.failedAttempts && lhs.dnssec == rhs.dnssec
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(host)
        hasher.combine(addresses)
        hasher.combine(canonicalName)
        hasher.combine(source)
        hasher.combine(upstream)
        hasher.combine(elapsed)
        hasher.combine(expiresAt)
        hasher.combine(failedAttempts)
        hasher.combine(dnssec)
    }

    /// The fields, as `print` and `dump` showed them before they moved into the box.
    public var customMirror: Mirror {
        Mirror(
            self,
            children: [
                "host": host, "addresses": addresses, "canonicalName": canonicalName as Any, "source": source,
                "upstream": upstream as Any, "elapsed": elapsed, "expiresAt": expiresAt, "failedAttempts": failedAttempts,
                "dnssec": dnssec as Any,
            ], displayStyle: .struct)
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
    /// Asks the question within `timeout`, and for NXDOMAIN and NODATA also returns the zone's SOA
    /// that the response carried (what the engine keeps with a negative answer and sends again
    /// with it). The default asks ``query(_:timeout:)`` and has no SOA.
    /// - Throws: ``DNSError``, as ``query(_:timeout:)``.
    func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer
}

extension DNSUpstream {
    public func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer {
        UpstreamAnswer(try await query(question, timeout: timeout))
    }
}

/// An upstream whose queries share one connection (pipelined DoT, DoH over HTTP/2): on a lossy path
/// every answer behind a lost segment waits for TCP's retransmission, which no other query on that
/// connection can overtake. The resolver's upstream pool asks a query late past its hedge delay
/// again on a second connection to the same server when there is no other upstream to hedge to (a
/// retransmission of the resolver's own, as a browser's or unbound's is a new query).
public protocol SecondConnectionUpstream: DNSUpstream {
    /// The same server, with the same trust, over a connection of its own (opened when first asked,
    /// closed when idle). Called once, when a pool that hedges is made.
    func makeSecondConnection() -> any DNSUpstream
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
