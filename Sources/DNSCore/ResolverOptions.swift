/// How to resolve: budgets, policies, cache behaviour (hickory-dns's `ResolverOpts`).
/// Every field's default is in its comment; values come from the RFCs and the best peers.
public struct ResolverOptions: Sendable, Hashable {
    /// What to do when every trusted upstream fails and no stale answer exists.
    public enum Fallback: String, Sendable, Hashable, CaseIterable {
        /// Never use the system's DNS: fail with the upstreams' errors (strict, the default).
        case none
        /// Ask the system's DNS; such answers are marked source `system`.
        case system
    }

    /// The budget for one lookup across every upstream. Default 3 s.
    public var timeout: Duration = .seconds(3)
    /// Accept answers in special-purpose ranges (see ``IPAddress/specialPurposeRange``).
    /// Default false: the rebinding guard drops them.
    public var allowPrivate = false
    /// The cap on a resolver's response body. Default 64 KiB (OkHttp's `MAX_RESPONSE_SIZE`).
    public var maxResponseBytes = 64 * 1024
    /// Order of families in a dual-stack answer. Default IPv6 first (RFC 6724).
    public var preferIPv6 = true
    /// Upstream selection. Default ``UpstreamStrategy/ordered``.
    public var strategy: UpstreamStrategy = .ordered
    /// Default ``Fallback/none``.
    public var fallback: Fallback = .none

    /// Shortest time a positive answer is cached, whatever its TTL. Default 60 s.
    public var minTTL: Duration = .seconds(60)
    /// Longest time a positive answer is cached. Default 86,400 s (24 h).
    public var maxTTL: Duration = .seconds(86_400)
    /// Cap on caching NXDOMAIN/NODATA; the SOA minimum is used when smaller (RFC 2308). Default 30 s.
    public var negativeTTL: Duration = .seconds(30)
    /// How long a total upstream failure is remembered. Default 10 s.
    public var failureTTL: Duration = .seconds(10)
    /// How long after expiry an answer may still be served as stale (RFC 8767). Default 3,600 s;
    /// zero disables serve-stale.
    public var staleWindow: Duration = .seconds(3_600)
    /// How long a lookup that finds only a stale answer waits for a fresh one before answering from
    /// stale (RFC 8767's client response timer, which suggests 1.8 s). Default zero: the stale
    /// answer is returned at once and the refresh runs in the background (Unbound's
    /// `serve-expired` without a client timeout), the lowest latency for the caller.
    public var staleAnswerDelay: Duration = .zero
    /// The TTL given to stale answers (RFC 8767 §4). Default 30 s.
    public var staleAnswerTTL: UInt32 = 30
    /// Refresh in the background on a hit in the last 10 % of an entry's TTL. Default true.
    public var prefetch = true
    /// Entries the cache holds at most. Default 100,000.
    public var cacheCapacity = 100_000
    /// Hedged lookups: when an upstream has not answered within a high quantile of its recent
    /// round-trip times (smoothed RTT plus four deviations, 50 ms to 1 s; 200 ms before it is
    /// measured), the next upstream is asked too and the first answer wins — so a blackholed or
    /// stalled upstream costs a lookup that delay, not its share of ``timeout``. The question then
    /// goes to two upstreams. Default true; the `race` strategy asks two from the start.
    public var hedging = true
    /// Names at or under `resolver.arpa` (RFC 9462) are never sent upstream — every lookup,
    /// forwarded message and HTTPS/SVCB lookup of one fails with `nxdomain` at once — as a
    /// forwarder must (§6.1): `_dns.resolver.arpa` names the resolver asked, and an upstream's
    /// answer would designate the upstream. The daemon sets it; a client asking a designated
    /// resolver about itself (`resolve lookup --ddr`) does not. Default false.
    public var keepsResolverArpa = false
    /// The name a background probe asks an upstream whose circuit is open (dnsdist's `checkName`):
    /// a tripped upstream is asked again by lookups only after it has answered this, so that no
    /// user waits on a dead upstream's trial. The probe passes on an answer, NXDOMAIN or NODATA;
    /// SERVFAIL, REFUSED or no answer fail it and double the wait before the next. Default `.`
    /// (the root), which every recursive resolver answers; an invalid name is read as the root.
    public var healthCheckName = "."
    /// The type the probe asks. Default NS (with the root: the question every resolver answers
    /// from its priming).
    public var healthCheckType: RecordType = .ns

    public init(timeout: Duration = .seconds(3), allowPrivate: Bool = false) {
        self.timeout = timeout
        self.allowPrivate = allowPrivate
    }
}
