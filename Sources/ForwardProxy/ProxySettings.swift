/// What the proxy is configured with: the daemon maps its configuration's `proxy:` to it (the
/// file's format is `ResolverConfig`'s business, not the proxy's).
package struct ProxySettings: Sendable, Hashable {
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
