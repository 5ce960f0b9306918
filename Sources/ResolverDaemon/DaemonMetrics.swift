import CoreMetrics
import DNSStubServer
import DNSWire
import Synchronization

/// Every metric the daemon itself records, with its label and dimensions written once here (the
/// engine's own are in `ResolverMetrics`). Made from the factory the executable bootstrapped, or
/// from a test's own.
///
/// The HTTP series keep the names the daemon has always exposed (`hb_requests`,
/// `http_server_request_duration`, with `http_route`, `http_request_method` and
/// `http_response_status_code`): both HTTP versions record through ``request(route:method:status:nanoseconds:)``.
final class DaemonMetrics: Sendable {
    let factory: any MetricsFactory

    private struct RequestKey: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    private let requests = Mutex<[RequestKey: (Counter, Timer)]>([:])
    /// The series of answered DoH GETs and POSTs, made once: the hot path takes no lock for them.
    private let dohAnswered: (get: (Counter, Timer), post: (Counter, Timer))
    let dohMalformed: Counter
    private let stubQueries: (udp: Counter, tcp: Counter, dot: Counter)
    private let stubMalformed: (udp: Counter, tcp: Counter, dot: Counter)
    private let stubDropped: (udp: Counter, tcp: Counter, dot: Counter)
    let stubTruncated: Counter
    /// PROXY v2 headers refused from trusted proxies (malformed, missing, or cut short).
    let proxyHeaderRejected: Counter
    private let connectionsOpen: (https: Gauge, dns: Gauge, dot: Gauge)
    private let rejected = Mutex<[String: Counter]>([:])
    let ready: Gauge

    init(factory: any MetricsFactory) {
        self.factory = factory
        dohMalformed = Counter(label: "httpdns_doh_malformed_total", factory: factory)
        func pair(_ label: String) -> (Counter, Counter, Counter) {
            (
                Counter(label: label, dimensions: [("transport", "udp")], factory: factory),
                Counter(label: label, dimensions: [("transport", "tcp")], factory: factory),
                Counter(label: label, dimensions: [("transport", "dot")], factory: factory)
            )
        }
        stubQueries = pair("httpdns_dns_stub_queries_total")
        stubMalformed = pair("httpdns_dns_stub_malformed_total")
        stubDropped = pair("httpdns_dns_stub_dropped_total")
        stubTruncated = Counter(label: "httpdns_dns_stub_truncated_total", factory: factory)
        proxyHeaderRejected = Counter(label: "httpdns_proxy_protocol_rejected_total", factory: factory)
        connectionsOpen = (
            Gauge(label: "httpdns_connections_open", dimensions: [("listener", "http")], factory: factory),
            Gauge(label: "httpdns_connections_open", dimensions: [("listener", "dns_tcp")], factory: factory),
            Gauge(label: "httpdns_connections_open", dimensions: [("listener", "dot")], factory: factory)
        )
        ready = Gauge(label: "httpdns_ready", factory: factory)
        proxy = ProxySeries(factory: factory)
        func series(_ method: String) -> (Counter, Timer) {
            let dimensions = [("http.route", "/dns-query"), ("http.request.method", method), ("http.response.status_code", "200")]
            return (
                Counter(label: "hb.requests", dimensions: dimensions, factory: factory),
                Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds, factory: factory)
            )
        }
        dohAnswered = (series("GET"), series("POST"))
        requests.withLock {
            $0[RequestKey(route: "/dns-query", method: "GET", status: 200)] = dohAnswered.get
            $0[RequestKey(route: "/dns-query", method: "POST", status: 200)] = dohAnswered.post
        }
    }

    /// One DoH query answered 200 (either HTTP version).
    func dohAnswered(post: Bool, nanoseconds: UInt64) {
        let (counter, timer) = post ? dohAnswered.post : dohAnswered.get
        counter.increment()
        timer.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    /// One HTTP request answered (either HTTP version, any path).
    func request(route: String, method: String, status: Int, nanoseconds: UInt64) {
        let key = RequestKey(route: route, method: method, status: status)
        let (counter, timer) = requests.withLock { cache in
            if let made = cache[key] { return made }
            let dimensions = [("http.route", route), ("http.request.method", method), ("http.response.status_code", String(status))]
            let made = (
                Counter(label: "hb.requests", dimensions: dimensions, factory: factory),
                Timer(label: "http.server.request.duration", dimensions: dimensions, preferredDisplayUnit: .seconds, factory: factory)
            )
            cache[key] = made
            return made
        }
        counter.increment()
        timer.recordNanoseconds(Int64(clamping: nanoseconds))
    }

    func stubQuery(_ transport: DNSTransport) { Self.pick(stubQueries, transport)?.increment() }
    func stubMalformed(_ transport: DNSTransport) { Self.pick(stubMalformed, transport)?.increment() }
    func stubDropped(_ transport: DNSTransport) { Self.pick(stubDropped, transport)?.increment() }

    /// The stub's series for `transport`; nil for DoH, which `/dns-query`'s own metrics count.
    private static func pick(_ series: (udp: Counter, tcp: Counter, dot: Counter), _ transport: DNSTransport) -> Counter? {
        switch transport {
        case .udp: series.udp
        case .tcp: series.tcp
        case .dot: series.dot
        case .doh: nil
        }
    }

    func connectionsOpen(_ listener: Listener, _ count: Int) {
        switch listener {
        case .http: connectionsOpen.https.record(count)
        case .dnsTCP: connectionsOpen.dns.record(count)
        case .dot: connectionsOpen.dot.record(count)
        }
    }

    /// A connection closed by the daemon before or instead of serving it: `reason` is one of
    /// `limit` (too many open), `timeout` (no TLS handshake or request in time), `error` (a
    /// protocol error from the client). Logged at debug only: a client must not be able to flood
    /// the log.
    func connectionRejected(_ listener: Listener, reason: String) {
        let key = "\(listener.rawValue)/\(reason)"
        rejected.withLock { cache in
            if let counter = cache[key] { return counter }
            let counter = Counter(
                label: "httpdns_connections_closed_total", dimensions: [("listener", listener.rawValue), ("reason", reason)],
                factory: factory)
            cache[key] = counter
            return counter
        }.increment()
    }

    // MARK: The forward proxy

    private let proxy: ProxySeries

    /// Made once: a tunnel counts its bytes on every read, and making a series per call (a
    /// registry lookup under a lock) cost more than the relaying it counted.
    private final class ProxySeries: Sendable {
        let outcomes = Mutex<[String: Counter]>([:])
        let tunnels = Atomic<Int>(0)
        let tunnelsOpen: Gauge
        let connectionsOpen: Gauge
        let bytes: (upstream: Counter, downstream: Counter)

        init(factory: any MetricsFactory) {
            tunnelsOpen = Gauge(label: "httpdns_proxy_tunnels_open", factory: factory)
            connectionsOpen = Gauge(label: "httpdns_connections_open", dimensions: [("listener", "proxy")], factory: factory)
            bytes = (
                Counter(label: "httpdns_proxy_bytes_total", dimensions: [("direction", "upstream")], factory: factory),
                Counter(label: "httpdns_proxy_bytes_total", dimensions: [("direction", "downstream")], factory: factory)
            )
        }
    }

    /// Client connections open on the proxy listener.
    func proxyConnectionsOpen(_ count: Int) {
        proxy.connectionsOpen.record(count)
    }

    /// How a proxy request ended: `tunnel`, or the status it was refused with (`403`, `407`, `502`,
    /// `504`, `400`, `501`), `head_timeout`, `connection_limit`.
    func proxyOutcome(_ outcome: String) {
        proxy.outcomes.withLock { cache in
            if let counter = cache[outcome] { return counter }
            let counter = Counter(label: "httpdns_proxy_requests_total", dimensions: [("outcome", outcome)], factory: factory)
            cache[outcome] = counter
            return counter
        }.increment()
    }

    func proxyTunnelsOpen(_ delta: Int) {
        let open = proxy.tunnels.add(delta, ordering: .relaxed).newValue
        proxy.tunnelsOpen.record(open)
    }

    /// Bytes relayed: `upstream` from clients to origins, else from origins to clients.
    func proxyBytes(upstream: Bool, _ count: Int) {
        (upstream ? proxy.bytes.upstream : proxy.bytes.downstream).increment(by: Int64(count))
    }

    // MARK: The watcher

    func watchCheck(host: String, verdict: String, all: [String]) {
        Counter(label: "httpdns_watch_checks_total", dimensions: [("host", host), ("verdict", verdict)], factory: factory).increment()
        for kind in all {
            Gauge(label: "httpdns_watch_verdict", dimensions: [("host", host), ("verdict", kind)], factory: factory)
                .record(kind == verdict ? 1 : 0)
        }
    }

    func probe(result: String) {
        Counter(label: "httpdns_probes_total", dimensions: [("result", result)], factory: factory).increment()
    }

    func verdictChanged(host: String) {
        Counter(label: "httpdns_watch_verdict_changes_total", dimensions: [("host", host)], factory: factory).increment()
    }

    enum Listener: String, Sendable {
        case http
        case dnsTCP = "dns_tcp"
        case dot
    }
}
