import DNSCore
import Foundation
import HijackDetection
import HTTPDNS
import Hummingbird
import HummingbirdCore
import Logging
import Metrics
import NIOSSL
import Prometheus
import ResolverConfig
import ServiceLifecycle
import Synchronization
import SystemResolver
import UnixSignals

/// What one configuration builds: the resolver, the system side, the detector and the ranker.
/// A reload builds a new one and swaps it in; requests in flight finish on the old one.
final class Runtime: Sendable {
    let config: ConfigFile
    let resolver: HTTPDNSResolver
    let system: SystemResolver
    let detector: HijackDetector
    let ranker: AddressRanker

    /// `logger` gets the engine's upstream events (circuit opened/closed, failures).
    init(_ config: ConfigFile, logger: Logger) throws(DNSError) {
        self.config = config
        let system = try SystemResolver(servers: config.systemDNS)
        self.system = system
        resolver = try HTTPDNSResolver(configuration: config.configuration, options: config.options,
                                       fallback: config.options.fallback == .system ? system : nil, logger: logger)
        let probeTimeout = min(config.options.timeout, .seconds(3))
        detector = HijackDetector(trusted: TrustedAnswers(resolver), system: PlainDNSAnswers(system, timeout: probeTimeout),
                                  prober: ConnectionProber(mode: .tls, timeout: probeTimeout, caFile: config.configuration.caFile))
        ranker = AddressRanker(resolver: resolver, prober: ConnectionProber(mode: .tls, timeout: probeTimeout, caFile: config.configuration.caFile),
                               memory: .seconds(10))
    }

    func shutdown() { system.shutdown() }
}

/// The last health check of a watched host.
public struct WatchStatus: Sendable {
    public var host: String
    public var port: Int
    public var checkedAt: Date
    public var comparison: HostComparison
    public var ranked: [RankedAddress]
}

/// Everything the HTTP handlers and the watcher share.
final class DaemonState: Sendable {
    private let runtime: Mutex<Runtime>
    private let statuses = Mutex<[String: WatchStatus]>([:])
    /// Monotonic instant of the last answer from a trusted upstream, and whether the last exchange
    /// with one failed: what `/readyz` reports.
    private let trusted = Mutex<(lastAnswer: ContinuousClock.Instant?, lastFailed: Bool)>((nil, false))
    let configPath: String
    let logger: Logger
    /// HTTP requests being handled now (`limits.max_concurrent_requests`).
    let requestsInFlight = Atomic<Int>(0)
    static let readyWindow: Duration = .seconds(120)

    init(runtime: Runtime, configPath: String, logger: Logger) {
        self.runtime = Mutex(runtime)
        self.configPath = configPath
        self.logger = logger
    }

    var current: Runtime { runtime.withLock { $0 } }

    func replace(with new: Runtime) -> Runtime {
        runtime.withLock { old in
            defer { old = new }
            return old
        }
    }

    func record(_ status: WatchStatus) -> Verdict.Kind? {
        statuses.withLock { all in
            defer { all[status.host] = status }
            return all[status.host]?.comparison.verdict.kind
        }
    }

    func allStatuses() -> [WatchStatus] { statuses.withLock { Array($0.values) } }

    func forget(except hosts: Set<String>) {
        statuses.withLock { $0 = $0.filter { hosts.contains($0.key) } }
    }

    /// Notes how a trusted lookup went: an answer from an upstream (NXDOMAIN and NODATA included)
    /// proves it healthy; a cache hit says nothing.
    func note(_ result: Result<Resolution, DNSError>) {
        switch result {
        case .success(let resolution) where resolution.source == .doh || resolution.source == .json:
            trusted.withLock { $0 = (.now, false) }
        case .failure(let error) where error.code == .nxdomain || error.code == .nodata:
            trusted.withLock { $0 = (.now, false) }
        case .failure(let error) where error.code != .invalidName && error.code != .rejectedPrivate && error.code != .cancelled:
            trusted.withLock { $0.lastFailed = true }
        default:
            break
        }
    }

    var isReady: Bool {
        trusted.withLock { state in
            guard let last = state.lastAnswer, !state.lastFailed else { return false }
            return ContinuousClock.now - last < Self.readyWindow
        }
    }
}

/// `resolve daemon`: the HTTP API, the DoH endpoint, the watcher and the signal handling, run as
/// one service group.
public enum Daemon {
    /// Loads the config (an error here is a usage error of the command) and serves until SIGTERM or
    /// SIGINT, then drains and returns.
    public static func run(configPath: String, logLevel: Logger.Level = .info) async throws {
        let config = try ConfigFile.load(configPath)
        var daemonLogger = Logger(label: "resolve.daemon")
        daemonLogger.logLevel = logLevel
        let logger = daemonLogger
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let runtime = try Runtime(config, logger: logger)
        let state = DaemonState(runtime: runtime, configPath: configPath, logger: logger)
        let (host, port) = try listenAddress(config.listen)

        let router = Router()
        router.add(middleware: MetricsMiddleware())
        router.add(middleware: LimitsMiddleware(state: state))
        router.add(middleware: AuthMiddleware(state: state))
        Routes.install(on: router, state: state, registry: registry)
        let server: HTTPServerBuilder
        if let sslContext = try tlsContext(config) {
            let routes = router.buildResponder()
            server = HTTPServerBuilder { responder in
                DaemonHTTPSChannel(sslContext: sslContext, http1: HTTP1Channel(responder: responder), state: state, router: routes)
            }
        } else {
            server = .http1()
        }
        var appLogger = logger
        appLogger.logLevel = max(logLevel, .notice)
        let scheme = config.tls == nil ? "http" : "https"
        let app = Application(router: router, server: server,
                              configuration: .init(address: .hostname(host, port: port), serverName: "resolve-daemon"),
                              onServerRunning: { channel in
                                  logger.notice("listening", metadata: [
                                      "address": "\(channel.localAddress.map { "\($0)" } ?? config.listen)", "scheme": "\(scheme)",
                                  ])
                              },
                              logger: appLogger)
        let watcher = Watcher(state: state)
        let reloader = Reloader(state: state)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [.init(service: app), .init(service: watcher), .init(service: reloader)]
        if let dnsListen = config.dnsListen {
            let (dnsHost, dnsPort) = try listenAddress(dnsListen, key: "dns_listen")
            services.append(.init(service: DNSStub(state: state, host: dnsHost, port: dnsPort)))
        }
        services.append(.init(service: CachePersister(state: state)))
        var groupConfiguration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        // Draining is bounded: requests still running after 10 s are cancelled, and the cache is
        // written all the same.
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(10)
        groupConfiguration.maximumCancellationDuration = .seconds(5)
        let group = ServiceGroup(configuration: groupConfiguration)
        if let persist = config.persistPath {
            do { _ = try runtime.resolver.loadCache(from: persist) } catch { logger.warning("ignoring the cache file", metadata: ["error": "\(error.message)"]) }
        }
        var failure: (any Error)?
        do { try await group.run() } catch { failure = error }
        let final = state.current
        if let persist = final.config.persistPath {
            do { try final.resolver.saveCache(to: persist) } catch { logger.error("cache not saved", metadata: ["error": "\(error.message)"]) }
        }
        final.shutdown()
        if let failure {
            logger.error("stopped with an error", metadata: ["error": "\(failure)"])
            throw failure
        }
        logger.notice("stopped")
    }

    /// With `tls:`, the TLS context of the HTTPS listener, which offers HTTP/2 and HTTP/1.1 by ALPN
    /// (what DoH clients expect); nil for plain HTTP/1.1. Built here, while the config is read, so
    /// that a key that does not match the certificate is an error of the config, not of the listener.
    static func tlsContext(_ config: ConfigFile) throws(DNSError) -> NIOSSLContext? {
        guard let files = config.tls else { return nil }
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMFile(files.certificate)
        } catch {
            throw DNSError(.invalidConfiguration, "tls.cert: '\(files.certificate)' is not a PEM certificate chain (\(error))")
        }
        do {
            key = try NIOSSLPrivateKey(file: files.key, format: .pem)
        } catch {
            throw DNSError(.invalidConfiguration, "tls.key: '\(files.key)' is not a PEM private key (\(error))")
        }
        guard !chain.isEmpty else { throw DNSError(.invalidConfiguration, "tls.cert: '\(files.certificate)' holds no certificate") }
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.minimumTLSVersion = .tlsv12
        tls.applicationProtocols = ["h2", "http/1.1"]
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw DNSError(.invalidConfiguration, "tls: the certificate and key do not make a TLS context - is the key the certificate's? (\(error))")
        }
    }

    /// `IPv4:port` or `[IPv6]:port`.
    static func listenAddress(_ text: String, key: String = "listen") throws(DNSError) -> (String, Int) {
        guard let (address, port) = IPAddress.endpoint(text), let port else {
            throw DNSError(.invalidConfiguration, "\(key): '\(text)' is not IP:port")
        }
        return (address.description, port)
    }
}

/// Writes the cache to `cache.persist` every `cache.persist_interval` (it is also written on
/// shutdown), so a crash or a power cut loses at most one interval of answers.
struct CachePersister: Service {
    let state: DaemonState

    func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: state.current.config.persistInterval)
                let runtime = state.current
                guard !Task.isCancelled, let path = runtime.config.persistPath else { continue }
                do throws(DNSError) { try runtime.resolver.saveCache(to: path) } catch {
                    state.logger.error("cache not saved, retrying at the next interval", metadata: ["error": "\(error.message)"])
                }
            }
        }
    }
}

/// SIGHUP: the new file is fully validated and built before it replaces the old; an invalid one is
/// logged (with its line and key) and the old configuration keeps serving.
struct Reloader: Service {
    let state: DaemonState

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                reload()
            }
        }
    }

    func reload() {
        let logger = state.logger
        do {
            let config = try ConfigFile.load(state.configPath)
            let running = state.current.config
            for (key, changed) in [("listen", config.listen != running.listen), ("tls", config.tls != running.tls),
                                   ("dns_listen", config.dnsListen != running.dnsListen)] where changed {
                logger.warning("\(key) changed: takes effect after a restart", metadata: ["key": "\(key)"])
            }
            // The TLS files must make a TLS context: a restart must not fail on what a reload accepted.
            _ = try Daemon.tlsContext(config)
            let old = state.replace(with: try Runtime(config, logger: logger))
            state.forget(except: Set(config.watch.map(\.host)))
            // Lookups still running on the old runtime finish with its upstreams; its c-ares
            // thread is stopped once they had time to.
            Task {
                try? await Task.sleep(for: .seconds(30))
                old.shutdown()
            }
            logger.notice("configuration reloaded", metadata: ["file": "\(state.configPath)", "watched": "\(config.watch.count)"])
        } catch {
            logger.error("configuration NOT reloaded, the previous one keeps serving", metadata: ["error": "\(error.message)"])
        }
    }
}
