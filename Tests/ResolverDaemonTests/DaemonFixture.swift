import DNSCore
import HTTPDNS
import Logging
import MetricsTestKit
import ResolverConfig
import SystemResolver
import TestSupport

@testable import ResolverDaemon

/// A gateway over a resolver with scripted upstreams: what the connection handlers talk to in the
/// handler tests, with the daemon's real router, policy and metrics (into a `TestMetrics`).
struct DaemonFixture {
    let resolver: HTTPDNSResolver
    let state: DaemonState
    let gateway: RequestGateway
    let metrics: TestMetrics

    init(
        upstream: ScriptedUpstream = ScriptedUpstream("https://doh.test/dns-query", .addresses(["198.18.0.10"], ttl: 300)),
        extra: String = ""
    ) throws {
        let config = try ConfigFile.parse(
            """
            upstreams: [{doh: "https://doh.test/dns-query", bootstrap: [127.0.0.1]}]
            allow_private: true
            system_dns: ["127.0.0.1:9"]
            \(extra)
            """)
        metrics = TestMetrics()
        resolver = HTTPDNSResolver(
            configuration: config.lookup.configuration, options: config.lookup.options, upstreams: [upstream], metrics: metrics)
        let runtime = Runtime(config, resolver: resolver, system: try SystemResolver(servers: config.lookup.systemDNS))
        state = DaemonState(runtime: runtime, configPath: "test.yaml", metrics: DaemonMetrics(factory: metrics), logger: Logger(label: "test"))
        gateway = RequestGateway(state: state, exposition: { Array("# metrics\n".utf8) })
    }

    /// How many requests the metrics counted for this route, method and status.
    func requests(_ route: String, _ method: String, _ status: Int) -> Int64 {
        let counter = try? metrics.expectCounter(
            "hb.requests",
            [
                ("http.route", route), ("http.request.method", method),
                ("http.response.status_code", String(status)),
            ])
        return counter?.totalValue ?? 0
    }
}
