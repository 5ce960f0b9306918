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

/// `resolve daemon`: the HTTP listener, the DNS stub, the watcher, readiness probes, cache
/// snapshots and SIGHUP reloads, run as one service group until SIGTERM or SIGINT (or
/// ``shutdown()``), then drained within a bounded time and the cache written.
///
/// The daemon uses the metrics factory and logger it is given; bootstrapping the process's
/// logging and metrics backends is the executable's business, so tests run it in process.
package final class Daemon: Sendable {
    /// How long every listener waits for its connections to finish on shutdown before it closes
    /// them (one grace for all, ``ListenerLifetime``); the whole stop stays well inside the service
    /// group's own limit.
    static let drainTimeout = ListenerLifetime.drainGrace
    /// How long a closed TLS connection waits for the client's close_notify.
    static let tlsShutdownTimeout: TimeAmount = .seconds(1)

    private let state: DaemonState
    private let exposition: @Sendable () -> [UInt8]
    private let signals: [UnixSignal]
    private let group = Mutex<ServiceGroup?>(nil)
    private let bound = Mutex<(http: SocketAddress?, dnsUDP: SocketAddress?, dnsTCP: SocketAddress?, proxy: SocketAddress?, dot: SocketAddress?)>(
        (nil, nil, nil, nil, nil))
    private let started = Mutex<[CheckedContinuation<Void, Never>]?>([])
    private let notifier: SystemdNotifier?
    /// Startup: READY=1 goes out once every listener is bound and the first readiness check is done.
    private let startup = Mutex<(bound: Bool, checked: Bool)>((false, false))
    /// Why the daemon stopped itself (a failed switch to `user:`), thrown by ``run()``.
    private let fatal = Mutex<DNSError?>(nil)

    /// Loads and checks the config file.
    /// - Parameters:
    ///   - configPath: the YAML file, read now and again on every SIGHUP.
    ///   - metrics: where every metric goes (the engine's and the daemon's).
    ///   - exposition: the Prometheus text `/metrics` serves.
    ///   - logger: where the daemon logs (the command's level and format).
    ///   - signals: what stops the daemon gracefully (none in tests, which call ``shutdown()``).
    ///   - adjust: what the command changes in the file's settings, at start and on every reload.
    ///   - notifier: where the service manager listens (`$NOTIFY_SOCKET`), or nil.
    /// - Throws: ``DNSError`` with ``DNSError/Code/invalidConfiguration``.
    package convenience init(
        configPath: String, metrics: any MetricsFactory, exposition: @escaping @Sendable () -> [UInt8], logger: Logger,
        signals: [UnixSignal] = [.sigterm, .sigint], adjust: @escaping @Sendable (inout ConfigFile) -> Void = { _ in },
        notifier: SystemdNotifier? = SystemdNotifier()
    ) throws(DNSError) {
        var config = try ConfigFile.load(configPath)
        adjust(&config)
        try self.init(
            config: config, configPath: configPath, metrics: metrics, exposition: exposition, logger: logger, signals: signals, adjust: adjust,
            notifier: notifier)
    }

    /// Settings made in code (`resolve proxy` from its flags); with a `configPath`, SIGHUP re-reads it.
    package init(
        config: ConfigFile, configPath: String?, metrics: any MetricsFactory, exposition: @escaping @Sendable () -> [UInt8], logger: Logger,
        signals: [UnixSignal] = [.sigterm, .sigint], adjust: @escaping @Sendable (inout ConfigFile) -> Void = { _ in },
        notifier: SystemdNotifier? = SystemdNotifier()
    ) throws(DNSError) {
        let runtime = try Runtime(config, metrics: metrics, logger: logger)
        _ = try Self.tlsContext(config)
        _ = try Self.listenAddress(config.daemon.listen)
        if let dns = config.daemon.dnsListen { _ = try Self.listenAddress(dns, key: "dns_listen") }
        if let dot = config.daemon.dotListen { _ = try Self.listenAddress(dot, key: "dot_listen") }
        if let proxy = config.daemon.proxyListen { _ = try Self.listenAddress(proxy, key: "proxy_listen") }
        state = DaemonState(runtime: runtime, configPath: configPath, adjust: adjust, metrics: DaemonMetrics(factory: metrics), logger: logger)
        Self.logLocalData(config, logger: logger)
        Self.logDiscovery(runtime.discovery, logger: logger)
        self.exposition = exposition
        self.signals = signals
        self.notifier = notifier
    }

    /// The addresses the listeners are bound to (port 0 in a config means any free port).
    package var httpAddress: SocketAddress? { bound.withLock { $0.http } }
    package var dnsAddress: SocketAddress? { bound.withLock { $0.dnsUDP } }
    package var proxyAddress: SocketAddress? { bound.withLock { $0.proxy } }
    package var dotAddress: SocketAddress? { bound.withLock { $0.dot } }

    /// Waits until the listeners are bound.
    package func waitUntilListening() async {
        await withCheckedContinuation { continuation in
            let waiting = started.withLock { waiting -> Bool in
                guard waiting != nil else { return false }
                waiting!.append(continuation)
                return true
            }
            if !waiting { continuation.resume() }
        }
    }

    private func listening() {
        let dnsExpected = state.current.config.daemon.dnsListen != nil
        let proxyExpected = state.current.config.daemon.proxyListen != nil
        let dotExpected = state.current.config.daemon.dotListen != nil
        let ready = bound.withLock { bound -> Bool in
            let http = bound.http != nil
            let dns = !dnsExpected || (bound.dnsUDP != nil && bound.dnsTCP != nil)
            let proxy = !proxyExpected || bound.proxy != nil
            let dot = !dotExpected || bound.dot != nil
            return http && dns && proxy && dot
        }
        guard ready else { return }
        let waiting = started.withLock { waiting in
            defer { waiting = nil }
            return waiting
        }
        guard let waiting else { return }
        if let queryLog = state.queryLog, !queryLog.isOpen {
            state.logger.error(
                "query_log: the file cannot be opened (a link, not a regular file, or not writable); nothing is logged until it can be",
                metadata: ["file": "\(queryLog.settings.path)"])
        }
        // Every port is bound: what needed root is done.
        if let user = state.current.config.daemon.user { switchUser(user) }
        for continuation in waiting { continuation.resume() }
        startupStep { $0.bound = true }
    }

    private func switchUser(_ user: String) {
        let logger = state.logger
        do {
            // Everything read from files is in memory already (CA bundle, keys, lists, anchors); the
            // query log's file is open. What is still written after the switch is checked after it.
            if let ids = Privileges.ids(of: user) { state.queryLog?.handOver(toUID: ids.uid, gid: ids.gid) }
            switch try Privileges.drop(to: user) {
            case .switched(let uid, let gid):
                state.privilegesDropped.store(true, ordering: .relaxed)
                logger.notice("running as \(user)", metadata: ["uid": "\(uid)", "gid": "\(gid)"])
                try Privileges.checkWritable(afterSwitchTo: user, config: state.current.config)
            case .already: break
            case .notRoot(let uid):
                logger.notice("user: \(user) ignored: not started as root, stays as it is", metadata: ["uid": "\(uid)"])
            }
        } catch {
            logger.critical("stopping: cannot run as \(user)", metadata: ["error": "\(error.message)"])
            fatal.withLock { $0 = error }
            Task { await shutdown() }
        }
    }

    /// Records a step of the start; READY=1 once both are done.
    private func startupStep(_ step: (inout (bound: Bool, checked: Bool)) -> Void) {
        let done = startup.withLock { progress -> Bool in
            let before = progress.bound && progress.checked
            step(&progress)
            return !before && progress.bound && progress.checked
        }
        if done, fatal.withLock({ $0 }) == nil { notifier?.ready(status: state.statusLine) }
    }

    /// Begins the graceful stop at once: stop accepting, finish what is in flight (SIGINT).
    package func shutdown() async {
        _ = state.beginStopping()
        await group.withLock { $0 }?.triggerGracefulShutdown()
    }

    /// What SIGTERM does: with `readiness.lame_duck`, the health checks (`/readyz`,
    /// `readiness.dns_name`) fail for that long while everything else is still answered, so a load
    /// balancer takes the daemon out of its pool before it stops accepting; then the graceful stop.
    /// A second call (another SIGTERM) stops at once.
    package func stop() async {
        let lameDuck = state.current.config.daemon.readiness.lameDuck
        guard state.beginStopping(), lameDuck > .zero else {
            notifier?.stopping(status: "stopping")
            await shutdown()
            return
        }
        state.metrics.ready.record(0)
        notifier?.stopping(status: "lame duck: failing health checks for \(lameDuck.components.seconds) s, then stopping")
        state.logger.notice("lame duck: failing health checks, then stopping", metadata: ["seconds": "\(lameDuck.components.seconds)"])
        Task {
            try? await Task.sleep(for: lameDuck)
            await shutdown()
        }
    }

    /// Serves until stopped, then drains, writes the cache and returns.
    package func run() async throws {
        let state = self.state
        let logger = state.logger
        let runtime = state.current
        let config = runtime.config
        let (host, port) = try Self.listenAddress(config.daemon.listen)

        let (maxConnections, maxTunnels) = Self.connectionLimits(config, logger: logger)
        let gateway = RequestGateway(state: state, exposition: exposition)
        let drainTimeout = Self.drainTimeout
        var http = HTTPListener(
            host: host, port: port, sslContext: try Self.tlsContext(config), handling: gateway,
            limits: { HTTPListener.Limits(state.current.config.daemon.limits, drainTimeout: drainTimeout) },
            maxConnections: maxConnections, drainTimeout: drainTimeout, logger: logger)
        let proxyProtocol = Self.proxyProtocol(config, metrics: state.metrics, logger: logger)
        http.proxyProtocol = proxyProtocol
        http.onBound = { [self] address in
            bound.withLock { $0.http = address }
            listening()
        }
        // A service that fails (a listener that cannot bind) shuts the others down the way SIGTERM
        // does, and the daemon exits with its error.
        func service(_ service: some Service) -> ServiceGroupConfiguration.ServiceConfiguration {
            .init(service: service, failureTerminationBehavior: .gracefullyShutdownGroup)
        }
        let readiness = ReadinessMonitor(state: state, notifier: notifier) { [self] in startupStep { $0.checked = true } }
        var services = [
            service(http), service(Watcher(state: state)), service(readiness), service(Reloader(state: state, notifier: notifier)),
        ]
        // SIGTERM is the lame-duck stop; the other signals (SIGINT) stop at once.
        if signals.contains(.sigterm) { services.append(service(StopSignal(daemon: self))) }
        // First in the list, so the group stops it last: the pings go on while the others drain.
        if let notifier, let interval = notifier.watchdogInterval {
            services.insert(service(WatchdogPinger(notifier: notifier, interval: interval, logger: logger)), at: 0)
        }
        if let dnsListen = config.daemon.dnsListen {
            let (dnsHost, dnsPort) = try Self.listenAddress(dnsListen, key: "dns_listen")
            var stub = DNSStub(
                answering: DNSService(state: state), host: dnsHost, port: dnsPort, maxConnections: maxConnections,
                lookups: state.lookups)
            stub.proxyProtocol = proxyProtocol
            stub.onBound = { [self] udp, tcp in
                bound.withLock {
                    $0.dnsUDP = udp
                    $0.dnsTCP = tcp
                }
                listening()
            }
            services.append(service(stub))
        }
        if let dotListen = config.daemon.dotListen, let dotContext = try Self.tlsContext(config, protocols: ["dot"]) {
            let (dotHost, dotPort) = try Self.listenAddress(dotListen, key: "dot_listen")
            let limits = config.daemon.limits
            var dot = DoTListener(
                answering: DNSService(state: state), host: dotHost, port: dotPort, sslContext: dotContext, maxConnections: maxConnections,
                handshakeTimeout: .milliseconds(Int64(limits.requestTimeout / .milliseconds(1))),
                lookups: state.lookups)
            dot.proxyProtocol = proxyProtocol
            dot.onBound = { [self] address in
                bound.withLock { $0.dot = address }
                listening()
            }
            services.append(service(dot))
        }
        if let proxyListen = config.daemon.proxyListen {
            let (proxyHost, proxyPort) = try Self.listenAddress(proxyListen, key: "proxy_listen")
            var proxy = ProxyListener(
                context: ProxyContext(state: state), host: proxyHost, port: proxyPort, maxConnections: maxTunnels, drainTimeout: Self.drainTimeout,
                logger: logger)
            proxy.onBound = { [self] address in
                bound.withLock { $0.proxy = address }
                listening()
            }
            services.append(service(proxy))
        }
        services.append(service(CachePersister(state: state)))
        var groupConfiguration = ServiceGroupConfiguration(
            services: services, gracefulShutdownSignals: signals.filter { $0 != .sigterm }, logger: logger)
        // The listeners bound their own drain (5 s, then every connection is closed); these limits
        // are the backstop, never reached in normal operation.
        groupConfiguration.maximumGracefulShutdownDuration = .seconds(15)
        groupConfiguration.maximumCancellationDuration = .seconds(5)
        let serviceGroup = ServiceGroup(configuration: groupConfiguration)
        group.withLock { $0 = serviceGroup }
        if let persist = config.lookup.persistPath {
            do { _ = try runtime.resolver.loadCache(from: persist) } catch {
                logger.warning("ignoring the cache file", metadata: ["error": "\(error.message)"])
            }
        }
        var failure: (any Error)?
        do { try await serviceGroup.run() } catch { failure = error }
        failure = fatal.withLock { $0 } ?? failure
        let final = state.current
        if let persist = final.config.lookup.persistPath {
            do { try final.resolver.saveCache(to: persist) } catch {
                logger.error("cache not saved", metadata: ["error": "\(error.message)"])
            }
        }
        final.shutdown()
        state.queryLog?.stop()
        if let failure {
            logger.error("stopped with an error", metadata: ["error": "\(failure)"])
            throw failure
        }
        logger.notice("stopped")
    }

    /// With `tls:`, the TLS context of the HTTPS listener, which offers HTTP/2 and HTTP/1.1 by ALPN
    /// (what DoH clients expect); nil for plain HTTP/1.1. Built while the config is read, so that a
    /// key that does not match the certificate is an error of the config, not of the listener.
    static func tlsContext(_ config: ConfigFile, protocols: [String] = ["h2", "http/1.1"]) throws(DNSError) -> NIOSSLContext? {
        guard let files = config.daemon.tls else { return nil }
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
        tls.applicationProtocols = protocols
        // After our close_notify, wait at most this long for the client's before closing the socket
        // (NIOSSL waits 5 s by default): the wait lets the client read the last answer before a
        // close turns into a reset, but a client that never answers held the descriptor, and the
        // shutdown drain, for 5 s. RFC 8446 §6.1 does not require waiting at all.
        tls.shutdownTimeout = Daemon.tlsShutdownTimeout
        do {
            return try NIOSSLContext(configuration: tls)
        } catch {
            throw DNSError(.invalidConfiguration, "tls: the certificate and key do not make a TLS context - is the key the certificate's? (\(error))")
        }
    }

    /// Descriptors one proxy tunnel may hold: the client, the upstream (two dial attempts at once
    /// during RFC 8305 fallback) and a pipe (two descriptors) per direction of the splice relay.
    static let descriptorsPerTunnel = 6

    /// The connections each listener may hold: `limits.max_connections` for HTTP and the DNS stub,
    /// `proxy.max_connections` tunnels for the proxy, all lowered alike when the descriptors the
    /// process may open could not hold them with room to spare (upstream connections, files): at
    /// the limit the listeners refuse connections at once instead of failing to accept them, and
    /// one listener cannot take the descriptors the others need.
    static func connectionLimits(_ config: ConfigFile, logger: Logger) -> (perListener: Int, proxyTunnels: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < 1 << 30 else {
            return (config.daemon.limits.maxConnections, config.daemon.proxy.maxConnections)
        }
        let limits = connectionLimits(config, descriptors: Int(limit.rlim_cur))
        if limits != (config.daemon.limits.maxConnections, config.daemon.proxy.maxConnections) {
            var metadata: Logger.Metadata = [
                "configured": "\(config.daemon.limits.maxConnections)", "used": "\(limits.perListener)", "nofile": "\(limit.rlim_cur)",
            ]
            if config.daemon.proxyListen != nil {
                metadata["proxy_configured"] = "\(config.daemon.proxy.maxConnections)"
                metadata["proxy_used"] = "\(limits.proxyTunnels)"
            }
            logger.warning("limits.max_connections lowered to fit the descriptor limit", metadata: metadata)
        }
        return limits
    }

    /// As above for a process that may open `descriptors`: 128 kept for upstreams and files, the
    /// rest shared by the listeners in proportion to what each could hold (at least 16 each).
    static func connectionLimits(_ config: ConfigFile, descriptors: Int) -> (perListener: Int, proxyTunnels: Int) {
        let perListener = config.daemon.limits.maxConnections
        let tunnels = config.daemon.proxy.maxConnections
        let listeners = config.daemon.dnsListen == nil ? 1 : 2
        let proxyCost = config.daemon.proxyListen == nil ? 0 : tunnels * descriptorsPerTunnel
        let available = max(64, descriptors - 128)
        let demand = perListener * listeners + proxyCost
        guard demand > available else { return (perListener, tunnels) }
        let lowered = max(16, perListener * available / demand)
        return (lowered, config.daemon.proxyListen == nil ? tunnels : max(16, tunnels * available / demand))
    }

    /// `IPv4:port` or `[IPv6]:port`.
    static func listenAddress(_ text: String, key: String = "listen") throws(DNSError) -> (String, Int) {
        // Port 0: any free port (`resolve proxy` puts its unused API there).
        if text.hasSuffix(":0"), let (address, _) = IPAddress.endpoint(String(text.dropLast(2)) + ":1") { return (address.description, 0) }
        guard let (address, port) = IPAddress.endpoint(text), let port else {
            throw DNSError(.invalidConfiguration, "\(key): '\(text)' is not IP:port")
        }
        return (address.description, port)
    }
}

extension Daemon {
    /// What the local data holds: records, and what each block or allow list gave (lines it could
    /// not read are counted, not fatal: public lists mix formats).
    /// `trusted_proxies`: the PROXY v2 policy of the stub, DoT and HTTP listeners, or nil. A refused
    /// header is counted (`httpdns_proxy_protocol_rejected_total`) and logged at most every 10 s.
    static func proxyProtocol(_ config: ConfigFile, metrics: DaemonMetrics, logger: Logger) -> ProxyProtocolPolicy? {
        let networks = config.daemon.trustedProxies
        guard !networks.isEmpty else { return nil }
        let lastWarning = Atomic<UInt64>(0)
        return ProxyProtocolPolicy(
            trusts: { peer in
                guard let ip = IPAddress(socketAddress: peer) else { return false }
                return networks.contains { $0.contains(ip) }
            },
            rejected: { reason in
                metrics.proxyHeaderRejected.increment()
                let now = DispatchTime.now().uptimeNanoseconds, last = lastWarning.load(ordering: .relaxed)
                guard last == 0 || now &- last >= 10_000_000_000,
                    lastWarning.compareExchange(expected: last, desired: now, ordering: .relaxed).exchanged
                else { return }
                logger.warning("a trusted proxy's connection or datagram was refused: \(reason)", source: DaemonLog.source)
            })
    }

    /// What `_dns.resolver.arpa` advertises (RFC 9462), or why nothing is though it could be.
    static func logDiscovery(_ discovery: Runtime.Discovery, logger: Logger) {
        if let problem = discovery.problem {
            logger.warning("\(problem)")
        } else if !discovery.records.isEmpty {
            let what = discovery.records.map { "\($0.alpn.contains("dot") ? "dot" : "doh") port \($0.port ?? 0)" }.joined(separator: ", ")
            logger.info("ddr: _dns.resolver.arpa designates \(what) as \(discovery.records[0].target)")
        }
    }

    static func logLocalData(_ config: ConfigFile, logger: Logger) {
        guard let zone = config.lookup.configuration.localZone else { return }
        logger.notice(
            "local data loaded",
            metadata: [
                "records": "\(zone.recordCount)", "blocked": "\(zone.blockedCount)", "allowed": "\(zone.allowedCount)",
                "list_bytes": "\(zone.listMemoryBytes)",
            ])
        for list in zone.lists {
            if list.count.skipped > 0 { logger.warning("\(list)") } else { logger.info("\(list)") }
        }
    }
}

extension IPAddress {
    /// The address of an IPv4 or IPv6 socket address; nil for a Unix socket.
    init?(socketAddress: SocketAddress) {
        switch socketAddress {
        case .v4(let v4): self.init(bytes: withUnsafeBytes(of: v4.address.sin_addr) { Array($0) })
        case .v6(let v6): self.init(bytes: withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        default: return nil
        }
    }
}
