import ResolverConfig
import Testing

@testable import ResolverDaemon

/// How the daemon shares the descriptor limit among its listeners.
@Suite struct ConnectionLimitsTests {
    /// docs/threat-model.md F10: the proxy's tunnels (up to 6 descriptors each) took 1,023 of 1,024 descriptors,
    /// outside the budget that sized HTTP and the DNS stub. Now all three share it.
    @Test func tunnelsAreCountedInTheDescriptorBudget() throws {
        let base = "upstreams: [{doh: \"https://192.0.2.1/dns-query\"}]\ndns_listen: \"127.0.0.1:5353\"\n"
        let withProxy = try ConfigFile.parse(base + "proxy_listen: \"127.0.0.1:8118\"\n", file: "p.yaml", directory: "/tmp")
        let (perListener, tunnels) = Daemon.connectionLimits(withProxy, descriptors: 1_024)
        #expect(perListener * 2 + tunnels * Daemon.descriptorsPerTunnel <= 1_024 - 128, "\(perListener) per listener, \(tunnels) tunnels")
        #expect(perListener >= 16 && tunnels >= 16)
        let roomy = Daemon.connectionLimits(withProxy, descriptors: 1_048_576)
        #expect(roomy == (withProxy.daemon.limits.maxConnections, withProxy.daemon.proxy.maxConnections))
        let noProxy = try ConfigFile.parse(base, file: "p.yaml", directory: "/tmp")
        #expect(Daemon.connectionLimits(noProxy, descriptors: 1_024).perListener == (1_024 - 128) / 2)
    }
}
