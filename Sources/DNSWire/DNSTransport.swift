/// How a query reached the daemon: the one transport type its listeners, rate limit, query log
/// and metrics share (the value is the query log's and the metrics' label).
package enum DNSTransport: String, Sendable, CaseIterable {
    /// The stub over UDP: the only transport whose source address can be spoofed.
    case udp
    /// The stub over TCP.
    case tcp
    /// DNS over TLS (RFC 7858).
    case dot
    /// DNS over HTTPS (RFC 8484), `/dns-query` over HTTP/1.1 or HTTP/2.
    case doh
}
