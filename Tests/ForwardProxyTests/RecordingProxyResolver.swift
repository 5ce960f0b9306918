import DNSCore
import Synchronization

@testable import ForwardProxy

/// A `ProxyResolving` with fixed answers — `hosts` maps a name to its addresses; any other name is
/// NXDOMAIN — that records what the proxy asked and counted: the names looked up (with or without
/// waiting) and the outcomes.
final class RecordingProxyResolver: ProxyResolving {
    let settings: ProxySettings
    let headTimeout: Duration = .seconds(2)
    let hosts: [String: [IPAddress]]
    private let recorded = Mutex<(lookups: [String], outcomes: [String], tunnels: Int)>(([], [], 0))

    init(settings: ProxySettings, hosts: [String: [IPAddress]]) {
        self.settings = settings
        self.hosts = hosts
    }

    /// The names the proxy resolved, in order.
    var lookups: [String] { recorded.withLock { $0.lookups } }
    /// The outcomes it counted (`tunnel`, a status, …), in order.
    var outcomes: [String] { recorded.withLock { $0.outcomes } }
    /// Tunnels open now, as counted.
    var tunnels: Int { recorded.withLock { $0.tunnels } }

    func addressesWithoutWaiting(_ host: String) -> [IPAddress]? {
        recorded.withLock { $0.lookups.append(host) }
        return hosts[host]
    }

    func addresses(_ host: String) async throws(DNSError) -> [IPAddress] {
        recorded.withLock { $0.lookups.append(host) }
        guard let addresses = hosts[host] else { throw DNSError(.nxdomain, "\(host) does not exist") }
        return addresses
    }

    func advice(for host: String) -> WatchAdvice { WatchAdvice() }

    func count(_ event: ProxyEvent) {
        recorded.withLock { recorded in
            switch event {
            case .outcome(let outcome): recorded.outcomes.append(outcome)
            case .tunnels(let delta): recorded.tunnels += delta
            case .bytes, .connectionsOpen: break
            }
        }
    }
}
