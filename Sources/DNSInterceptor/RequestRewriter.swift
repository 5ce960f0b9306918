import DNSCore
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// What another HTTP stack needs to send a request to a resolved address while keeping the name for
/// TLS: for stacks that can set SNI and the `Host` header themselves (AsyncHTTPClient's
/// `dnsOverride`, swift-nio-ssl's `serverHostname`, curl's `--connect-to`).
///
/// Never send to ``ipURL`` without setting ``serverName`` as the TLS server name and verifying the
/// certificate against it: an IP URL alone makes a stack send no SNI and check the certificate
/// against the IP.
public struct RewrittenRequest: Sendable, Hashable {
    /// The URL as given.
    public var originalURL: URL
    /// The URL with its host replaced by the chosen address (IPv6 in brackets); path, query and
    /// port unchanged.
    public var ipURL: URL
    /// The chosen address; the others follow in ``alternatives``, to try on a connect failure.
    public var address: IPAddress
    public var alternatives: [IPAddress]
    /// The `Host` header to send: the name, with the port when it is not the scheme's default.
    public var hostHeader: String
    /// The TLS server name (SNI) and the name the certificate must be valid for; nil for plain HTTP.
    public var serverName: String?
    /// libcurl's `CURLOPT_CONNECT_TO` entry, `host:port:address:port`.
    public var connectTo: String
    /// libcurl's `CURLOPT_RESOLVE` entry with every address, `host:port:a1,a2`.
    public var curlResolve: String
    /// How the name was resolved.
    public var resolution: Resolution
}

extension RewrittenRequest {
    /// `request` sent to ``ipURL`` with the `Host` header set to the name, for stacks that take a
    /// URLRequest and let the caller set the TLS server name (to ``serverName``) separately.
    public func applied(to request: URLRequest) -> URLRequest {
        var rewritten = request
        rewritten.url = ipURL
        rewritten.setValue(hostHeader, forHTTPHeaderField: "Host")
        return rewritten
    }
}

extension HTTPDNSResolver {
    /// Resolves `request`'s host through the trusted resolvers, as the URL variant does.
    public func rewrite(_ request: URLRequest) async throws(DNSError) -> RewrittenRequest {
        guard let url = request.url else { throw DNSError(.invalidName, "the request has no URL") }
        return try await rewrite(url)
    }

    /// Resolves `url`'s host through the trusted resolvers and says how to reach it by address.
    /// - Throws: ``/DNSCore/DNSError`` when the host cannot be resolved or the URL is not http(s) with a
    ///   host name (IP literals need no rewriting).
    public func rewrite(_ url: URL) async throws(DNSError) -> RewrittenRequest {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = url.host, !host.isEmpty
        else {
            throw DNSError(.invalidName, "'\(url.absoluteString)' is not an http(s) URL with a host name")
        }
        guard IPAddress(host) == nil, !host.hasPrefix("[") else {
            throw DNSError(.invalidName, "'\(host)' is already an address; nothing to rewrite")
        }
        let resolution = try await resolve(host)
        let ordered = HTTPDNSClient.interleaved(resolution.addresses).map(\.ip)
        guard let address = ordered.first else { throw DNSError(.nodata, "\(host) has no addresses") }
        let defaultPort = scheme == "https" ? 443 : 80
        let port = url.port ?? defaultPort
        var components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        components?.host = address.family == .ipv6 ? "[\(address)]" : "\(address)"
        guard let ipURL = components?.url else {
            throw DNSError(.invalidName, "cannot rewrite '\(url.absoluteString)'")
        }
        return RewrittenRequest(
            originalURL: url, ipURL: ipURL, address: address, alternatives: Array(ordered.dropFirst()),
            hostHeader: url.port.map { $0 == defaultPort ? host : "\(host):\($0)" } ?? host,
            serverName: scheme == "https" ? host : nil,
            connectTo: "\(host):\(port):\(address.urlHost):\(port)",
            curlResolve: "\(host):\(port):" + ordered.map(\.urlHost).joined(separator: ","),
            resolution: resolution)
    }
}
