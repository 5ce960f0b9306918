import DNSCore
import DaemonHTTP
import Foundation

/// Where a proxy request wants to go.
struct ProxyTarget: Sendable, Hashable {
    /// Lowercase, without brackets or a final dot.
    var host: String
    var port: Int

    /// `host:port` of a CONNECT request (RFC 9110 §9.3.6: the port is required), `[v6]:port` for
    /// IPv6 literals; nil for anything else.
    init?(authority: String) {
        let text = authority.lowercased()
        let hostPart: Substring, portPart: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            hostPart = text[text.index(after: text.startIndex)..<close]
            portPart = text[text.index(close, offsetBy: 2)...]
            guard IPAddress(hostPart)?.family == .ipv6 else { return nil }
        } else {
            guard let colon = text.lastIndex(of: ":"), text.firstIndex(of: ":") == colon else { return nil }
            hostPart = text[..<colon]
            portPart = text[text.index(after: colon)...]
        }
        guard let port = Int(portPart), (1...65_535).contains(port), portPart.allSatisfy(\.isNumber) else { return nil }
        self.init(host: String(hostPart), port: port)
    }

    init?(host: String, port: Int) {
        var host = host
        if host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty else { return nil }
        if IPAddress(host) == nil {
            guard (try? DomainName(host)) != nil else { return nil }
        }
        self.host = host
        self.port = port
    }

    var isLiteral: Bool { IPAddress(host) != nil }
}

/// A request the proxy refuses, with the status a browser or curl can show and the reason.
struct ProxyRefusal: Error, Sendable, Equatable {
    var status: Int
    var reason: String
    /// The `DNSError` code when resolution failed (also sent as `X-HTTPDNS-Error`).
    var dnsCode: String?

    static func policy(_ reason: String) -> ProxyRefusal { ProxyRefusal(status: 403, reason: reason) }

    /// 502 for a failed resolution, with the `DNSError` code.
    static func resolution(of host: String, failed error: DNSError) -> ProxyRefusal {
        ProxyRefusal(status: 502, reason: "resolving \(host) failed: \(error.code.rawValue): \(error.message)", dnsCode: error.code.rawValue)
    }

    /// The response's body: the status and the reason, one line.
    var body: String { "\(status) \(reason)\n" }

    /// The response's header fields, in order (both of the proxy's paths send these).
    var headerFields: [(name: String, value: String)] {
        var fields = [("Content-Type", "text/plain; charset=utf-8"), ("Connection", "close")]
        if status == 407 { fields.append(("Proxy-Authenticate", "Basic realm=\"resolve proxy\"")) }
        if let dnsCode { fields.append(("X-HTTPDNS-Error", dnsCode)) }
        // The reason in a header too: clients show a CONNECT refusal's headers, rarely its body.
        fields.append(("X-HTTPDNS-Reason", String(reason.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7f }.prefix(300))))
        fields.append(("Content-Length", String(body.utf8.count)))
        return fields
    }

    /// The whole HTTP/1.1 response, for the relay that writes it to the socket itself.
    func response(reasonPhrase: String) -> String {
        "HTTP/1.1 \(status) \(reasonPhrase)\r\n" + headerFields.map { "\($0.name): \($0.value)\r\n" }.joined() + "\r\n" + body
    }
}

/// The proxy's decisions, pure: authentication, target policy, destination filtering.
struct ProxyPolicy: Sendable {
    let settings: ProxySettings

    /// Whether `header` (the `Proxy-Authorization` value) names a configured user and password.
    /// Without `auth_file`, everyone may use the proxy.
    func authorizes(_ header: String?) -> Bool {
        guard let users = settings.users else { return true }
        guard let header, header.lowercased().hasPrefix("basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8), let colon = text.firstIndex(of: ":")
        else { return false }
        guard let expected = users[String(text[..<colon])] else { return false }
        return HTTPSyntax.constantTimeEqual(expected.utf8, text[text.index(after: colon)...].utf8)
    }

    /// The refusal for `target`, or nil when policy lets it through. Plain `http://` requests may
    /// also go to port 80.
    func refusal(for target: ProxyTarget, plainHTTP: Bool) -> ProxyRefusal? {
        let ports = plainHTTP ? settings.connectPorts + [80] : settings.connectPorts
        guard ports.contains(target.port) else {
            return .policy("port \(target.port) is not allowed (connect_ports: \(settings.connectPorts.map(String.init).joined(separator: ", ")))")
        }
        if !Self.admits(target, allow: settings.allow, deny: settings.deny) {
            return .policy("\(target.host) is not allowed by the proxy's allow/deny lists")
        }
        return nil
    }

    /// The allow and deny lists applied to a target: names by ``HostPattern``; an IP literal only by
    /// an entry that is the same address (any spelling, `[v6]` too). An allow list that names hosts
    /// admits no literal it does not list: otherwise `CONNECT 192.0.2.1:443` would pass every
    /// allow list.
    static func admits(_ target: ProxyTarget, allow: [String], deny: [String]) -> Bool {
        guard let literal = IPAddress(target.host) else { return HostPattern.admits(target.host, allow: allow, deny: deny) }
        func lists(_ patterns: [String]) -> Bool {
            patterns.contains { pattern in
                var text = Substring(pattern)
                if text.hasPrefix("["), text.hasSuffix("]") { text = text.dropFirst().dropLast() }
                return IPAddress(text) == literal
            }
        }
        if lists(deny) { return false }
        return allow.isEmpty || lists(allow)
    }

    /// The addresses that may be dialled: private, loopback and link-local ones only with
    /// `allow_private_destinations`.
    func dialable(_ addresses: [IPAddress]) -> [IPAddress] {
        settings.allowPrivateDestinations ? addresses : addresses.filter { $0.specialPurposeRange == nil }
    }

    /// What may be dialled of `host`'s trusted `addresses`, in order: the watcher's word heeded
    /// (``heed(_:hijacked:ranking:)``), private destinations dropped unless allowed; a 403 when
    /// nothing is left.
    func destinations(_ addresses: [IPAddress], host: String, advice: WatchAdvice) -> Result<[IPAddress], ProxyRefusal> {
        let dialable = dialable(Self.heed(addresses, hijacked: advice.hijacked, ranking: advice.ranking))
        guard !dialable.isEmpty else { return .failure(.policy("\(host) resolves only to private, loopback or link-local addresses")) }
        return .success(dialable)
    }

    /// The watcher's word on a watched host: never an address it holds as hijacked (possible when
    /// `fallback: system` answered), and the healthy addresses in its ranking's order first.
    static func heed(_ addresses: [IPAddress], hijacked: Set<IPAddress>, ranking: [IPAddress]) -> [IPAddress] {
        let allowed = addresses.filter { !hijacked.contains($0) }
        let ranked = ranking.filter { allowed.contains($0) }
        return ranked + allowed.filter { !ranked.contains($0) }
    }
}
