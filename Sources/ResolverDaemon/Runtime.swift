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

/// What one configuration builds: the resolver, the system side, the detector, the ranker and the
/// request policy. A reload builds a new one and swaps it in; requests in flight finish on the old.
final class Runtime: Sendable {
    let config: ConfigFile
    let resolver: HTTPDNSResolver
    let system: SystemResolver
    let detector: HijackDetector
    let ranker: AddressRanker
    let policy: RequestPolicy
    /// The SVCB records `_dns.resolver.arpa` is answered with (RFC 9462): this daemon's DoH and DoT
    /// listeners, or none (``Discovery``).
    let discovery: Discovery
    /// The configuration the daemon started with: its listeners, certificate and the other keys
    /// that take effect only at a restart (a reload keeps them, and compares with them).
    let listenerConfig: ConfigFile
    private let forwarders: [SystemResolver]

    /// `logger` gets the engine's upstream events (circuit opened/closed, failures); the engine's
    /// metrics go to `metrics`.
    /// `listeners` is the configuration the listeners were bound with (a reload changes neither
    /// them nor their certificate): what DDR advertises. Default `config`.
    convenience init(_ config: ConfigFile, metrics: any MetricsFactory, logger: Logger, listeners: ConfigFile? = nil) throws(DNSError) {
        let system = try SystemResolver(servers: config.lookup.systemDNS)
        let forwarders = Mutex<[SystemResolver]>([])
        var options = config.lookup.options
        // An open circuit's health probe asks what readiness asks (`readiness.probe`, …, the root's NS).
        let probe = config.readinessProbe
        options.healthCheckName = probe.name.description
        options.healthCheckType = probe.type
        // A forwarder never sends resolver.arpa on (RFC 9462 §6.1): not from the HTTP API, a local
        // CNAME into it, a watched host or the proxy either.
        options.keepsResolverArpa = true
        let resolver = try HTTPDNSResolver(
            configuration: config.lookup.configuration, options: options,
            fallback: config.lookup.options.fallback == .system ? system : nil, metrics: metrics, logger: logger,
            plainDNS: { server throws(DNSError) in
                let resolver = try SystemResolver(servers: [server])
                forwarders.withLock { $0.append(resolver) }
                return resolver
            })
        if let shared = config.daemon.sharedCache {
            resolver.engine.attachSharedCache(Self.redisCache(shared, metrics: metrics, logger: logger))
        }
        self.init(config, resolver: resolver, system: system, forwarders: forwarders.withLock { $0 }, listeners: listeners)
    }

    /// The `cache.shared` Redis cache (the config checked that the address is loopback or a socket).
    static func redisCache(_ settings: DaemonSettings.SharedCacheSettings, metrics: any MetricsFactory, logger: Logger) -> RedisSharedCache {
        let endpoint: RedisSharedCache.Endpoint =
            if settings.redis.hasPrefix("/") {
                .unix(path: settings.redis)
            } else if let (address, port) = IPAddress.endpoint(settings.redis), let port {
                .tcp(host: address.description, port: port)
            } else {
                .unix(path: settings.redis)
            }
        return RedisSharedCache(
            endpoint: endpoint, password: settings.password, key: SymmetricKey(data: settings.key), prefix: settings.prefix,
            timeout: settings.timeout, metrics: metrics, logger: logger)
    }

    /// A runtime around a resolver built elsewhere (tests give one with scripted upstreams).
    /// `forwarders` are the plain-DNS upstreams of its forward zones, stopped with it.
    init(_ config: ConfigFile, resolver: HTTPDNSResolver, system: SystemResolver, forwarders: [SystemResolver] = [], listeners: ConfigFile? = nil) {
        self.forwarders = forwarders
        self.config = config
        self.system = system
        self.resolver = resolver
        let probeTimeout = min(config.lookup.options.timeout, .seconds(3))
        let caFile = config.lookup.configuration.caFile
        detector = HijackDetector(
            trusted: TrustedAnswers(resolver),
            system: PlainDNSAnswers(system, timeout: probeTimeout, validator: config.lookup.configuration.dnssec.policy == .off ? nil : resolver),
            prober: ConnectionProber(mode: .tls, timeout: probeTimeout, caFile: caFile))
        ranker = AddressRanker(
            resolver: resolver, prober: ConnectionProber(mode: .tls, timeout: probeTimeout, caFile: caFile),
            memory: .seconds(10))
        policy = RequestPolicy(config)
        listenerConfig = listeners ?? config
        discovery = Discovery(config, listeners: listeners ?? config)
    }

    func shutdown() {
        system.shutdown()
        for forwarder in forwarders { forwarder.shutdown() }
    }

    /// What `_dns.resolver.arpa` is answered with (`ddr:`, RFC 9462): SVCB records for the HTTPS
    /// listener (DoH) when it has `tls:` and `/dns-query` needs no token, and for the DoT listener;
    /// their target is `ddr.name`, else the certificate's first DNS name. No records — NODATA —
    /// with `ddr: off`, without an encrypted listener, or without a name; ``problem`` says which.
    struct Discovery: Sendable {
        var records: [ServiceBinding] = []
        var ttl: UInt32
        /// Why nothing is advertised though DDR is on and a listener is encrypted, for the log.
        var problem: String?

        /// `config`'s `ddr:` and `/dns-query` protection over the listeners and certificate of
        /// `listeners` (those bound at start: F62-5, a reload does not move them).
        init(_ config: ConfigFile, listeners: ConfigFile? = nil) {
            let settings = config.daemon.ddr
            ttl = settings.ttl
            let bound = (listeners ?? config).daemon
            guard settings.enabled, let tls = bound.tls else { return }
            let doh = config.daemon.protectDNSQuery && config.daemon.authToken != nil ? nil : Self.listener(bound.listen)
            let dot = bound.dotListen.flatMap(Self.listener)
            guard doh != nil || dot != nil else {
                problem = "ddr: /dns-query needs the auth token and there is no dot_listen: nothing to advertise"
                return
            }
            guard let name = settings.name ?? Self.certificateName(tls.certificate) else {
                problem = "ddr: \(tls.certificate) names no DNS name (only addresses): set ddr.name to the name clients verify it for"
                return
            }
            records = ResolverDiscovery.advertisement(name: name, doh: doh, dot: dot)
        }

        /// A listener's port, and its address unless it is a wildcard.
        static func listener(_ text: String) -> ResolverDiscovery.Listener? {
            guard let (address, port) = IPAddress.endpoint(text), let port, let port16 = UInt16(exactly: port) else { return nil }
            let wildcard = address.bytes.allSatisfy { $0 == 0 }
            return ResolverDiscovery.Listener(port: port16, address: wildcard ? nil : address)
        }

        /// The first DNS name among the subject alternative names of the chain's first certificate.
        /// A file that cannot be read (a reload after `user:` dropped the privileges that read it,
        /// as the TLS context is kept then) gives the name read from it last.
        static func certificateName(_ file: String) -> DomainName? {
            guard let leaf = try? NIOSSLCertificate.fromPEMFile(file).first else {
                return namesRead.withLock { $0[file] }
            }
            for name in leaf._subjectAlternativeNames() where name.nameType == .dnsName {
                let text = name.contents.withUnsafeBufferPointer { String(decoding: $0, as: UTF8.self) }
                // A wildcard names no one host a client could be sent to.
                if !text.hasPrefix("*"), IPAddress(text) == nil, let domain = try? DomainName(text) {
                    namesRead.withLock { $0[file] = domain }
                    return domain
                }
            }
            return nil
        }

        private static let namesRead = Mutex<[String: DomainName]>([:])
    }

    /// The question that keeps readiness true while answers come from the cache (`readiness.probe`).
    var readinessProbe: DNSMessage.Question { config.readinessProbe }
}
