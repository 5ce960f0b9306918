import DNSCore
import Foundation
import HTTPDNS
import Testing

@testable import ResolverConfig

@Suite struct ConfigFileTests {
    static let full = """
        upstreams:                       # trusted resolvers, in order of preference
          - doh: https://doh-a.test:18443/dns-query
            bootstrap: [127.0.0.1, "::1"]
          - json: https://json.test:18443/resolve
            bootstrap: 127.0.0.3
          - doh: https://doh-b.test:18444/dns-query
            bootstrap: [127.0.0.1]
            method: post
            pin: sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=
        allow_private: true
        fallback: system
        system_dns: ["127.0.0.1:18055", "::1"]
        timeout: 2.5
        strategy: fastest
        hedging: false
        cache: {min_ttl: 30, max_ttl: 3600, negative_ttl: 15, stale_window: 600, capacity: 5000, persist: cache.bin,
                 persist_interval: 60, stale_answer_delay: 1.8, prefetch: false}
        listen: "127.0.0.1:8053"
        dns_listen: "127.0.0.1:5353"
        preresolve: [www.hd.test]
        watch:
          - {host: www.hd.test, port: 443, interval: 30}
        auth_token: s3cret-token-0123456789
        protect_dns_query: true
        limits: {max_body_bytes: 4096, max_url_length: 2048, max_concurrent_requests: 64}
        """

    @Test func readsEveryKey() throws {
        let config = try ConfigFile.parse(Self.full, file: "c.yaml", directory: "/etc/httpdns")
        #expect(
            config.lookup.configuration.upstreams.map(\.url) == [
                "https://doh-a.test:18443/dns-query", "https://json.test:18443/resolve", "https://doh-b.test:18444/dns-query",
            ])
        #expect(config.lookup.configuration.upstreams[0].bootstrap.map(\.description) == ["127.0.0.1", "::1"])
        #expect(config.lookup.configuration.upstreams[1].kind == .json)
        #expect(config.lookup.configuration.upstreams[2].kind == .doh(.post))
        #expect(config.lookup.configuration.upstreams[2].pinnedPublicKey?.hasPrefix("sha256//") == true)
        #expect(config.lookup.options.allowPrivate)
        #expect(config.lookup.options.fallback == .system)
        #expect(config.lookup.options.timeout == .milliseconds(2500))
        #expect(config.lookup.options.strategy == .fastest)
        #expect(!config.lookup.options.hedging)
        #expect(config.lookup.options.minTTL == .seconds(30) && config.lookup.options.maxTTL == .seconds(3600))
        #expect(config.lookup.options.negativeTTL == .seconds(15) && config.lookup.options.staleWindow == .seconds(600))
        #expect(config.lookup.options.cacheCapacity == 5000)
        #expect(config.lookup.persistPath == "/etc/httpdns/cache.bin")
        #expect(config.daemon.persistInterval == .seconds(60))
        #expect(config.lookup.options.staleAnswerDelay == .milliseconds(1800))
        #expect(!config.lookup.options.prefetch)
        #expect(config.lookup.configuration.preresolve == ["www.hd.test"], "pre-resolve reaches the resolver's configuration")
        #expect(config.lookup.systemDNS == ["127.0.0.1:18055", "::1"])
        #expect(config.daemon.dnsListen == "127.0.0.1:5353")
        #expect(config.lookup.preresolve == ["www.hd.test"])
        #expect(config.daemon.watch == [.init(host: "www.hd.test", port: 443, interval: .seconds(30))])
        #expect(config.daemon.authToken == "s3cret-token-0123456789" && config.daemon.protectDNSQuery)
        #expect(
            config.daemon.limits.maxBodyBytes == 4096 && config.daemon.limits.maxURLLength == 2048 && config.daemon.limits.maxConcurrentRequests == 64
        )
        #expect(config.daemon.tls == nil)
    }

    @Test func tlsNamesReadableFilesAndAnEmptyWatchIsNone() throws {
        let config = try ConfigFile.parse("upstreams:\n  - doh: https://127.0.0.1/q\ntls: {cert: /etc/hostname, key: /etc/hostname}\nwatch:\n")
        #expect(config.daemon.tls == .init(certificate: "/etc/hostname", key: "/etc/hostname"))
        #expect(config.daemon.watch.isEmpty)
        #expect(DaemonSettings.Limits() == config.daemon.limits, "defaults: 65,535-byte bodies, 8,192-byte URLs, 1,024 requests")
    }

    @Test func defaultsApplyWhenKeysAreMissing() throws {
        let config = try ConfigFile.parse("upstreams:\n  - doh: https://127.0.0.1:18443/dns-query\n")
        #expect(config.lookup.options == HTTPDNSOptions())
        #expect(config.daemon.listen == "127.0.0.1:8053")
        #expect(config.lookup.systemDNS.isEmpty && config.daemon.watch.isEmpty && config.lookup.persistPath == nil)
    }

    @Test(arguments: [
        ("upstreams:\n  - doh: https://127.0.0.1/q\nbogus: 1\n", "c.yaml:3: bogus: unknown key"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ncache:\n  min_ttl: abc\n", "c.yaml:4: cache.min_ttl: expected a number of seconds"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ncache: {capacity: -5}\n", "c.yaml:3: cache.capacity: expected a whole number"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nallow_private: maybe\n", "c.yaml:3: allow_private: expected true or false"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nfallback: sometimes\n", "c.yaml:3: fallback: expected one of none, system"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\n    bootstrap: [not-an-ip]\n",
            "c.yaml:3: upstreams[0].bootstrap: 'not-an-ip' is not an IP address"
        ),
        ("upstreams:\n  - doh: http://127.0.0.1/q\n", "c.yaml:2: upstreams[0]: 'http://127.0.0.1/q': trusted resolvers must use https"),
        ("upstreams:\n  - doh: https://dns.test/q\n", "upstreams: upstream https://dns.test/q has no bootstrap address"),
        ("upstreams:\n  - dho: https://127.0.0.1/q\n", "c.yaml:2: upstreams[0].dho: unknown key"),
        ("upstreams: []\n", "c.yaml:1: upstreams: expected a non-empty list"),
        ("fallback: none\n", "upstreams: at least one trusted upstream is required"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nsystem_dns: [dns.test]\n", "c.yaml:3: system_dns: 'dns.test' is not IP or IP:port"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nwatch:\n  - {port: 443}\n", "c.yaml:4: watch[0]: needs host"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ncache: {min_ttl: 100, max_ttl: 10}\n", "cache.min_ttl: is larger than cache.max_ttl"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\ncache: {stale_answer_delay: 90}\n",
            "c.yaml:3: cache.stale_answer_delay: must be at most 30 seconds"
        ),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\ncache: {persist_interval: 0}\n",
            "c.yaml:3: cache.persist_interval: expected a number of seconds"
        ),
        ("upstreams: [\n", "c.yaml: not valid YAML"),
        ("", "c.yaml: the file is empty"),
        ("- just\n- a list\n", "c.yaml:1: : expected a mapping"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\ntls: {cert: /nonexistent.pem, key: /etc/hostname}\n",
            "c.yaml:3: tls.cert: cannot read '/nonexistent.pem'"
        ),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntls: {cert: /etc/hostname}\n", "c.yaml:3: tls: needs both cert and key"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nauth_token: short\n", "c.yaml:3: auth_token: expected at least 16 printable characters"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\nlimits: {max_body_bytes: 70000}\n",
            "c.yaml:3: limits.max_body_bytes: expected a whole number in 12...65535"
        ),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nlimits: {max_requests: 5}\n", "c.yaml:3: limits.max_requests: unknown key"),
        // A listener the daemon could not bind: a bare IPv6 address has no port.
        ("upstreams:\n  - doh: https://127.0.0.1/q\nlisten: \"::1\"\n", "c.yaml:3: listen: expected IPv4:port or [IPv6]:port"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ndns_listen: \"127.0.0.1:0\"\n", "c.yaml:3: dns_listen: expected IPv4:port"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nlisten: \"localhost:8053\"\n", "c.yaml:3: listen: expected IPv4:port"),
        // libcurl reads the CA file only when a transfer starts: a file that is not PEM is refused here.
        ("upstreams:\n  - doh: https://127.0.0.1/q\nca_file: /etc/hostname\n", "upstreams: CA file '/etc/hostname' holds no PEM certificate"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\nlimits: {request_timeout: 0}\n",
            "c.yaml:3: limits.request_timeout: expected a number of seconds"
        ),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nlimits: {max_connections: 0}\n", "c.yaml:3: limits.max_connections: expected a whole number"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nreadiness: {probe: 'not a name'}\n", "c.yaml:3: readiness.probe:"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nreadiness: {interval: 0.5}\n", "c.yaml:3: readiness.interval: must be at least 1 second"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nreadiness: {lame_duck: 301}\n", "c.yaml:3: readiness.lame_duck: must be at most 300 seconds"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nreadiness: {lame_duck: -1}\n", "c.yaml:3: readiness.lame_duck: expected a number of seconds"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nreadiness: {dns_name: 'a b'}\n", "c.yaml:3: readiness.dns_name:"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nuser: no-such-user-here\n", "c.yaml:3: user: no user 'no-such-user-here' on this system"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\nrecords: ['x.resolver.arpa A 10.0.0.1']\n",
            "c.yaml:3: records[0]: x.resolver.arpa is under resolver.arpa"
        ),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\npreresolve: [_dns.resolver.arpa]\n",
            "c.yaml:3: preresolve: _dns.resolver.arpa is under resolver.arpa"
        ),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nwatch:\n  - {host: a.resolver.arpa}\n", "watch[0].host: a.resolver.arpa is under resolver.arpa"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: [0.0.0.0/0]\n", "c.yaml:3: trusted_proxies: '0.0.0.0/0' trusts every address"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: ['::/0']\n", "c.yaml:3: trusted_proxies: '::/0' trusts every address"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: [10.0.0.0/+8]\n", "c.yaml:3: trusted_proxies: '10.0.0.0/+8' is not an address"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: [10.0.0.0/33]\n", "c.yaml:3: trusted_proxies: '10.0.0.0/33' is not an address"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: [lb.test]\n", "c.yaml:3: trusted_proxies: 'lb.test' is not an address"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nddr: maybe\n", "c.yaml:3: ddr: expected on, off or {name: NAME, ttl: SECONDS}"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nddr: {name: 'a b'}\n", "c.yaml:3: ddr.name:"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nddr: {name: 192.0.2.1}\n", "c.yaml:3: ddr.name: expected the DNS name"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nddr: {ttl: 86401}\n", "c.yaml:3: ddr.ttl:"),
        ("upstreams:\n  - doh: https://127.0.0.1/q\nddr: {target: x.test}\n", "c.yaml:3: ddr.target: unknown key"),
        (
            "upstreams:\n  - doh: https://127.0.0.1/q\nddr: {name: dns.test}\n",
            "ddr: name: is the certificate's name for the encrypted listeners, which need tls:"
        ),
    ])
    func errorsNameTheLineAndKey(text: String, expected: String) {
        do {
            _ = try ConfigFile.parse(text, file: "c.yaml")
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains(expected), "\(error.message)")
        }
    }

    @Test func listenersAndTheNewLimitsAreRead() throws {
        let config = try ConfigFile.parse(
            """
            upstreams:
              - doh: https://127.0.0.1/q
            listen: "[::1]:8053"
            limits: {max_connections: 200, request_timeout: 3, idle_timeout: 30}
            readiness: {probe: www.hd.test, interval: 5, dns_name: Health.Pool.test., lame_duck: 7.5}
            user: nobody
            """)
        #expect(config.daemon.listen == "[::1]:8053")
        #expect(config.daemon.limits.maxConnections == 200)
        #expect(config.daemon.limits.requestTimeout == .seconds(3))
        #expect(config.daemon.limits.idleTimeout == .seconds(30))
        #expect(config.daemon.readiness.probe == "www.hd.test")
        #expect(config.daemon.readiness.interval == .seconds(5))
        #expect(config.daemon.readiness.dnsName == (try DomainName("health.pool.test")))
        #expect(config.daemon.readiness.lameDuck == .milliseconds(7_500))
        #expect(config.daemon.user == "nobody")
        #expect(try ConfigFile.parse("upstreams:\n  - doh: https://127.0.0.1/q\n").daemon.readiness.lameDuck == .zero)
    }

    /// `rate_limit.slip`: BIND's default (2) with `action: refused`; with `drop` none unless asked
    /// for, as `drop` has always sent nothing over UDP; 0 to 10.
    @Test func rateLimitSlipDefaultsFollowTheAction() throws {
        func limit(_ text: String) throws -> DaemonSettings.RateLimit? {
            try ConfigFile.parse("upstreams:\n  - doh: https://127.0.0.1/q\nrate_limit: {\(text)}\n").daemon.rateLimit
        }
        #expect(try limit("queries_per_second: 10")?.slip == 2)
        #expect(try limit("queries_per_second: 10, action: drop")?.slip == 0)
        #expect(try limit("queries_per_second: 10, action: drop, slip: 3")?.slip == 3)
        #expect(try limit("queries_per_second: 10, slip: 0")?.slip == 0)
        #expect(throws: DNSError.self) { try limit("queries_per_second: 10, slip: 11") }
    }

    @Test func trustedProxiesAreNetworksMatchedAsPeersAre() throws {
        let config = try ConfigFile.parse(
            "upstreams:\n  - doh: https://127.0.0.1/q\ntrusted_proxies: [10.1.2.3/8, 127.0.0.5, '2001:db8::1/64', '::ffff:192.0.2.9', '::ffff:198.51.100.0/120']\n"
        )
        #expect(
            config.daemon.trustedProxies.map(\.description) == ["10.0.0.0/8", "127.0.0.5/32", "2001:db8::/64", "192.0.2.9/32", "198.51.100.0/24"])
        let networks = config.daemon.trustedProxies
        func trusted(_ text: String) -> Bool { networks.contains { $0.contains(IPAddress(text)!) } }
        #expect(trusted("10.200.0.1") && trusted("127.0.0.5") && trusted("2001:db8::ffff") && trusted("192.0.2.9") && trusted("198.51.100.77"))
        #expect(trusted("::ffff:10.9.9.9") && trusted("::ffff:127.0.0.5"), "an IPv4 peer on a dual-stack listener")
        #expect(!trusted("11.0.0.1") && !trusted("127.0.0.6") && !trusted("2001:db9::1") && !trusted("::ffff:127.0.0.6"))
    }

    @Test func ddrIsOnByDefaultAndReadsItsNameAndTTL() throws {
        let base = "upstreams:\n  - doh: https://127.0.0.1/q\ntls: {cert: /etc/hostname, key: /etc/hostname}\n"
        let plain = try ConfigFile.parse(base)
        #expect(plain.daemon.ddr.enabled && plain.daemon.ddr.name == nil && plain.daemon.ddr.ttl == 300)
        #expect(try ConfigFile.parse(base + "ddr: off\n").daemon.ddr.enabled == false)
        #expect(try ConfigFile.parse(base + "ddr: on\n").daemon.ddr.enabled)
        let named = try ConfigFile.parse(base + "ddr: {name: DNS.Example.test., ttl: 60}\n").daemon.ddr
        #expect(named.enabled && named.name?.description == "dns.example.test" && named.ttl == 60)
    }

    @Test func unreadableFileIsAClearError() {
        #expect { try ConfigFile.load("/nonexistent/httpdns.yaml") } throws: {
            ($0 as? DNSError)?.message.contains("cannot read config file") == true
        }
    }
}

/// The configuration the Debian package installs as /etc/resolve/daemon.yaml.
@Suite struct PackagedConfigTests {
    @Test func theDefaultConfigOfThePackageLoads() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let config = try ConfigFile.load(root.appendingPathComponent("dist/daemon.yaml").path)
        #expect(config.lookup.configuration.upstreams.count == 2)
        #expect(config.lookup.persistPath == "/var/lib/resolve/cache.bin")
        #expect(config.daemon.dnsListen == "127.0.0.1:5353")
        #expect(config.daemon.user == nil, "the unit starts it unprivileged: no user: by default")
        #expect(config.daemon.watch.isEmpty)
    }
}
