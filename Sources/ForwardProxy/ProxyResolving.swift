import DNSCore

/// What the forward proxy needs of the daemon: its settings, trusted addresses, the watcher's word
/// on a host, and somewhere to count. All both of its paths (the splice relay, the NIO handlers)
/// see of it.
package protocol ProxyResolving: Sendable {
    /// `proxy:` now: read per connection, so a SIGHUP applies to new ones.
    var settings: ProxySettings { get }
    /// The time a client has to send its request head (`limits.request_timeout`).
    var headTimeout: Duration { get }
    /// `host`'s trusted addresses when they are known without waiting (a fresh cached answer).
    func addressesWithoutWaiting(_ host: String) -> [IPAddress]?
    /// `host`'s trusted addresses, looked up.
    func addresses(_ host: String) async throws(DNSError) -> [IPAddress]
    /// The watcher's word on `host` (nothing for a host it does not watch).
    func advice(for host: String) -> WatchAdvice
    func count(_ event: ProxyEvent)
}

/// The watcher's word on a watched host: addresses it holds as hijacked (possible when
/// `fallback: system` answered), and its healthy addresses, best first.
package struct WatchAdvice: Sendable, Equatable {
    package var hijacked: Set<IPAddress>
    package var ranking: [IPAddress]

    package init(hijacked: Set<IPAddress> = [], ranking: [IPAddress] = []) {
        self.hijacked = hijacked
        self.ranking = ranking
    }
}

/// What the proxy counts.
package enum ProxyEvent: Sendable {
    /// A request's outcome: `tunnel`, `forwarded`, a status, `head_timeout`, `connection_limit`.
    case outcome(String)
    /// Bytes relayed, towards the upstream or back to the client.
    case bytes(upstream: Bool, Int)
    /// Tunnels opened (+1) or closed (-1).
    case tunnels(delta: Int)
    /// The connections open now, after a change.
    case connectionsOpen(Int)
}
