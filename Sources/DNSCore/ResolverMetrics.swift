import CoreMetrics
import Logging
import Synchronization

/// The engine's swift-metrics instruments, created once so the hit path only bumps a counter.
///
/// The library never bootstraps a metrics backend: without a `factory` argument the instruments
/// come from `MetricsSystem.factory` as the application bootstrapped it (a no-op when it did not).
/// Counts are per (name, record type): a dual-stack lookup that hits the cache counts two hits.
///
/// | Name | Kind | Dimensions |
/// |---|---|---|
/// | `httpdns_cache_hits_total` | counter | |
/// | `httpdns_cache_misses_total` | counter | |
/// | `httpdns_cache_stale_served_total` | counter | |
/// | `httpdns_cache_evictions_total` | counter | |
/// | `httpdns_prefetches_total` | counter | `reason`: `near_expiry`, `stale` |
/// | `httpdns_fallback_answers_total` | counter | |
/// | `httpdns_shared_cache_hits_total` | counter | |
/// | `httpdns_local_answers_total` | counter | `kind`: `record` (local records, hosts files), `blocked` |
/// | `httpdns_upstream_duration_seconds` | timer | `upstream` |
/// | `httpdns_upstream_failures_total` | counter | `upstream`, `code` |
/// | `httpdns_upstream_circuit_open` | gauge (0/1) | `upstream` |
/// | `httpdns_upstream_probes_total` | counter | `upstream` (health probes of an open circuit) |
package final class ResolverMetrics: Sendable {
    package let hits: Counter
    package let misses: Counter
    package let staleServed: Counter
    package let evictions: Counter
    package let nearExpiryPrefetches: Counter
    package let stalePrefetches: Counter
    package let fallbackAnswers: Counter
    /// Misses answered by the shared cache (`cache.shared`) instead of an upstream.
    package let sharedHits: Counter
    /// Questions answered by local records (``LocalZone``).
    package let localRecords: Counter
    /// Questions answered as blocked (``LocalZone``'s block lists).
    package let blocked: Counter
    private let latency: [String: CoreMetrics.Timer]
    private let circuit: [String: Gauge]
    private let probes: [String: Counter]
    /// Queries asked again on an upstream's second connection, by upstream.
    private let secondConnectionQueries: [String: Counter]
    private let factory: any MetricsFactory
    /// Failure counters by upstream and code, made on first use (failures are rare).
    private let failures = Mutex<[String: Counter]>([:])

    package init(factory: (any MetricsFactory)?, upstreams: [String]) {
        let factory = factory ?? MetricsSystem.factory
        self.factory = factory
        hits = Counter(label: "httpdns_cache_hits_total", factory: factory)
        misses = Counter(label: "httpdns_cache_misses_total", factory: factory)
        staleServed = Counter(label: "httpdns_cache_stale_served_total", factory: factory)
        evictions = Counter(label: "httpdns_cache_evictions_total", factory: factory)
        nearExpiryPrefetches = Counter(
            label: "httpdns_prefetches_total", dimensions: [("reason", "near_expiry")],
            factory: factory)
        stalePrefetches = Counter(label: "httpdns_prefetches_total", dimensions: [("reason", "stale")], factory: factory)
        fallbackAnswers = Counter(label: "httpdns_fallback_answers_total", factory: factory)
        sharedHits = Counter(label: "httpdns_shared_cache_hits_total", factory: factory)
        localRecords = Counter(label: "httpdns_local_answers_total", dimensions: [("kind", "record")], factory: factory)
        blocked = Counter(label: "httpdns_local_answers_total", dimensions: [("kind", "blocked")], factory: factory)
        var latency: [String: CoreMetrics.Timer] = [:]
        var circuit: [String: Gauge] = [:]
        var probes: [String: Counter] = [:]
        var secondConnectionQueries: [String: Counter] = [:]
        for upstream in upstreams {
            secondConnectionQueries[upstream] = Counter(
                label: "httpdns_upstream_second_connection_queries_total", dimensions: [("upstream", upstream)], factory: factory)
            probes[upstream] = Counter(label: "httpdns_upstream_probes_total", dimensions: [("upstream", upstream)], factory: factory)
            latency[upstream] = CoreMetrics.Timer(
                label: "httpdns_upstream_duration_seconds",
                dimensions: [("upstream", upstream)], factory: factory)
            circuit[upstream] = Gauge(
                label: "httpdns_upstream_circuit_open", dimensions: [("upstream", upstream)],
                factory: factory)
        }
        self.latency = latency
        self.circuit = circuit
        self.probes = probes
        self.secondConnectionQueries = secondConnectionQueries
    }

    /// Counts a query asked again on `upstream`'s second connection (its first connection stalled).
    package func recordSecondConnectionQuery(upstream: String) {
        secondConnectionQueries[upstream]?.increment()
    }

    /// Counts a health probe of `upstream`'s open circuit.
    package func recordProbe(upstream: String) {
        probes[upstream]?.increment()
    }

    /// Records one exchange with `upstream` that took `duration`, and its failure code if it failed.
    package func recordExchange(upstream: String, duration: Duration, failure: DNSError.Code?) {
        let (seconds, attoseconds) = duration.components
        latency[upstream]?.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        guard let failure else { return }
        let key = upstream + " " + failure.rawValue
        let counter = failures.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(
                label: "httpdns_upstream_failures_total",
                dimensions: [("upstream", upstream), ("code", failure.rawValue)], factory: factory)
            counters[key] = counter
            return counter
        }
        counter.increment()
    }

    /// Records whether `upstream`'s circuit breaker is open (skipped) or closed.
    package func recordCircuit(upstream: String, open: Bool) {
        circuit[upstream]?.record(open ? 1 : 0)
    }
}

extension Logger {
    /// The logger a resolver uses when none is given: it drops everything, so an embedding
    /// application sees no output it did not ask for.
    package static let silent = Logger(label: "httpdns", factory: { _ in SwiftLogNoOpLogHandler() })
}
