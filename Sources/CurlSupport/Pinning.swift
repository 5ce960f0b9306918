/// The one way a transfer is sent to addresses that HTTPDNS chose: DoH upstreams' bootstrap
/// addresses, the HTTP client's resolved origins, and the hijack probes.
///
/// **The rule: never give libcurl an address for a real name.** `CURLOPT_RESOLVE host:port:ip`
/// puts the address in the multi handle's shared DNS cache, where every later transfer to
/// host:port finds it, and libcurl reuses connections by host and port: a probe of a hijacked
/// address would leave both behind for the next fetch of the same name.
///
/// Instead the URL keeps its host (SNI, `Host` and certificate checks on the name) and
/// `CURLOPT_CONNECT_TO` sends the connection to a *pin name* that stands for exactly these
/// addresses, `pin-<hash>.httpdns.invalid`, which `CURLOPT_RESOLVE` maps to them:
/// - a pin name always means the same addresses, so nothing in the DNS cache can mislead;
/// - libcurl matches connections on the connect-to name too, so a transfer reuses only a
///   connection made to its own address set;
/// - libcurl still races the addresses (Happy Eyeballs across families).
/// The entries expire like any DNS entry (`+` prefix), and should one be gone when a transfer
/// connects, the transfer fails rather than ask the system's DNS
/// (``CurlRequest/allowsNameResolution`` is false by default).
package enum Pinning {
    /// The options that pin `host:port` to `addresses` (IPv6 in brackets, as URLs write them).
    package static func pin(host: String, port: Int, to addresses: [String]) -> (connectTo: [String], resolve: [String]) {
        guard !addresses.isEmpty else { return ([], []) }
        let name = pinName(port: port, addresses: addresses)
        return (["\(host):\(port):\(name):\(port)"], ["+\(name):\(port):\(addresses.joined(separator: ","))"])
    }

    /// `pin-<64-bit FNV-1a of the port and the ordered addresses>.httpdns.invalid` (RFC 6761: no
    /// such name exists anywhere).
    static func pinName(port: Int, addresses: [String]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "\(port)|\(addresses.joined(separator: ","))".utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "pin-" + String(repeating: "0", count: 16 - hex.count) + hex + ".httpdns.invalid"
    }

    /// RESOLVE entries mapping each IP literal among the URL's host and the connect-to targets to
    /// itself. libcurl passes even a literal through its resolver-start hook; with the literal in
    /// its DNS cache it looks nothing up, so the hook can refuse every real lookup.
    static func literalEntries(url: String, connectTo: [String]) -> [String] {
        var entries: [String] = []
        if let (host, port) = hostAndPort(of: url), isLiteral(host) { entries.append("+\(host):\(port):\(host)") }
        for entry in connectTo {
            // host:port:connect-host:connect-port, the connect host in brackets when IPv6.
            guard let target = connectTarget(of: entry), isLiteral(target.host) else { continue }
            entries.append("+\(target.host):\(target.port):\(target.host)")
        }
        return entries
    }

    private static func isLiteral(_ host: String) -> Bool {
        if host.hasPrefix("[") { return host.hasSuffix("]") }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }
    }

    /// The host (IPv6 in brackets) and port of an http(s) URL.
    private static func hostAndPort(of url: String) -> (String, Int)? {
        guard let schemeEnd = url.range(of: "://") else { return nil }
        let scheme = url[..<schemeEnd.lowerBound].lowercased()
        var authority = url[schemeEnd.upperBound...]
        if let end = authority.firstIndex(where: { $0 == "/" || $0 == "?" || $0 == "#" }) { authority = authority[..<end] }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        let defaultPort = scheme == "http" ? 80 : 443
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            let host = String(authority[...close])
            let rest = authority[authority.index(after: close)...]
            return (host, rest.hasPrefix(":") ? Int(rest.dropFirst()) ?? defaultPort : defaultPort)
        }
        let parts = authority.split(separator: ":", maxSplits: 1)
        guard let host = parts.first else { return nil }
        return (String(host), parts.count > 1 ? Int(parts[1]) ?? defaultPort : defaultPort)
    }

    private static func connectTarget(of entry: String) -> (host: String, port: Int)? {
        // Skip the first host:port (the first host may be empty or bracketed).
        var rest = Substring(entry)
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") { rest = rest[rest.index(after: close)...] }
        guard let first = rest.firstIndex(of: ":") else { return nil }
        rest = rest[rest.index(after: first)...]
        guard let second = rest.firstIndex(of: ":") else { return nil }
        rest = rest[rest.index(after: second)...]
        let host: String, tail: Substring
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = String(rest[...close])
            tail = rest[rest.index(after: close)...]
        } else {
            guard let colon = rest.firstIndex(of: ":") else { return nil }
            host = String(rest[..<colon])
            tail = rest[colon...]
        }
        guard tail.hasPrefix(":"), let port = Int(tail.dropFirst()) else { return nil }
        return (host, port)
    }
}
