import ForwardProxy
import ResolverConfig
import Testing

@testable import ResolverDaemon

/// The configuration's `proxy:` reaches the proxy whole: a key dropped by the mapping would fall
/// back to its default silently (no authentication, say, with `auth_file` set).
@Suite struct ProxySettingsMappingTests {
    @Test func everyKeyIsMapped() {
        var configured = DaemonSettings.Proxy()
        configured.connectPorts = [443, 8443]
        configured.allow = ["hd.test"]
        configured.deny = ["x.test"]
        configured.allowPrivateDestinations = true
        configured.users = ["alice": "pw1"]
        configured.maxConnections = 7
        configured.connectTimeout = .seconds(2)
        configured.idleTimeout = .seconds(30)
        configured.maxHeaderBytes = 4_096
        let mapped = ProxySettings(configured)
        var expected = ProxySettings()
        expected.connectPorts = [443, 8443]
        expected.allow = ["hd.test"]
        expected.deny = ["x.test"]
        expected.allowPrivateDestinations = true
        expected.users = ["alice": "pw1"]
        expected.maxConnections = 7
        expected.connectTimeout = .seconds(2)
        expected.idleTimeout = .seconds(30)
        expected.maxHeaderBytes = 4_096
        #expect(mapped == expected)
        // And the two types have the same defaults.
        #expect(ProxySettings(DaemonSettings.Proxy()) == ProxySettings())
        // The two types have the same fields: a field added to one and not the other shows here.
        #expect(Mirror(reflecting: configured).children.map(\.label) == Mirror(reflecting: mapped).children.map(\.label))
    }
}
