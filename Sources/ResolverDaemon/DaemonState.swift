import AddressProbing
import CoreMetrics
import Crypto
import DNSCore
import DNSStubServer
import DNSWire
import DaemonHTTP
import DaemonListening
import ForwardProxy
import Foundation
import HTTPDNS
import HijackDetection
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import RedisCache
import ResolverConfig
import ServiceLifecycle
import Synchronization
import SystemResolver
import UnixSignals

/// The last health check of a watched host.
struct WatchStatus: Sendable {
    var host: String
    var port: Int
    var checkedAt: Date
    var comparison: HostComparison
    var ranked: [RankedAddress]
}

/// One past check of a watched host.
struct WatchHistoryEntry: Sendable {
    var checkedAt: Date
    var verdict: Verdict.Kind
    var reason: String
}

/// Everything the listeners, the watcher and the routes share.
final class DaemonState: Sendable {
    private let runtime: Mutex<Runtime>
    private let statuses = Mutex<[String: WatchStatus]>([:])
    /// Whether ``statuses`` holds anything (the query log asks it per question).
    private let hasStatuses = Atomic<Bool>(false)
    /// The last ``historyLength`` checks of each watched host, oldest first (the status page).
    private let histories = Mutex<[String: [WatchHistoryEntry]]>([:])
    static let historyLength = 20
    /// The file SIGHUP re-reads; nil when the settings came from the command line.
    let configPath: String?
    /// What the command changes in the file's settings, at start and on every reload
    /// (`resolve proxy` keeps only the proxy listening).
    let adjust: @Sendable (inout ConfigFile) -> Void
    let logger: Logger
    let metrics: DaemonMetrics
    /// The one admission budget (`limits.max_concurrent_requests`): lookups and routed requests in
    /// flight over every transport — the stub (UDP, TCP), DoT and the HTTP listener share it.
    let lookups: LookupBudget
    /// API requests that look nothing up (metrics, health, status, the page), in flight: counted
    /// apart from ``lookups`` against the same limit, so a full budget never hides them.
    let routesInFlight = Atomic<Int>(0)
    /// Set by the first SIGTERM: health checks fail from then on (`readiness.lame_duck`).
    private let stopping = Atomic<Bool>(false)
    /// Set once the process switched to `user:`.
    let privilegesDropped = Atomic<Bool>(false)
    /// The query log (`query_log:`), or nil when off.
    let queryLog: QueryLog?
    /// Per-client rate limits (`rate_limit:`), or nil when off.
    let rateLimiter: RateLimiter?

    init(
        runtime: Runtime, configPath: String?, adjust: @escaping @Sendable (inout ConfigFile) -> Void = { _ in }, metrics: DaemonMetrics,
        logger: Logger
    ) {
        self.runtime = Mutex(runtime)
        self.configPath = configPath
        self.adjust = adjust
        self.metrics = metrics
        self.logger = logger
        lookups = LookupBudget(limit: runtime.config.daemon.limits.maxConcurrentRequests)
        queryLog = runtime.config.daemon.queryLog.map { QueryLog(settings: $0, metrics: metrics.factory) }
        rateLimiter = runtime.config.daemon.rateLimit.map { RateLimiter(settings: $0, metrics: metrics.factory) }
    }

    var current: Runtime { runtime.withLock { $0 } }

    /// Whether the question in `wire` from `client` may be answered (always, without `rate_limit:`),
    /// and if not, what the client gets; the address is read only when a limit is set (a channel's
    /// `remoteAddress` takes a lock).
    func admission(_ client: @autoclosure () -> SocketAddress?, transport: DNSTransport, query wire: [UInt8]) -> StubAdmission {
        guard let rateLimiter else { return .answer }
        switch rateLimiter.decide(client(), transport: transport) {
        case .allowed:
            return .answer
        case .truncated:
            // TC=1 and the question alone: a real client asks again over TCP (RFC 1035 §4.2.1).
            guard let query = try? DNSQuery(wire) else { return .limited(reply: nil) }
            return .limited(reply: DNSResponseWriter(answering: query, truncated: true).finish())
        case .limited:
            guard rateLimiter.settings.action == .refused, let query = try? DNSQuery(wire) else { return .limited(reply: nil) }
            return .limited(reply: DNSResponseWriter(answering: query, rcode: ResponseCode.refused.rawValue).finish())
        }
    }

    /// Logs an answered question when the query log is on (one nil check when it is off).
    func logQuery(
        _ query: DNSQuery, _ answer: DNSAnswers.Answer, client: @autoclosure () -> SocketAddress?, transport: DNSTransport, started: UInt64
    ) {
        guard let queryLog else { return }
        let client = client()
        let verdict: String? =
            hasStatuses.load(ordering: .relaxed)
            ? statuses.withLock { $0[query.question.name.description]?.comparison.verdict.kind.rawValue } : nil
        let now = DispatchTime.now().uptimeNanoseconds
        queryLog.record(
            QueryLog.Entry(
                time: queryLog.wallTime(atUptime: now), client: client, transport: transport.rawValue, query: query, response: answer.bytes,
                provenance: answer.provenance, verdict: verdict, latencyNanoseconds: now &- started))
    }

    func replace(with new: Runtime) -> Runtime {
        lookups.setLimit(new.config.daemon.limits.maxConcurrentRequests)
        return runtime.withLock { old in
            defer { old = new }
            return old
        }
    }

    func record(_ status: WatchStatus) -> Verdict.Kind? {
        histories.withLock { all in
            var list = all[status.host] ?? []
            list.append(
                WatchHistoryEntry(checkedAt: status.checkedAt, verdict: status.comparison.verdict.kind, reason: status.comparison.verdict.reason))
            if list.count > Self.historyLength { list.removeFirst(list.count - Self.historyLength) }
            all[status.host] = list
        }
        hasStatuses.store(true, ordering: .relaxed)
        return statuses.withLock { all in
            defer { all[status.host] = status }
            return all[status.host]?.comparison.verdict.kind
        }
    }

    func allStatuses() -> [WatchStatus] { statuses.withLock { Array($0.values) } }

    func history(of host: String) -> [WatchHistoryEntry] { histories.withLock { $0[host] ?? [] } }

    /// What the watcher knows about `host` that a connection should heed: the addresses it holds as
    /// hijacked (the system's answer, where the verdict is hijacked, less the trusted addresses),
    /// and its ranking of the trusted ones (healthy first, fastest first).
    func watchAdvice(for host: String) -> WatchAdvice {
        guard let status = statuses.withLock({ $0[host] }) else { return WatchAdvice() }
        var hijacked = Set<IPAddress>()
        if status.comparison.verdict.kind == .hijacked, case let .addresses(system) = status.comparison.system {
            let trusted: [IPAddress] = if case let .addresses(list) = status.comparison.trusted { list } else { [] }
            hijacked = Set(system).subtracting(trusted)
        }
        return WatchAdvice(hijacked: hijacked, ranking: status.ranked.filter(\.isHealthy).map(\.ip))
    }

    func forget(except hosts: Set<String>) {
        statuses.withLock { $0 = $0.filter { hosts.contains($0.key) } }
        histories.withLock { $0 = $0.filter { hosts.contains($0.key) } }
    }

    /// How long an upstream counts as reachable after it last responded.
    var readyWindow: Duration { current.config.daemon.readiness.interval * 3 }

    /// Ready when some trusted upstream responded within the window and has not failed since —
    /// the upstreams' own health, whatever the cache holds.
    var isReady: Bool { current.resolver.hasReachableUpstream(within: readyWindow) }

    /// Whether the daemon is stopping (its lame-duck time, then the drain).
    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// Marks the daemon as stopping; true the first time.
    func beginStopping() -> Bool {
        !stopping.exchange(true, ordering: .relaxed)
    }

    /// What a health check is told (`/readyz`, `readiness.dns_name`): ready and not stopping.
    var passesHealthChecks: Bool { !isStopping && isReady }

    /// The one-line summary systemd shows (`STATUS=`).
    var statusLine: String {
        let runtime = current
        let upstreams = runtime.config.lookup.configuration.upstreams.count
        let statuses = allStatuses()
        let hijacked = statuses.filter { $0.comparison.verdict.kind == .hijacked }.count
        let health =
            isStopping ? "stopping" : isReady ? "ready" : "not ready: no trusted upstream responded in \(readyWindow.components.seconds) s"
        return "\(health); \(upstreams) upstream\(upstreams == 1 ? "" : "s"); \(runtime.config.daemon.watch.count) watched, \(hijacked) hijacked"
    }

    /// The answer to the health-check name (`readiness.dns_name` of `runtime`), or nil for any other
    /// question.
    func healthAnswer(_ query: DNSQuery, runtime: Runtime) -> DNSResponder.Answer? {
        guard let name = runtime.config.daemon.readiness.dnsName, query.question.name == name else { return nil }
        let rcode = passesHealthChecks ? ResponseCode.noError : .serverFailure
        return DNSResponder.Answer(bytes: DNSResponseWriter(answering: query, rcode: rcode.rawValue).finish(), minTTL: 0)
    }

    /// The answer when there is one without waiting: the health-check name's, `resolver.arpa`'s
    /// (RFC 9462, never forwarded: ``Runtime/Discovery``), else a fresh cached
    /// A or AAAA (``DNSResponder/answerWithoutWaiting(_:resolver:now:)``). `runtime` is the one the
    /// caller read (``current`` takes a lock).
    func answerWithoutWaiting(_ query: DNSQuery, runtime: Runtime) -> DNSResponder.Answer? {
        healthAnswer(query, runtime: runtime)
            ?? DNSAnswers.response(to: query, resolverArpa: runtime.discovery.records, ttl: runtime.discovery.ttl)
            ?? DNSResponder.answerWithoutWaiting(query, resolver: runtime.resolver)
    }
}
