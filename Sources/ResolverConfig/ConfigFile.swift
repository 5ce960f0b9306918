import DNSCore
import DNSSEC
import Foundation
import HTTPDNS
import Yams

/// The YAML configuration file shared by `resolve --config` and `resolve daemon` (ARCHITECTURE.md).
///
/// Every key is checked: an unknown key, a wrong type or an unusable value is an error that names
/// the file, the line and the key (`config.yaml:7: cache.min_ttl: expected seconds, got 'abc'`).
/// Relative paths are resolved against the file's directory.
///
/// ```yaml
/// upstreams:
///   - doh: https://dns.example/dns-query
///     bootstrap: [192.0.2.53, "2001:db8::53"]
/// fallback: none
/// cache: {min_ttl: 60, max_ttl: 86400}
/// ```
package struct ConfigFile: Sendable {
    /// What every command reads: the trusted upstreams, the resolver's options, the plain-DNS side
    /// and the cache file.
    package var lookup: LookupSettings
    /// What only `resolve daemon` reads: its listeners, watched hosts, limits and readiness.
    package var daemon = DaemonSettings()

    /// Settings made in code rather than read from a file (`resolve proxy` from its flags).
    package init(lookup: LookupSettings, daemon: DaemonSettings = DaemonSettings()) {
        self.lookup = lookup
        self.daemon = daemon
    }

    /// Reads and validates `path`.
    /// - Throws: ``DNSError`` with ``DNSError/Code/invalidConfiguration`` naming the line and key.
    package static func load(_ path: String) throws(DNSError) -> ConfigFile {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw DNSError(.invalidConfiguration, "cannot read config file '\(path)'")
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return try parse(text, file: path, directory: directory)
    }

    /// Parses configuration text; `file` names it in errors, `directory` anchors relative paths.
    package static func parse(_ text: String, file: String = "config", directory: String = ".") throws(DNSError) -> ConfigFile {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch let error as YamlError {
            throw DNSError(.invalidConfiguration, "\(file): not valid YAML: \(Self.describe(error))")
        } catch {
            throw DNSError(.invalidConfiguration, "\(file): not valid YAML")
        }
        var reader = Reader(file: file, directory: directory)
        guard let root else { throw DNSError(.invalidConfiguration, "\(file): the file is empty") }
        return try reader.read(root)
    }

    private static func describe(_ error: YamlError) -> String {
        switch error {
        case let .scanner(_, problem, mark, _), let .parser(_, problem, mark, _):
            return "line \(mark.line): \(problem)"
        default:
            return "\(error)"
        }
    }
}

/// The settings of a lookup, shared by every command: `upstreams`, `ca_file`, the resolver options
/// (`timeout`, `strategy`, `fallback`, `cache.*` TTLs, ...), `system_dns`, `preresolve` and `cache.persist`.
package struct LookupSettings: Sendable {
    package var configuration: HTTPDNSConfiguration
    package var options: HTTPDNSOptions
    /// Plain DNS servers (`IP[:port]`) for fallback and comparison; empty means /etc/resolv.conf.
    package var systemDNS: [String] = []
    /// Where the cache is persisted, if anywhere.
    package var persistPath: String?
    package init(configuration: HTTPDNSConfiguration, options: HTTPDNSOptions, systemDNS: [String] = [], persistPath: String? = nil) {
        self.configuration = configuration
        self.options = options
        self.systemDNS = systemDNS
        self.persistPath = persistPath
    }

    /// Names resolved at start-up (``HTTPDNSConfiguration/preresolve``).
    package var preresolve: [String] {
        get { configuration.preresolve }
        set { configuration.preresolve = newValue }
    }
}

/// The settings only `resolve daemon` reads: `listen`, `dns_listen`, `tls`, `watch`, `auth_token`,
/// `protect_dns_query`, `limits`, `readiness` and `cache.persist_interval`. A lookup command given
/// the same file ignores them.
package struct DaemonSettings: Sendable {
    /// A watched host of the daemon.
    package struct Watch: Sendable, Hashable {
        package var host: String
        package var port: Int
        package var interval: Duration
        /// Also compare the host's HTTPS records (RFC 9460) on both sides, as `resolve compare
        /// --https-records` does. Default false.
        package var httpsRecords = false
    }

    /// How often the daemon snapshots the cache to ``LookupSettings/persistPath``. Default 300 s;
    /// it is also written on shutdown.
    package var persistInterval: Duration = .seconds(300)
    /// The HTTP listener, `host:port`. Default `127.0.0.1:8053`.
    package var listen = "127.0.0.1:8053"
    /// The optional plain-DNS stub.
    package var dnsListen: String?
    /// The optional DNS-over-TLS listener (RFC 7858), with the `tls:` certificate.
    package var dotListen: String?
    package var watch: [Watch] = []
    /// HTTPS: a PEM certificate chain and its key. With it the listener speaks TLS with HTTP/2 and
    /// HTTP/1.1 offered by ALPN; without it, plain HTTP/1.1.
    package var tls: TLSFiles?
    /// When set, every daemon endpoint but `/healthz` (and `/dns-query` unless
    /// ``protectDNSQuery``) requires `Authorization: Bearer <token>`.
    package var authToken: String?
    package var protectDNSQuery = false
    package var limits = Limits()
    package var readiness = Readiness()
    /// The local HTTP(S) forward proxy's listener, `host:port`, or nil for none.
    package var proxyListen: String?
    /// The proxy's policy (`proxy:`).
    package var proxy = Proxy()
    /// The account the daemon switches to once its listeners are bound (`user:`, as unbound's
    /// `username:`), or nil to stay as started. Only a daemon started as root switches; one started
    /// as another user (systemd's `User=`) logs that it stays as it is.
    package var user: String?
    /// `cache.shared`: the Redis cache the members of a pool share, or nil.
    package var sharedCache: SharedCacheSettings?
    /// `query_log`: where every answered question is logged, or nil (off, the default).
    package var queryLog: QueryLog?
    /// `rate_limit`: questions per second per client network, or nil (no limit, the default).
    package var rateLimit: RateLimit?
    /// `ddr`: how `_dns.resolver.arpa` is answered (RFC 9462).
    package var ddr = DDR()
    /// `trusted_proxies`: the load balancers whose PROXY v2 headers name the client (required from
    /// them, never read from anyone else) on the stub, DoT and the HTTP listener. Empty: none.
    package var trustedProxies: [IPNetwork] = []

    /// `ddr`: the daemon answers `_dns.resolver.arpa` itself, never forwarding it, with SVCB
    /// records for its DoH and DoT listeners (`ddr: off`: with NODATA).
    package struct DDR: Sendable, Hashable {
        /// Advertise the encrypted listeners (default true).
        package var enabled = true
        /// The name their certificate is valid for, the records' target; nil: the certificate's
        /// first DNS name.
        package var name: DomainName?
        /// The records' TTL in seconds (default 300).
        package var ttl: UInt32 = 300
    }

    /// `rate_limit`: a token bucket per client network on the stub (UDP, TCP) and DoH.
    package struct RateLimit: Sendable, Hashable {
        package var queriesPerSecond: Double
        /// The bucket's size: questions a quiet client may send at once. Default twice the rate.
        package var burst: Double
        package var ipv4Prefix = 24
        package var ipv6Prefix = 56
        /// What a client past its limit gets: `refused` (REFUSED, as small as the query) or `drop`
        /// (nothing over UDP and TCP; HTTP 429 over DoH).
        package var action = Action.refused
        /// Over UDP, every `slip`-th limited query gets a truncated reply (TC=1) instead of the
        /// `action`, so that a real client whose address a spoofed flood borrows goes on over TCP
        /// (BIND's response-rate-limiting `slip`). 0: never. Default 2 with `action: refused`, 0 with
        /// `drop` (which sends nothing unless `slip` is set).
        package var slip = 2

        package enum Action: String, Sendable, Hashable, CaseIterable {
            case refused, drop
        }

        package init(queriesPerSecond: Double, burst: Double? = nil) {
            self.queriesPerSecond = queriesPerSecond
            self.burst = burst ?? queriesPerSecond * 2
        }
    }

    /// `query_log`: JSON Lines, rotated by size, written off the serving path.
    package struct QueryLog: Sendable, Hashable {
        package var path: String
        /// The size at which the file is rotated. Default 100 MB.
        package var maxBytes = 100_000_000
        /// Rotated files kept (`path.1` … `path.N`). Default 5.
        package var keep = 5
        /// Client addresses are logged with only this many leading bits (nil: whole). E.g. 24, 48.
        package var anonymizeIPv4: Int?
        package var anonymizeIPv6: Int?
        /// Entries waiting for the writer; past it, entries are dropped and counted. Default 10,000.
        package var bufferEntries = 10_000

        package init(path: String) { self.path = path }
    }

    package init() {}

    /// `cache.shared`: where Redis is and the secrets to use it. The secrets come from files (never
    /// from the command line) and are never printed.
    package struct SharedCacheSettings: Sendable, Hashable, CustomStringConvertible {
        /// A loopback `IP:port` or a Unix socket path.
        package var redis: String
        /// The HMAC key the members share (the file's bytes, at least 32).
        package var key: [UInt8]
        /// Redis's `AUTH` password, or nil.
        package var password: String?
        package var timeout: Duration = .milliseconds(50)
        package var prefix = "httpdns:"

        package var description: String { "redis \(redis), prefix \(prefix), timeout \(timeout) (key and password not shown)" }
    }

    /// The forward proxy's policy: which targets, who may use it, what a connection may cost.
    package struct Proxy: Sendable, Hashable {
        /// Ports CONNECT may reach. Default 443 only: not an open relay. Plain `http://` requests
        /// may go to these and 80.
        package var connectPorts: [Int] = [443]
        /// Host patterns (`example.com` = the name and names under it, `*.example.com` = names
        /// under it only); empty = every host the deny list lets through.
        package var allow: [String] = []
        package var deny: [String] = []
        /// Whether private, loopback and link-local destinations may be reached (no SSRF into the
        /// host's network by default).
        package var allowPrivateDestinations = false
        /// `user:password` lines (Proxy-Authorization: Basic), or nil for no authentication.
        package var users: [String: String]?
        package var maxConnections = 1_024
        package var connectTimeout: Duration = .seconds(10)
        package var idleTimeout: Duration = .seconds(300)
        package var maxHeaderBytes = 16_384
        package init() {}
    }

    /// Paths of the daemon's certificate chain and private key (PEM).
    package struct TLSFiles: Sendable, Hashable {
        package var certificate: String
        package var key: String
    }

    /// What one request to the daemon may cost.
    package struct Limits: Sendable, Hashable {
        /// The largest request body (a DoH POST); larger gets 413. At most 65,535 (RFC 8484 §6).
        package var maxBodyBytes = 65_535
        /// The longest request target (path and query); longer gets 414. A GET carries a 65,535-byte
        /// message base64url-encoded in 87,384 characters, so the default admits the largest
        /// ordinary queries (a few hundred bytes) with room and still bounds what a client can send.
        package var maxURLLength = 8_192
        /// Requests handled at once; more get 503 with `Retry-After: 1` at once rather than queueing.
        package var maxConcurrentRequests = 1_024
        /// Connections open at once on each listener (HTTP, and the DNS stub's TCP); more are closed
        /// as soon as they are accepted.
        package var maxConnections = 1_024
        /// How long a connection may take to finish its TLS handshake and send a complete request
        /// head, and a request to deliver its whole body. Default 10 s.
        package var requestTimeout: Duration = .seconds(10)
        /// How long a connection may stay open with no request in progress. Default 120 s.
        package var idleTimeout: Duration = .seconds(120)
        package init() {}
    }

    /// How the daemon keeps `/readyz` true to its upstreams while it answers from the cache.
    package struct Readiness: Sendable, Hashable {
        /// The name sent to an upstream that has had no exchange for an interval (type A), or nil:
        /// the first watched host, else the first pre-resolved name, else the root's NS.
        package var probe: String?
        /// How often idle upstreams are probed. Default 10 s; an upstream counts as reachable for
        /// three intervals after it last responded.
        package var interval: Duration = .seconds(10)
        /// A name the DNS stub and `/dns-query` answer themselves with what `/readyz` says: NOERROR
        /// with no records while ready, SERVFAIL while not or while stopping — the health check of a
        /// load balancer in front (dnsdist's `checkName`). Nil: no such name.
        package var dnsName: DomainName?
        /// How long SIGTERM fails the health checks (`/readyz`, ``dnsName``) while every other request
        /// is still answered, before the daemon stops accepting: the time a load balancer needs to
        /// see the member leave. Default 0: stop at once.
        package var lameDuck: Duration = .zero
        package init() {}
    }
}

/// Walks the YAML tree, keeping the key path for error messages.
private struct Reader {
    let file: String
    let directory: String

    func fail(_ node: Node?, _ key: String, _ problem: String) -> DNSError {
        let line = node?.mark.map { ":\($0.line)" } ?? ""
        return DNSError(.invalidConfiguration, "\(file)\(line): \(key): \(problem)")
    }

    func mapping(_ node: Node, _ key: String, allowed: Set<String>) throws(DNSError) -> [(String, Node, Node)] {
        guard case let .mapping(mapping) = node else { throw fail(node, key, "expected a mapping") }
        var entries: [(String, Node, Node)] = []
        for (name, value) in mapping {
            guard let text = name.string else { throw fail(name, key, "keys must be strings") }
            let path = key.isEmpty ? text : "\(key).\(text)"
            guard allowed.contains(text) else {
                throw fail(name, path, "unknown key (known: \(allowed.sorted().joined(separator: ", ")))")
            }
            entries.append((text, name, value))
        }
        return entries
    }

    func string(_ node: Node, _ key: String) throws(DNSError) -> String {
        guard case let .scalar(scalar) = node, !scalar.string.isEmpty else { throw fail(node, key, "expected a string") }
        return scalar.string
    }

    func bool(_ node: Node, _ key: String) throws(DNSError) -> Bool {
        guard case .scalar = node, let value = node.bool else { throw fail(node, key, "expected true or false") }
        return value
    }

    func seconds(_ node: Node, _ key: String, allowZero: Bool = true) throws(DNSError) -> Duration {
        guard case .scalar = node, let value = node.float, value.isFinite, value >= 0, allowZero || value > 0,
            value <= 365 * 86_400
        else { throw fail(node, key, "expected a number of seconds, got '\(node.string ?? "?")'") }
        return .milliseconds(Int64(value * 1000))
    }

    func integer(_ node: Node, _ key: String, _ range: ClosedRange<Int>) throws(DNSError) -> Int {
        guard case .scalar = node, let value = node.int, range.contains(value) else {
            throw fail(node, key, "expected a whole number in \(range.lowerBound)...\(range.upperBound), got '\(node.string ?? "?")'")
        }
        return value
    }

    func strings(_ node: Node, _ key: String) throws(DNSError) -> [String] {
        switch node {
        case .scalar: return [try string(node, key)]
        case let .sequence(sequence):
            var result: [String] = []
            for (index, item) in sequence.enumerated() { result.append(try string(item, "\(key)[\(index)]")) }
            return result
        default: throw fail(node, key, "expected a list of strings")
        }
    }

    func path(_ node: Node, _ key: String) throws(DNSError) -> String {
        let value = try string(node, key)
        return value.hasPrefix("/") ? value : directory + "/" + value
    }

    func enumeration<T: RawRepresentable & CaseIterable>(_ node: Node, _ key: String, _: T.Type) throws(DNSError) -> T
    where T.RawValue == String {
        let value = try string(node, key)
        guard let result = T(rawValue: value.lowercased()) else {
            throw fail(node, key, "expected one of \(T.allCases.map(\.rawValue).joined(separator: ", ")), got '\(value)'")
        }
        return result
    }

    mutating func read(_ root: Node) throws(DNSError) -> ConfigFile {
        var upstreams: [UpstreamEndpoint] = []
        var options = HTTPDNSOptions()
        var config = ConfigFile(lookup: LookupSettings(configuration: HTTPDNSConfiguration(upstreams: []), options: options))
        var caFile: String?
        let keys: Set<String> = [
            "upstreams", "ca_file", "allow_private", "fallback", "system_dns", "cache", "listen",
            "dns_listen", "watch", "timeout", "strategy", "hedging", "prefer_ipv6", "preresolve", "tls",
            "auth_token", "protect_dns_query", "limits", "readiness", "proxy_listen", "proxy",
            "dnssec", "trust_anchors", "negative_trust_anchors", "user", "records", "hosts_files", "block", "local_ttl", "forward", "query_log",
            "rate_limit", "dot_listen", "ddr", "trusted_proxies",
        ]
        var dnssec = DNSSECSettings()
        var local = LocalZone.Builder()
        var localNodes: [(key: String, value: Node)] = []
        var hasLocalData = false
        var forwardZones: [ForwardZone] = []
        for (key, name, value) in try mapping(root, "", allowed: keys) {
            switch key {
            case "upstreams":
                guard case let .sequence(list) = value, !list.isEmpty else { throw fail(value, key, "expected a non-empty list") }
                for (index, item) in list.enumerated() { upstreams.append(try upstream(item, "upstreams[\(index)]")) }
            case "ca_file":
                let file = try path(value, key)
                guard FileManager.default.isReadableFile(atPath: file) else { throw fail(value, key, "cannot read '\(file)'") }
                caFile = file
            case "allow_private": options.allowPrivate = try bool(value, key)
            case "fallback": options.fallback = try enumeration(value, key, ResolverOptions.Fallback.self)
            case "system_dns":
                config.lookup.systemDNS = try strings(value, key)
                for server in config.lookup.systemDNS where !Self.isServer(server) {
                    throw fail(value, key, "'\(server)' is not IP or IP:port")
                }
            case "cache": try cache(value, into: &options, config: &config)
            case "listen": config.daemon.listen = try endpoint(value, key)
            case "dns_listen": config.daemon.dnsListen = try endpoint(value, key)
            case "dot_listen": config.daemon.dotListen = try endpoint(value, key, defaultPort: 853)
            case "watch":
                // `watch:` with nothing after it: no watched hosts.
                if case let .scalar(scalar) = value, ["", "~", "null"].contains(scalar.string) { continue }
                guard case let .sequence(list) = value else { throw fail(value, key, "expected a list") }
                for (index, item) in list.enumerated() { config.daemon.watch.append(try watch(item, "watch[\(index)]")) }
            case "tls": config.daemon.tls = try tls(value)
            case "auth_token":
                let token = try string(value, key)
                guard token.utf8.count >= 16, token.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
                    throw fail(value, key, "expected at least 16 printable characters without spaces")
                }
                config.daemon.authToken = token
            case "protect_dns_query": config.daemon.protectDNSQuery = try bool(value, key)
            case "limits": config.daemon.limits = try limits(value)
            case "readiness": config.daemon.readiness = try readiness(value)
            case "proxy_listen": config.daemon.proxyListen = try endpoint(value, key)
            case "proxy": config.daemon.proxy = try proxy(value)
            case "user":
                let user = try string(value, key)
                guard getpwnam(user) != nil else { throw fail(value, key, "no user '\(user)' on this system") }
                config.daemon.user = user
            case "timeout": options.timeout = try seconds(value, key, allowZero: false)
            case "strategy": options.strategy = try enumeration(value, key, UpstreamStrategy.self)
            case "hedging": options.hedging = try bool(value, key)
            case "prefer_ipv6": options.preferIPv6 = try bool(value, key)
            case "preresolve":
                config.lookup.preresolve = try strings(value, key)
                for host in config.lookup.preresolve {
                    let name: DomainName
                    do { name = try DomainName(host) } catch { throw fail(value, key, error.message) }
                    if ResolverDiscovery.isSpecialUse(name) { throw fail(value, key, "\(name) is under resolver.arpa, which is never looked up") }
                }
            case "dnssec": dnssec.policy = try enumeration(value, key, DNSSECPolicy.self)
            case "trust_anchors":
                let file = try path(value, key)
                let text: String
                do { text = try String(contentsOfFile: file, encoding: .utf8) } catch { throw fail(value, key, "cannot read '\(file)'") }
                do { dnssec.anchors = try TrustAnchors(presentation: text) } catch { throw fail(value, key, "\(file): \(error)") }
            case "query_log": config.daemon.queryLog = try queryLog(value)
            case "rate_limit": config.daemon.rateLimit = try rateLimit(value)
            case "ddr": config.daemon.ddr = try ddr(value)
            case "trusted_proxies":
                for text in try strings(value, key) {
                    guard let network = IPNetwork(text) else {
                        throw fail(value, key, "'\(text)' is not an address or a network (10.0.0.0/8, 2001:db8::/32)")
                    }
                    // Every address trusted: every client could name any address, and one that sends
                    // no header would be refused (F63-6).
                    guard network.prefix > 0 else { throw fail(value, key, "'\(text)' trusts every address; name the load balancers") }
                    config.daemon.trustedProxies.append(network)
                }
            case "forward":
                guard case let .sequence(list) = value, !list.isEmpty else { throw fail(value, key, "expected a list of {zones, upstreams}") }
                for (index, item) in list.enumerated() { forwardZones.append(try forwardZone(item, "forward[\(index)]")) }
            case "local_ttl":
                local.defaultTTL = UInt32(try integer(value, key, 0...Int(Int32.max)))
            case "records", "hosts_files", "block":
                // Read after local_ttl, wherever it stands in the file.
                localNodes.append((key, value))
                hasLocalData = true
            case "negative_trust_anchors":
                for zone in try strings(value, key) {
                    do { dnssec.negativeAnchors.append(try DomainName(zone)) } catch { throw fail(value, key, error.message) }
                }
            default: throw fail(name, key, "unknown key")
            }
        }
        guard !upstreams.isEmpty else { throw fail(root, "upstreams", "at least one trusted upstream is required") }
        if config.daemon.dotListen != nil, config.daemon.tls == nil {
            throw fail(root, "dot_listen", "needs tls: (the certificate DNS over TLS is served with)")
        }
        if config.daemon.ddr.name != nil, config.daemon.tls == nil {
            throw fail(root, "ddr", "name: is the certificate's name for the encrypted listeners, which need tls:")
        }
        for (key, value) in localNodes {
            switch key {
            case "records": try records(value, into: &local)
            case "hosts_files":
                for (index, file) in try paths(value, key).enumerated() {
                    let text: String
                    do { text = try String(contentsOfFile: file, encoding: .utf8) } catch {
                        throw fail(value, "\(key)[\(index)]", "cannot read '\(file)'")
                    }
                    do { try local.addHosts(text, source: file) } catch { throw fail(value, "\(key)[\(index)]", error.message) }
                }
            default: try block(value, into: &local)
            }
        }
        let localZone: LocalZone?
        do { localZone = hasLocalData ? try local.build() : nil } catch { throw fail(root, "records", error.message) }
        config.lookup.configuration = HTTPDNSConfiguration(
            upstreams: upstreams, caFile: caFile, preresolve: config.lookup.preresolve, dnssec: dnssec, localZone: localZone,
            forwardZones: forwardZones)
        config.lookup.options = options
        do { try config.lookup.configuration.validate() } catch { throw fail(root, "upstreams", error.message) }
        return config
    }

    /// `rate_limit:` — `queries_per_second`, `burst`, `ipv4_prefix`, `ipv6_prefix`, `action`, `slip`.
    func rateLimit(_ node: Node) throws(DNSError) -> DaemonSettings.RateLimit {
        var rate: Double?, burst: Double?, v4 = 24, v6 = 56, action = DaemonSettings.RateLimit.Action.refused, slip: Int?
        let keys: Set<String> = ["queries_per_second", "burst", "ipv4_prefix", "ipv6_prefix", "action", "slip"]
        for (name, _, value) in try mapping(node, "rate_limit", allowed: keys) {
            let path = "rate_limit.\(name)"
            switch name {
            case "queries_per_second", "burst":
                guard case .scalar = value, let number = value.float, number.isFinite, number >= 1, number <= 10_000_000 else {
                    throw fail(value, path, "expected a number from 1 to 10000000, got '\(value.string ?? "?")'")
                }
                if name == "burst" { burst = number } else { rate = number }
            case "ipv4_prefix": v4 = try integer(value, path, 0...32)
            case "ipv6_prefix": v6 = try integer(value, path, 0...64)
            case "action": action = try enumeration(value, path, DaemonSettings.RateLimit.Action.self)
            case "slip": slip = try integer(value, path, 0...10)
            default: break
            }
        }
        guard let rate else { throw fail(node, "rate_limit", "needs queries_per_second") }
        var limit = DaemonSettings.RateLimit(queriesPerSecond: rate, burst: burst)
        limit.ipv4Prefix = v4
        limit.ipv6Prefix = v6
        limit.action = action
        // `drop` has always meant nothing over UDP: no slip unless asked for.
        limit.slip = slip ?? (action == .drop ? 0 : 2)
        return limit
    }

    /// `query_log:` — `file`, `max_bytes`, `keep`, `anonymize: {ipv4_prefix, ipv6_prefix}`, `buffer`.
    func queryLog(_ node: Node) throws(DNSError) -> DaemonSettings.QueryLog {
        var file: String?
        var log = DaemonSettings.QueryLog(path: "")
        for (name, _, value) in try mapping(node, "query_log", allowed: ["file", "max_bytes", "keep", "anonymize", "buffer"]) {
            let path = "query_log.\(name)"
            switch name {
            case "file": file = try self.path(value, path)
            case "max_bytes": log.maxBytes = try integer(value, path, 4_096...1 << 40)
            case "keep": log.keep = try integer(value, path, 0...100)
            case "buffer": log.bufferEntries = try integer(value, path, 1...10_000_000)
            default:
                for (key, _, prefix) in try mapping(value, path, allowed: ["ipv4_prefix", "ipv6_prefix"]) {
                    if key == "ipv4_prefix" {
                        log.anonymizeIPv4 = try integer(prefix, "\(path).\(key)", 0...32)
                    } else {
                        log.anonymizeIPv6 = try integer(prefix, "\(path).\(key)", 0...128)
                    }
                }
            }
        }
        guard let file else { throw fail(node, "query_log", "needs file") }
        log.path = file
        return log
    }

    /// One `forward:` entry: `zones` and `upstreams` (`dns: IP[:port]` for plain DNS, or a DoH or
    /// JSON upstream as in `upstreams:`).
    func forwardZone(_ node: Node, _ key: String) throws(DNSError) -> ForwardZone {
        var zone = ForwardZone(zones: [])
        for (name, _, value) in try mapping(node, key, allowed: ["zones", "upstreams"]) {
            let path = "\(key).\(name)"
            switch name {
            case "zones":
                for text in try strings(value, path) {
                    do { zone.zones.append(try DomainName(text)) } catch { throw fail(value, path, error.message) }
                }
            default:
                guard case let .sequence(list) = value, !list.isEmpty else { throw fail(value, path, "expected a non-empty list") }
                for (index, item) in list.enumerated() {
                    let itemPath = "\(path)[\(index)]"
                    if case let .mapping(mapping) = item, mapping.count == 1, let stampNode = mapping["stamp"],
                        let stamp = try? DNSStamp(try string(stampNode, "\(itemPath).stamp")), stamp.kind == .plain, let address = stamp.address
                    {
                        zone.plainDNS.append(address.family == .ipv6 ? "[\(address)]:\(stamp.port)" : "\(address):\(stamp.port)")
                    } else if case let .mapping(mapping) = item, mapping.count == 1, let (dnsKey, server) = mapping.first, dnsKey.string == "dns" {
                        let text = try string(server, "\(itemPath).dns")
                        guard Self.isServer(text) else { throw fail(server, "\(itemPath).dns", "expected IP or IP:port, got '\(text)'") }
                        zone.plainDNS.append(text)
                    } else {
                        zone.upstreams.append(try upstream(item, itemPath))
                    }
                }
            }
        }
        guard !zone.zones.isEmpty else { throw fail(node, key, "needs zones") }
        guard !zone.upstreams.isEmpty || !zone.plainDNS.isEmpty else { throw fail(node, key, "needs upstreams") }
        return zone
    }

    /// `records:`: a list of `NAME [TTL] [IN] TYPE DATA` lines.
    func records(_ node: Node, into local: inout LocalZone.Builder) throws(DNSError) {
        guard case let .sequence(list) = node else { throw fail(node, "records", "expected a list of 'NAME [TTL] [IN] TYPE DATA' lines") }
        for (index, item) in list.enumerated() {
            let line = try string(item, "records[\(index)]")
            // resolver.arpa is the daemon's own (RFC 9462): a record there would never be served.
            if let owner = line.split(separator: " ", maxSplits: 1).first, let name = try? DomainName(String(owner)),
                ResolverDiscovery.isSpecialUse(name)
            {
                throw fail(item, "records[\(index)]", "\(name) is under resolver.arpa, which the daemon answers itself (ddr:)")
            }
            do { try local.addRecord(line) } catch { throw fail(item, "records[\(index)]", error.message) }
        }
    }

    /// `block:` — `lists` (files), `allow` (names), `allow_lists` (files), `answer`, `ttl`.
    func block(_ node: Node, into local: inout LocalZone.Builder) throws(DNSError) {
        var lists: [(String, Node)] = [], allowLists: [(String, Node)] = [], allow: [String] = []
        for (name, _, value) in try mapping(node, "block", allowed: ["lists", "allow", "allow_lists", "answer", "ttl"]) {
            let path = "block.\(name)"
            switch name {
            case "lists": lists = try paths(value, path).map { ($0, value) }
            case "allow_lists": allowLists = try paths(value, path).map { ($0, value) }
            case "allow":
                allow = try strings(value, path)
                for entry in allow {
                    let bare = entry.hasPrefix("*.") ? String(entry.dropFirst(2)) : entry
                    do { _ = try DomainName(bare) } catch { throw fail(value, path, error.message) }
                }
            case "answer": local.blockAnswer = try enumeration(value, path, LocalZone.BlockAnswer.self)
            case "ttl": local.blockTTL = UInt32(try integer(value, path, 0...86_400))
            default: break
            }
        }
        guard !lists.isEmpty else { throw fail(node, "block", "needs lists (files of names to block)") }
        for (file, value) in lists + allowLists {
            guard let data = FileManager.default.contents(atPath: file) else { throw fail(value, "block", "cannot read '\(file)'") }
            if lists.contains(where: { $0.0 == file }) {
                local.addBlockList(Array(data), source: file)
            } else {
                local.addAllowList(Array(data), source: file)
            }
        }
        if !allow.isEmpty { local.addAllowList(Array(allow.joined(separator: "\n").utf8), source: "block.allow") }
    }

    /// A path or a list of paths, each resolved against the file's directory.
    func paths(_ node: Node, _ key: String) throws(DNSError) -> [String] {
        try strings(node, key).map { $0.hasPrefix("/") ? $0 : directory + "/" + $0 }
    }

    func upstream(_ node: Node, _ key: String) throws(DNSError) -> UpstreamEndpoint {
        if case let .mapping(mapping) = node, mapping.count == 1, let (name, value) = mapping.first,
            let vendor = name.string, Self.vendors.contains(vendor)
        {
            return try vendorUpstream(vendor, value, "\(key).\(vendor)")
        }
        if case let .mapping(mapping) = node, let stampNode = mapping["stamp"] {
            guard mapping.count == 1 else { throw fail(node, key, "a stamp: stands alone (it holds the address, host and path)") }
            do { return try UpstreamEndpoint(stamp: try DNSStamp(try string(stampNode, "\(key).stamp"))) } catch {
                throw fail(stampNode, "\(key).stamp", error.message)
            }
        }
        var url: String?, kind: UpstreamEndpoint.Kind?, bootstrap: [IPAddress] = [], pin: String?, tlsName: String?
        var method = UpstreamEndpoint.DoHMethod.get
        for (name, nameNode, value) in try mapping(node, key, allowed: ["doh", "json", "dot", "bootstrap", "pin", "method", "tls_name", "stamp"]) {
            let path = "\(key).\(name)"
            switch name {
            case "doh", "json", "dot":
                guard url == nil else { throw fail(nameNode, path, "give one of doh, json or dot") }
                url = try string(value, path)
                kind = name == "doh" ? .doh(.get) : name == "dot" ? .dot : .json
            case "tls_name":
                tlsName = try string(value, path)
            case "bootstrap":
                for text in try strings(value, path) {
                    guard let ip = IPAddress(text) else { throw fail(value, path, "'\(text)' is not an IP address") }
                    bootstrap.append(ip)
                }
            case "pin":
                let value = try string(value, path)
                guard value.hasPrefix("sha256//") else { throw fail(nameNode, path, "expected sha256//BASE64") }
                pin = value
            case "method":
                method = try enumeration(value, path, UpstreamEndpoint.DoHMethod.self)
            default: break
            }
        }
        guard let url, var kind else { throw fail(node, key, "needs doh: URL, json: URL or dot: HOST[:PORT]") }
        if case .doh = kind { kind = .doh(method) }
        if tlsName != nil, kind != .dot { throw fail(node, key, "tls_name is for dot: servers (DoH checks the URL's host)") }
        do {
            if kind == .dot {
                var endpoint = try UpstreamEndpoint.dot(url, tlsName: tlsName, pinnedPublicKey: pin)
                endpoint.bootstrap = bootstrap
                return endpoint
            }
            return try UpstreamEndpoint(kind, url: url, bootstrap: bootstrap, pinnedPublicKey: pin)
        } catch {
            throw fail(node, key, error.message)
        }
    }

    static let vendors: Set<String> = ["alibaba", "tencent", "baidu"]

    /// `alibaba:`, `tencent:` or `baidu:` with the account's settings; secrets only from files or
    /// the environment (`*_file`, `*_env`), never inline.
    func vendorUpstream(_ vendor: String, _ node: Node, _ key: String) throws(DNSError) -> UpstreamEndpoint {
        var settings: [String: (Node, Node)] = [:]
        let common: Set<String> = ["account_id", "endpoint", "region", "bootstrap", "tls_name", "client_ip", "batch_size", "allow_plain_http"]
        let specific: Set<String>
        switch vendor {
        case "alibaba": specific = ["api", "secret_file", "secret_env", "aes_key_file", "aes_key_env", "encryption"]
        case "tencent": specific = ["key_file", "key_env", "token_file", "token_env", "encryption"]
        default: specific = ["secret_file", "secret_env"]
        }
        for (name, nameNode, value) in try mapping(node, key, allowed: common.union(specific)) { settings[name] = (nameNode, value) }
        func text(_ name: String) throws(DNSError) -> String? {
            guard let (_, value) = settings[name] else { return nil }
            return try string(value, "\(key).\(name)")
        }
        /// The secret from `<base>_file` or `<base>_env`; the message names the key and line, never the value.
        func secret(_ base: String) throws(DNSError) -> VendorSecret? {
            let file = settings["\(base)_file"], env = settings["\(base)_env"]
            if file != nil && env != nil { throw fail(file!.0, "\(key).\(base)_file", "give \(base)_file or \(base)_env, not both") }
            do {
                if let (_, value) = file { return try VendorSecret(file: try path(value, "\(key).\(base)_file")) }
                if let (_, value) = env { return try VendorSecret(environment: try string(value, "\(key).\(base)_env")) }
            } catch {
                throw fail((file ?? env)!.1, "\(key).\(base)_\(file != nil ? "file" : "env")", error.message)
            }
            return nil
        }
        func required<T>(_ value: T?, _ name: String) throws(DNSError) -> T {
            guard let value else { throw fail(node, key, "\(name) is required") }
            return value
        }
        let account = try text("account_id")
        let api: VendorAPI
        switch vendor {
        case "alibaba":
            let version = try text("api")?.lowercased() ?? "v2"
            let encryption = try text("encryption")?.lowercased() ?? "none"
            let secretKey = try secret("secret")
            switch version {
            case "legacy":
                guard encryption == "none" else {
                    throw fail(settings["encryption"]?.1, "\(key).encryption", "the legacy API has no encryption; use api: v2")
                }
                api = .alibabaLegacy(accountID: try required(account, "account_id"), secret: secretKey)
            case "v2":
                let aes = try secret("aes_key")
                let mode: AlibabaEncryption
                switch encryption {
                case "none": mode = .none
                case "cbc": mode = .cbc(key: try required(aes, "aes_key_file (for encryption: cbc)"))
                case "gcm": mode = .gcm(key: try required(aes, "aes_key_file (for encryption: gcm)"))
                default: throw fail(settings["encryption"]?.1, "\(key).encryption", "expected cbc, gcm or none, got '\(encryption)'")
                }
                api = .alibabaV2(accountID: try required(account, "account_id"), secret: secretKey, encryption: mode)
            default:
                throw fail(settings["api"]?.1, "\(key).api", "expected v2 or legacy, got '\(version)'")
            }
        case "tencent":
            if let token = try secret("token") {
                guard settings["key_file"] == nil, settings["key_env"] == nil, settings["encryption"] == nil else {
                    throw fail(node, key, "give token_file (HTTPS mode) or key_file with encryption, not both")
                }
                api = .tencentToken(token: token)
            } else {
                let cipherKey = try required(try secret("key"), "key_file (or token_file)")
                switch try text("encryption")?.lowercased() ?? "des" {
                case "des": api = .tencent(accountID: try required(account, "account_id"), cipher: .des(key: cipherKey))
                case "aes": api = .tencent(accountID: try required(account, "account_id"), cipher: .aes(key: cipherKey))
                case let other: throw fail(settings["encryption"]?.1, "\(key).encryption", "expected des or aes, got '\(other)'")
                }
            }
        default:
            api = .baidu(accountID: try required(account, "account_id"), secret: try required(try secret("secret"), "secret_file"))
        }
        var endpoint = try text("endpoint")
        var bootstrap: [String] = []
        var tlsName = try text("tls_name")
        if let (_, value) = settings["region"] {
            let region = try string(value, "\(key).region")
            guard let preset = VendorServiceIPs.preset(vendor: vendor, region: region) else {
                let known = VendorServiceIPs.regions(vendor: vendor)
                throw fail(value, "\(key).region", "unknown region '\(region)' for \(vendor) (known: \(known.joined(separator: ", ")))")
            }
            endpoint = endpoint ?? preset.endpoint(for: api)
            bootstrap = preset.serviceIPs
            tlsName = tlsName ?? preset.tlsName
        }
        if let (_, value) = settings["bootstrap"] { bootstrap = try strings(value, "\(key).bootstrap") }
        var batchSize: Int?
        if let (_, value) = settings["batch_size"] { batchSize = try integer(value, "\(key).batch_size", 1...api.batchLimit) }
        let allowPlain = try settings["allow_plain_http"].map { (_, value) throws(DNSError) in try bool(value, "\(key).allow_plain_http") } ?? false
        do {
            return try UpstreamEndpoint.vendor(
                api, endpoint: try required(endpoint, "endpoint (or region)"), bootstrap: bootstrap, tlsName: tlsName,
                clientIP: try text("client_ip"), batchSize: batchSize, allowPlainHTTP: allowPlain)
        } catch {
            throw fail(node, key, error.message)
        }
    }

    func cache(_ node: Node, into options: inout HTTPDNSOptions, config: inout ConfigFile) throws(DNSError) {
        let keys: Set<String> = [
            "min_ttl", "max_ttl", "negative_ttl", "failure_ttl", "stale_window", "capacity", "persist",
            "persist_interval", "prefetch", "stale_answer_delay", "shared",
        ]
        for (name, _, value) in try mapping(node, "cache", allowed: keys) {
            let path = "cache.\(name)"
            switch name {
            case "min_ttl": options.minTTL = try seconds(value, path)
            case "max_ttl": options.maxTTL = try seconds(value, path, allowZero: false)
            case "negative_ttl": options.negativeTTL = try seconds(value, path)
            case "failure_ttl": options.failureTTL = try seconds(value, path)
            case "stale_window": options.staleWindow = try seconds(value, path)
            case "capacity": options.cacheCapacity = try integer(value, path, 1...10_000_000)
            case "persist": config.lookup.persistPath = try self.path(value, path)
            case "persist_interval": config.daemon.persistInterval = try seconds(value, path, allowZero: false)
            case "stale_answer_delay":
                options.staleAnswerDelay = try seconds(value, path)
                guard options.staleAnswerDelay <= .seconds(30) else { throw fail(value, path, "must be at most 30 seconds") }
            case "prefetch": options.prefetch = try bool(value, path)
            case "shared": config.daemon.sharedCache = try sharedCache(value)
            default: break
            }
        }
        guard options.minTTL <= options.maxTTL else { throw fail(node, "cache.min_ttl", "is larger than cache.max_ttl") }
    }

    /// `cache.shared`. Debian 12's hiredis (0.14) has no TLS, so Redis must be reached where nobody
    /// else can listen in: on loopback or through a Unix socket.
    func sharedCache(_ node: Node) throws(DNSError) -> DaemonSettings.SharedCacheSettings {
        var redis: String?, key: [UInt8]?, password: String?
        var timeout = Duration.milliseconds(50), prefix = "httpdns:"
        for (name, _, value) in try mapping(node, "cache.shared", allowed: ["redis", "key_file", "password_file", "timeout", "prefix"]) {
            let path = "cache.shared.\(name)"
            switch name {
            case "redis":
                let text = try string(value, path)
                if text.hasPrefix("/") {
                    redis = text
                } else if let (address, port) = IPAddress.endpoint(text), port != nil {
                    guard address.specialPurposeRange == "loopback" else {
                        throw fail(
                            value, path,
                            "'\(text)' is not on loopback: Debian 12's hiredis has no TLS, so Redis must be on 127.0.0.0/8, ::1 or a Unix socket (tunnel to another host with stunnel or spiped)"
                        )
                    }
                    redis = text
                } else {
                    throw fail(value, path, "expected a loopback IP:port or a Unix socket path, got '\(text)'")
                }
            case "key_file":
                let file = try self.path(value, path)
                guard let data = FileManager.default.contents(atPath: file) else { throw fail(value, path, "cannot read '\(file)'") }
                var bytes = Array(data)
                while let last = bytes.last, last == 0x0a || last == 0x0d { bytes.removeLast() }
                guard bytes.count >= 32 else {
                    throw fail(
                        value, path, "'\(file)' holds \(bytes.count) bytes; the shared key needs at least 32 (head -c 32 /dev/urandom | base64)")
                }
                key = bytes
            case "password_file":
                let file = try self.path(value, path)
                guard let data = FileManager.default.contents(atPath: file) else { throw fail(value, path, "cannot read '\(file)'") }
                password = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .newlines)
            case "timeout":
                timeout = try seconds(value, path, allowZero: false)
                guard timeout <= .seconds(1) else { throw fail(value, path, "must be at most 1 second (a lookup waits this long)") }
            case "prefix": prefix = try string(value, path)
            default: break
            }
        }
        guard let redis else { throw fail(node, "cache.shared", "needs redis") }
        guard let key else { throw fail(node, "cache.shared", "needs key_file: Redis is a trust boundary, values are authenticated") }
        return DaemonSettings.SharedCacheSettings(redis: redis, key: key, password: password, timeout: timeout, prefix: prefix)
    }

    func tls(_ node: Node) throws(DNSError) -> DaemonSettings.TLSFiles {
        var certificate: String?, key: String?
        for (name, _, value) in try mapping(node, "tls", allowed: ["cert", "key"]) {
            let file = try path(value, "tls.\(name)")
            guard FileManager.default.isReadableFile(atPath: file) else { throw fail(value, "tls.\(name)", "cannot read '\(file)'") }
            if name == "cert" { certificate = file } else { key = file }
        }
        guard let certificate, let key else { throw fail(node, "tls", "needs both cert and key") }
        return DaemonSettings.TLSFiles(certificate: certificate, key: key)
    }

    /// `ddr: on | off | {name: NAME, ttl: SECONDS}`.
    func ddr(_ node: Node) throws(DNSError) -> DaemonSettings.DDR {
        var ddr = DaemonSettings.DDR()
        if case let .scalar(scalar) = node {
            switch scalar.string.lowercased() {
            case "on", "true", "yes": return ddr
            case "off", "false", "no":
                ddr.enabled = false
                return ddr
            default: throw fail(node, "ddr", "expected on, off or {name: NAME, ttl: SECONDS}, got '\(scalar.string)'")
            }
        }
        for (name, _, value) in try mapping(node, "ddr", allowed: ["name", "ttl"]) {
            switch name {
            case "name":
                let text = try string(value, "ddr.name")
                do { ddr.name = try DomainName(text) } catch { throw fail(value, "ddr.name", error.message) }
                guard ddr.name != .root, IPAddress(text) == nil else {
                    throw fail(value, "ddr.name", "expected the DNS name the certificate is valid for, got '\(text)'")
                }
            default: ddr.ttl = UInt32(try integer(value, "ddr.ttl", 0...86_400))
            }
        }
        return ddr
    }

    func limits(_ node: Node) throws(DNSError) -> DaemonSettings.Limits {
        var limits = DaemonSettings.Limits()
        let keys: Set<String> = ["max_body_bytes", "max_url_length", "max_concurrent_requests", "max_connections", "request_timeout", "idle_timeout"]
        for (name, _, value) in try mapping(node, "limits", allowed: keys) {
            let path = "limits.\(name)"
            switch name {
            case "max_body_bytes": limits.maxBodyBytes = try integer(value, path, 12...65_535)
            case "max_url_length": limits.maxURLLength = try integer(value, path, 64...100_000)
            case "max_concurrent_requests": limits.maxConcurrentRequests = try integer(value, path, 1...100_000)
            case "max_connections": limits.maxConnections = try integer(value, path, 1...1_000_000)
            case "request_timeout":
                limits.requestTimeout = try seconds(value, path, allowZero: false)
                guard limits.requestTimeout <= .seconds(600) else { throw fail(value, path, "must be at most 600 seconds") }
            case "idle_timeout": limits.idleTimeout = try seconds(value, path, allowZero: false)
            default: break
            }
        }
        return limits
    }

    func proxy(_ node: Node) throws(DNSError) -> DaemonSettings.Proxy {
        var proxy = DaemonSettings.Proxy()
        let keys: Set<String> = ["connect_ports", "allow", "deny", "allow_private_destinations", "auth_file", "limits"]
        for (name, _, value) in try mapping(node, "proxy", allowed: keys) {
            let path = "proxy.\(name)"
            switch name {
            case "connect_ports":
                guard case let .sequence(list) = value, !list.isEmpty else { throw fail(value, path, "expected a non-empty list of ports") }
                proxy.connectPorts = []
                for (index, item) in list.enumerated() { proxy.connectPorts.append(try integer(item, "\(path)[\(index)]", 1...65_535)) }
            case "allow", "deny":
                var patterns: [String] = []
                if case let .sequence(list) = value {
                    for (index, item) in list.enumerated() { patterns.append(try string(item, "\(path)[\(index)]").lowercased()) }
                } else {
                    patterns = [try string(value, path).lowercased()]
                }
                if name == "allow" { proxy.allow = patterns } else { proxy.deny = patterns }
            case "allow_private_destinations": proxy.allowPrivateDestinations = try bool(value, path)
            case "auth_file":
                let file = try self.path(value, path)
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { throw fail(value, path, "cannot read '\(file)'") }
                var users: [String: String] = [:]
                for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let entry = line.trimmingCharacters(in: .whitespaces)
                    if entry.isEmpty || entry.hasPrefix("#") { continue }
                    guard let colon = entry.firstIndex(of: ":"), colon != entry.startIndex, entry.index(after: colon) != entry.endIndex else {
                        // The line's number, never its text: it holds a password.
                        throw fail(value, path, "line \(number + 1) of '\(file)' is not user:password")
                    }
                    users[String(entry[..<colon])] = String(entry[entry.index(after: colon)...])
                }
                guard !users.isEmpty else { throw fail(value, path, "'\(file)' has no user:password line") }
                proxy.users = users
            case "limits":
                let limitKeys: Set<String> = ["max_connections", "connect_timeout", "idle_timeout", "max_header_bytes"]
                for (limit, _, item) in try mapping(value, path, allowed: limitKeys) {
                    let limitPath = "\(path).\(limit)"
                    switch limit {
                    case "max_connections": proxy.maxConnections = try integer(item, limitPath, 1...1_000_000)
                    case "connect_timeout": proxy.connectTimeout = try seconds(item, limitPath, allowZero: false)
                    case "idle_timeout": proxy.idleTimeout = try seconds(item, limitPath, allowZero: false)
                    case "max_header_bytes": proxy.maxHeaderBytes = try integer(item, limitPath, 1_024...1_048_576)
                    default: break
                    }
                }
            default: break
            }
        }
        return proxy
    }

    func readiness(_ node: Node) throws(DNSError) -> DaemonSettings.Readiness {
        var readiness = DaemonSettings.Readiness()
        for (name, _, value) in try mapping(node, "readiness", allowed: ["probe", "interval", "dns_name", "lame_duck"]) {
            let path = "readiness.\(name)"
            switch name {
            case "probe":
                let text = try string(value, path)
                do { _ = try DomainName(text) } catch { throw fail(value, path, error.message) }
                readiness.probe = text
            case "interval":
                readiness.interval = try seconds(value, path, allowZero: false)
                guard readiness.interval >= .seconds(1) else { throw fail(value, path, "must be at least 1 second") }
            case "dns_name":
                let text = try string(value, path)
                do { readiness.dnsName = try DomainName(text) } catch { throw fail(value, path, error.message) }
            case "lame_duck":
                readiness.lameDuck = try seconds(value, path, allowZero: true)
                guard readiness.lameDuck <= .seconds(300) else { throw fail(value, path, "must be at most 300 seconds") }
            default: break
            }
        }
        return readiness
    }

    func watch(_ node: Node, _ key: String) throws(DNSError) -> DaemonSettings.Watch {
        var host: String?, port = 443, interval = Duration.seconds(30), httpsRecords = false
        for (name, _, value) in try mapping(node, key, allowed: ["host", "port", "interval", "https_records"]) {
            let path = "\(key).\(name)"
            switch name {
            case "host":
                let text = try string(value, path)
                let name: DomainName
                do { name = try DomainName(text) } catch { throw fail(value, path, error.message) }
                if ResolverDiscovery.isSpecialUse(name) { throw fail(value, path, "\(name) is under resolver.arpa, which is never looked up") }
                host = text
            case "port": port = try integer(value, path, 1...65535)
            case "interval": interval = try seconds(value, path, allowZero: false)
            case "https_records": httpsRecords = try bool(value, path)
            default: break
            }
        }
        guard let host else { throw fail(node, key, "needs host") }
        return DaemonSettings.Watch(host: host, port: port, interval: interval, httpsRecords: httpsRecords)
    }

    /// A listener: `IPv4:port` or `[IPv6]:port`, parsed as the daemon binds it; with a
    /// `defaultPort`, an address alone too.
    func endpoint(_ node: Node, _ key: String, defaultPort: Int? = nil) throws(DNSError) -> String {
        let value = try string(node, key)
        if let defaultPort, let (address, port) = IPAddress.endpoint(value), port == nil {
            return address.family == .ipv6 ? "[\(address)]:\(defaultPort)" : "\(address):\(defaultPort)"
        }
        guard let (_, port) = IPAddress.endpoint(value), port != nil else {
            throw fail(node, key, "expected IPv4:port or [IPv6]:port, got '\(value)'")
        }
        return value
    }

    /// `IP`, `IPv4:port` or `[IPv6]:port`.
    static func isServer(_ text: String) -> Bool {
        IPAddress.endpoint(text) != nil
    }
}

/// An IPv4 or IPv6 network, `address/prefix` (an address alone is its /32 or /128).
package struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    package let address: IPAddress
    package let prefix: Int

    /// Parses `10.0.0.0/8`, `2001:db8::/32` or an address; nil for anything else, or a prefix
    /// longer than the family's. Host bits are cleared. An IPv4-mapped network (`::ffff:10.0.0.5`,
    /// `::ffff:10.0.0.0/104`: how a dual-stack listener shows IPv4 peers) is read as the IPv4
    /// network it holds, which is what peers are matched as.
    package init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        guard let parsed = IPAddress(parts[0]) else { return nil }
        var bytes = parsed.bytes
        var prefix = bytes.count * 8
        if parts.count == 2 {
            guard !parts[1].isEmpty, parts[1].utf8.allSatisfy({ (0x30...0x39).contains($0) }), let value = Int(parts[1]), (0...prefix).contains(value)
            else { return nil }
            prefix = value
        }
        if bytes.count == 16, bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff, prefix >= 96 {
            bytes = Array(bytes.suffix(4))
            prefix -= 96
        }
        self.prefix = prefix
        self.address = IPAddress(bytes: Self.masked(bytes, prefix))!
    }

    /// Whether `ip` is in the network (an IPv4 address in IPv6, `::ffff:a.b.c.d`, counts as IPv4).
    package func contains(_ ip: IPAddress) -> Bool {
        var bytes = ip.bytes
        if bytes.count == 16, bytes.prefix(10).allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff { bytes = Array(bytes.suffix(4)) }
        guard bytes.count == address.bytes.count else { return false }
        return Self.masked(bytes, prefix) == address.bytes
    }

    static func masked(_ bytes: [UInt8], _ prefix: Int) -> [UInt8] {
        bytes.enumerated().map { index, byte in
            let kept = min(max(prefix - index * 8, 0), 8)
            return kept == 8 ? byte : kept == 0 ? 0 : byte & ~UInt8(0) << UInt8(8 - kept)
        }
    }

    package var description: String { "\(address)/\(prefix)" }
}
