import DNSCore

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

extension DNSTransport {
    /// Whether messages on this transport are encrypted (DoT, DoH): only those are padded.
    package var isEncrypted: Bool { self == .dot || self == .doh }

    /// `response` to `query` as this transport sends it: padded to a multiple of 468 bytes on DoT
    /// and DoH when the query carried a Padding option (RFC 8467 §4.1, ``/DNSCore/EDNSPadding``),
    /// as it is otherwise — plain DNS is never padded.
    package func outgoing(_ response: [UInt8], answering query: DNSQuery) -> [UInt8] {
        guard isEncrypted, query.edns?.padded == true else { return response }
        return EDNSPadding.padded(response, toMultipleOf: EDNSPadding.responseBlock)
    }
}
