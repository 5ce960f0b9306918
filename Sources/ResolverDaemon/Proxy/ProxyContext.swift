import DNSCore
import ForwardProxy
import ResolverConfig

/// The daemon as the forward proxy sees it: the configuration's `proxy:`, the trusted engine's
/// addresses, the watcher's advice and the proxy's metrics.
struct ProxyContext: ProxyResolving {
    let state: DaemonState

    var settings: ProxySettings { ProxySettings(state.current.config.daemon.proxy) }

    var headTimeout: Duration { state.current.config.daemon.limits.requestTimeout }

    func addressesWithoutWaiting(_ host: String) -> [IPAddress]? {
        state.current.resolver.resolveWithoutWaiting(host, type: .both)?.addresses.map(\.ip)
    }

    func addresses(_ host: String) async throws(DNSError) -> [IPAddress] {
        try await state.current.resolver.resolve(host, type: .both).addresses.map(\.ip)
    }

    func advice(for host: String) -> WatchAdvice { state.watchAdvice(for: host) }

    func count(_ event: ProxyEvent) {
        let metrics = state.metrics
        switch event {
        case .outcome(let outcome): metrics.proxyOutcome(outcome)
        case .bytes(let upstream, let count): metrics.proxyBytes(upstream: upstream, count)
        case .tunnels(let delta): metrics.proxyTunnelsOpen(delta)
        case .connectionsOpen(let count): metrics.proxyConnectionsOpen(count)
        }
    }
}

extension ProxySettings {
    /// The configuration file's `proxy:` as the proxy takes it.
    init(_ proxy: DaemonSettings.Proxy) {
        self.init()
        connectPorts = proxy.connectPorts
        allow = proxy.allow
        deny = proxy.deny
        allowPrivateDestinations = proxy.allowPrivateDestinations
        users = proxy.users
        maxConnections = proxy.maxConnections
        connectTimeout = proxy.connectTimeout
        idleTimeout = proxy.idleTimeout
        maxHeaderBytes = proxy.maxHeaderBytes
    }
}
