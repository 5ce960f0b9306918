import DNSCore

/// Well-known public DoH resolvers with their bootstrap addresses, so none of them needs DNS.
///
/// Addresses are the operators' published anycast addresses. These reach the public internet: never
/// use them in tests or demos on machines without it.
public enum ResolverPreset: String, Sendable, CaseIterable {
    case cloudflare
    case google
    case quad9
    case alidns
    case dnspod
    /// Cloudflare's JSON API.
    case cloudflareJSON = "cloudflare-json"
    /// Google's JSON API.
    case googleJSON = "google-json"

    /// The endpoint with its bootstrap addresses.
    public var endpoint: UpstreamEndpoint {
        // The literals below are fixed and valid; a failure here is a programming error.
        // swiftlint:disable:next force_try
        try! makeEndpoint()
    }

    private func makeEndpoint() throws(DNSError) -> UpstreamEndpoint {
        switch self {
        case .cloudflare:
            return try .doh(
                "https://cloudflare-dns.com/dns-query",
                bootstrap: ["1.1.1.1", "1.0.0.1", "2606:4700:4700::1111", "2606:4700:4700::1001"])
        case .google:
            return try .doh(
                "https://dns.google/dns-query",
                bootstrap: ["8.8.8.8", "8.8.4.4", "2001:4860:4860::8888", "2001:4860:4860::8844"])
        case .quad9:
            return try .doh(
                "https://dns.quad9.net/dns-query",
                bootstrap: ["9.9.9.9", "149.112.112.112", "2620:fe::fe", "2620:fe::9"])
        case .alidns:
            return try .doh(
                "https://dns.alidns.com/dns-query",
                bootstrap: ["223.5.5.5", "223.6.6.6", "2400:3200::1", "2400:3200:baba::1"])
        case .dnspod:
            return try .doh("https://doh.pub/dns-query", bootstrap: ["1.12.12.12", "120.53.53.53"])
        case .cloudflareJSON:
            return try .json(
                "https://cloudflare-dns.com/dns-query",
                bootstrap: ["1.1.1.1", "1.0.0.1", "2606:4700:4700::1111", "2606:4700:4700::1001"])
        case .googleJSON:
            return try .json(
                "https://dns.google/resolve",
                bootstrap: ["8.8.8.8", "8.8.4.4", "2001:4860:4860::8888", "2001:4860:4860::8844"])
        }
    }
}
