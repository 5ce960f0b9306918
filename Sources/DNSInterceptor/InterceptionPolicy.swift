import DNSCore
import Foundation
import HTTPDNS

/// Which requests the URLProtocol takes over and sends through HTTPDNS.
///
/// Never intercepted, whatever the lists say: schemes other than http and https, IP literals
/// (nothing to resolve), `localhost` and `*.localhost` (RFC 6761: always loopback), and the
/// resolver's own DoH/JSON endpoints (they are reached by their bootstrap addresses; sending them
/// through the interceptor would make the resolver depend on itself).
public struct HTTPDNSInterceptionPolicy: Sendable, Hashable {
    /// Host patterns to intercept; empty means every host the deny list lets through.
    /// `example.com` matches the name and every name under it; `*.example.com` only names under it.
    public var allow: [String]
    /// Host patterns never intercepted (they go to the next protocol: URLSession's own, system DNS).
    /// The deny list wins over the allow list.
    public var deny: [String]

    public init(allow: [String] = [], deny: [String] = []) {
        self.allow = allow
        self.deny = deny
    }

    /// Whether a request for `url` goes through HTTPDNS, given the resolver's endpoint host names.
    public func intercepts(_ url: URL, resolverHosts: Set<String> = []) -> Bool {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            var host = url.host?.lowercased(), !host.isEmpty
        else { return false }
        if host.hasSuffix(".") { host.removeLast() }
        if host.hasPrefix("[") || IPAddress(host) != nil { return false }
        if host == "localhost" || host.hasSuffix(".localhost") { return false }
        if resolverHosts.contains(host) { return false }
        return HostPattern.admits(host, allow: allow, deny: deny)
    }
}
