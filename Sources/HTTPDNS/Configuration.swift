import DNSCore
import DNSSEC
import Foundation

/// Split DNS: names under `zones` are asked only of this zone's upstreams — never of the trusted
/// ones — and no other name is asked of them; the longest matching zone wins.
///
/// Answers from a forward zone may be private addresses (the rebinding guard is off for them) and
/// are not DNSSEC-validated (an internal zone has no chain from the root, as unbound's
/// `domain-insecure`).
///
/// ```swift
/// let corp = ForwardZone(zones: [try DomainName("corp.example")], plainDNS: ["10.0.0.53"])
/// ```
public struct ForwardZone: Sendable, Hashable {
    public var zones: [DomainName]
    /// DoH or JSON resolvers for these zones.
    public var upstreams: [UpstreamEndpoint]
    /// Plain DNS servers (`IP[:port]`), each one upstream, reached through the resolver's
    /// `plainDNS` factory (`SystemResolver`, c-ares).
    public var plainDNS: [String]

    public init(zones: [DomainName], upstreams: [UpstreamEndpoint] = [], plainDNS: [String] = []) {
        self.zones = zones
        self.upstreams = upstreams
        self.plainDNS = plainDNS
    }
}

/// A trusted resolver: where it is, how to reach it without DNS, and how to verify it.
///
/// ```swift
/// let upstream = try UpstreamEndpoint.doh("https://dns.example.test/dns-query",
///                                         bootstrap: ["192.0.2.53", "2001:db8::53"])
/// ```
public struct UpstreamEndpoint: Sendable, Hashable {
    /// The protocol spoken to the resolver.
    public enum Kind: Sendable, Hashable {
        /// RFC 8484 DNS over HTTPS with the given method.
        case doh(DoHMethod)
        /// The JSON API (`application/dns-json`, `?name=&type=`).
        case json
        /// RFC 7858 DNS over TLS (``UpstreamEndpoint/dot(_:bootstrap:tlsName:pinnedPublicKey:)``),
        /// identified as `tls://host:port`.
        case dot
        /// A commercial HTTPDNS service's own API (``UpstreamEndpoint/vendor(_:endpoint:bootstrap:tlsName:clientIP:batchSize:allowPlainHTTP:)``).
        case vendor(VendorAPI)
    }

    /// RFC 8484 §4.1: GET (`?dns=` base64url, cache-friendly) or POST (`application/dns-message`).
    public enum DoHMethod: String, Sendable, Hashable, CaseIterable {
        case get, post
    }

    public var kind: Kind
    /// The `https` URL of the endpoint, as users write it.
    public let url: String
    /// The URL's host name (or IP literal, without brackets).
    public let host: String
    public let port: Int
    /// Addresses for ``host``, so that reaching the resolver needs no DNS. Required unless the
    /// host is an IP literal.
    public var bootstrap: [IPAddress]
    /// SPKI pins, `sha256//BASE64` (`;`-separated for several), checked after normal validation.
    public var pinnedPublicKey: String?
    /// The name the server's certificate is checked against, when not ``host`` (vendor services
    /// reached by one of several service IPs). Default: the host.
    public var tlsName: String?
    /// The client address sent for ECS-accurate answers (vendor services). Default: none.
    public var clientIP: IPAddress?
    /// SHA-256 digests of DER `tbsCertificate`s (a DNS stamp's hashes): one certificate of the chain
    /// the server presents must have one of them, checked after normal validation on each DoT or
    /// DoH connection before any query is sent (a DoH server without HTTP/2 is then refused, as its
    /// HTTP/1.1 transfers would go unchecked). Default: none.
    public var certificateHashes: [[UInt8]] = []
    /// The unencrypted resolver that designated this one by DDR (RFC 9462 §4.2, verified
    /// discovery): the server's certificate must also name this IP address (subjectAltName),
    /// checked like ``certificateHashes`` on each DoT or DoH connection before any query (DoH on
    /// HTTP/2 only). Default: none.
    public var designatingResolver: IPAddress?
    /// Whether each connection's verified chain is checked beyond the name: certificate hashes, or
    /// the designating resolver's address.
    package var checksChainOnConnection: Bool { !certificateHashes.isEmpty || designatingResolver != nil }
    /// Names per batch request (vendor services; 1 for DoH and JSON, which ask one name at a time).
    public var batchSize = 1

    /// - Throws: ``/DNSCore/DNSError`` (``/DNSCore/DNSError/Code/invalidConfiguration``) for a URL that is not
    ///   `https://host[:port]/path`.
    public init(
        _ kind: Kind, url: String, bootstrap: [IPAddress] = [],
        pinnedPublicKey: String? = nil
    ) throws(DNSError) {
        try self.init(kind, url: url, bootstrap: bootstrap, pinnedPublicKey: pinnedPublicKey, allowsPlainHTTP: false)
    }

    init(
        _ kind: Kind, url: String, bootstrap: [IPAddress], pinnedPublicKey: String?, allowsPlainHTTP: Bool
    ) throws(DNSError) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else {
            throw DNSError(.invalidConfiguration, "'\(url)' is not a URL")
        }
        guard scheme == "https" || (scheme == "http" && allowsPlainHTTP) || (scheme == "tls" && kind == .dot) else {
            if scheme == "http", case .vendor = kind {
                throw DNSError(
                    .invalidConfiguration,
                    "'\(url)': plain HTTP sends names and answers in the clear; use https, an encrypting mode, or allow_plain_http: true")
            }
            throw DNSError(.invalidConfiguration, "'\(url)': trusted resolvers must use https (no plaintext fallback)")
        }
        guard components.user == nil, components.password == nil, components.fragment == nil else {
            throw DNSError(.invalidConfiguration, "'\(url)': credentials and fragments are not allowed")
        }
        if case let .vendor(api) = kind { try VendorKeys.validate(api) }
        if kind == .dot {
            guard scheme == "tls", components.path.isEmpty || components.path == "/", components.query == nil else {
                throw DNSError(.invalidConfiguration, "'\(url)': a DoT server is host[:port], without a path")
            }
        }
        let port = components.port ?? (scheme == "http" ? 80 : scheme == "tls" ? 853 : 443)
        guard (1...65535).contains(port) else {
            throw DNSError(.invalidConfiguration, "'\(url)': port \(port) is out of range")
        }
        var bareHost = host
        if bareHost.hasPrefix("["), bareHost.hasSuffix("]") { bareHost = String(bareHost.dropFirst().dropLast()) }
        if IPAddress(bareHost) == nil {
            do { _ = try DomainName(bareHost) } catch {
                throw DNSError(.invalidConfiguration, "'\(url)': \(error.message)")
            }
        }
        self.kind = kind
        self.url = url
        self.host = bareHost.lowercased()
        self.port = port
        self.bootstrap = bootstrap
        self.pinnedPublicKey = pinnedPublicKey
    }

    /// An RFC 8484 resolver.
    public static func doh(
        _ url: String, bootstrap: [String] = [], method: DoHMethod = .get,
        pinnedPublicKey: String? = nil
    ) throws(DNSError) -> UpstreamEndpoint {
        try UpstreamEndpoint(.doh(method), url: url, bootstrap: try parse(bootstrap), pinnedPublicKey: pinnedPublicKey)
    }

    /// A JSON API resolver.
    public static func json(
        _ url: String, bootstrap: [String] = [],
        pinnedPublicKey: String? = nil
    ) throws(DNSError) -> UpstreamEndpoint {
        try UpstreamEndpoint(.json, url: url, bootstrap: try parse(bootstrap), pinnedPublicKey: pinnedPublicKey)
    }

    /// An RFC 7858 DNS-over-TLS resolver: `host[:port]` (port 853 by default), `[IPv6]:port`, or
    /// `tls://host[:port]`.
    /// - Parameters:
    ///   - address: `host[:port]`, `[IPv6]:port` or `tls://host[:port]`.
    ///   - bootstrap: the host's addresses, required unless the host is an IP literal.
    ///   - tlsName: the name the certificate is checked against when the host is not it (a server
    ///     given by its address: `127.0.0.1:853` with `dns.example`, unbound's `@853#name`).
    ///   - pinnedPublicKey: SPKI pins, `sha256//BASE64`, checked after normal validation.
    /// - Returns: the endpoint, identified as `tls://host:port`.
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` for an
    ///   address that is not `host[:port]` or a `tls_name` that is not a name or address.
    public static func dot(
        _ address: String, bootstrap: [String] = [], tlsName: String? = nil, pinnedPublicKey: String? = nil
    ) throws(DNSError) -> UpstreamEndpoint {
        var text = address.lowercased().hasPrefix("tls://") ? String(address.dropFirst(6)) : address
        if let ip = IPAddress(text), ip.family == .ipv6 { text = "[\(text)]" }
        guard let parsed = URLComponents(string: "tls://" + text), let host = parsed.host, !host.isEmpty else {
            throw DNSError(.invalidConfiguration, "'\(address)' is not a DoT server (host[:port])")
        }
        let port = parsed.port ?? 853
        var endpoint = try UpstreamEndpoint(
            .dot, url: "tls://\(host):\(port)", bootstrap: try parse(bootstrap), pinnedPublicKey: pinnedPublicKey, allowsPlainHTTP: false)
        guard parsed.path.isEmpty, parsed.query == nil else {
            throw DNSError(.invalidConfiguration, "'\(address)': a DoT server is host[:port], without a path")
        }
        if let tlsName {
            if IPAddress(tlsName) == nil {
                do { _ = try DomainName(tlsName) } catch {
                    throw DNSError(.invalidConfiguration, "tls_name '\(tlsName)': \(error.message)")
                }
            }
            endpoint.tlsName = tlsName.lowercased()
        }
        return endpoint
    }

    static func parse(_ addresses: [String]) throws(DNSError) -> [IPAddress] {
        var result: [IPAddress] = []
        for text in addresses {
            guard let address = IPAddress(text) else {
                throw DNSError(.invalidConfiguration, "bootstrap address '\(text)' is not an IP address")
            }
            result.append(address)
        }
        return result
    }

    /// Whether the host is an IP literal, reachable without bootstrap.
    public var hostIsLiteral: Bool { IPAddress(host) != nil }

    /// Whether the endpoint is reached over plain HTTP (a vendor API mode; see docs/commercial-apis.md).
    public var isPlainHTTP: Bool { url.lowercased().hasPrefix("http:") }
}

/// Where to ask: the trusted resolvers and the trust anchors (hickory-dns's `ResolverConfig`).
public struct HTTPDNSConfiguration: Sendable, Hashable {
    /// Trusted resolvers in order of preference.
    public var upstreams: [UpstreamEndpoint]
    /// Extra trust anchors (PEM file) for the resolvers, added to the system's. Default: none.
    public var caFile: String?
    /// Names resolved in the background as soon as the resolver is made (pre-resolve), so their
    /// first real lookups hit the cache. Default: none.
    public var preresolve: [String]
    /// DNSSEC validation of the answers (policy, trust anchors). Default: off.
    public var dnssec: DNSSECSettings
    /// Names answered locally before any lookup: records, hosts files and block lists. Default: none.
    public var localZone: LocalZone?
    /// Split DNS: zones whose names go only to their own upstreams. Default: none.
    public var forwardZones: [ForwardZone]

    public init(
        upstreams: [UpstreamEndpoint], caFile: String? = nil, preresolve: [String] = [], dnssec: DNSSECSettings = .init(),
        localZone: LocalZone? = nil, forwardZones: [ForwardZone] = []
    ) {
        self.upstreams = upstreams
        self.caFile = caFile
        self.preresolve = preresolve
        self.dnssec = dnssec
        self.localZone = localZone
        self.forwardZones = forwardZones
    }

    /// The built-in public resolvers (Cloudflare, Google, Quad9), each with bootstrap addresses.
    public static var publicDefault: HTTPDNSConfiguration {
        HTTPDNSConfiguration(upstreams: [ResolverPreset.cloudflare, .google, .quad9].map(\.endpoint))
    }

    /// Checks that every upstream can be reached without DNS and that the CA file is readable.
    public func validate() throws(DNSError) {
        guard !upstreams.isEmpty else {
            throw DNSError(.invalidConfiguration, "no trusted upstream is configured")
        }
        var zones = Set<DomainName>()
        for forward in forwardZones {
            guard !forward.zones.isEmpty, !forward.upstreams.isEmpty || !forward.plainDNS.isEmpty else {
                throw DNSError(.invalidConfiguration, "a forward zone needs zones and at least one upstream")
            }
            for zone in forward.zones {
                guard zone != .root else {
                    throw DNSError(.invalidConfiguration, "the root cannot be a forward zone: every name would leave the trusted upstreams")
                }
                guard zones.insert(zone).inserted else { throw DNSError(.invalidConfiguration, "forward zone \(zone) is given twice") }
            }
        }
        for upstream in upstreams + forwardZones.flatMap(\.upstreams) where !upstream.hostIsLiteral && upstream.bootstrap.isEmpty {
            throw DNSError(
                .invalidConfiguration,
                "upstream \(upstream.url) has no bootstrap address for \(upstream.host); "
                    + "add one (--bootstrap \(upstream.host)=IP) so that reaching it needs no DNS")
        }
        for upstream in upstreams + forwardZones.flatMap(\.upstreams) where upstream.checksChainOnConnection {
            switch upstream.kind {
            case .doh, .dot: continue
            case .json, .vendor:
                throw DNSError(
                    .invalidConfiguration,
                    "upstream \(upstream.url) has certificate hashes or a designating resolver, which are checked on DoH and DoT connections only")
            }
        }
        if let caFile {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw DNSError(.invalidConfiguration, "CA file '\(caFile)' cannot be read")
            }
            // libcurl reads the file only when a transfer starts: a file that is not PEM would
            // pass here and then fail every lookup.
            guard let data = FileManager.default.contents(atPath: caFile), Self.pemCertificateCount(in: data) > 0 else {
                throw DNSError(.invalidConfiguration, "CA file '\(caFile)' holds no PEM certificate")
            }
        }
    }

    /// How many PEM `CERTIFICATE` blocks in `data` decode to DER (an ASN.1 SEQUENCE).
    static func pemCertificateCount(in data: Data) -> Int {
        guard data.count <= 16 << 20, let text = String(data: data, encoding: .utf8) ?? String(data: data, encoding: .isoLatin1) else { return 0 }
        let begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----"
        var count = 0
        var rest = text[...]
        while let start = rest.range(of: begin), let stop = rest.range(of: end, range: start.upperBound..<rest.endIndex) {
            let body = rest[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
            if let der = Data(base64Encoded: String(body)), der.count > 64, der.first == 0x30 { count += 1 }
            rest = rest[stop.upperBound...]
        }
        return count
    }
}

/// How to ask: budgets, policies and cache behaviour, each documented with its default.
public typealias HTTPDNSOptions = ResolverOptions
