import Foundation

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

    /// libcurl's `message` with every pin name of `resolve` replaced by the addresses it stands for
    /// ("Failed to connect to 127.0.0.9,127.0.0.1 port 443", not to `pin-….httpdns.invalid`).
    package static func readable(_ message: String, resolve: [String]) -> String {
        guard message.contains(".httpdns.invalid") else { return message }
        var message = message
        for entry in resolve {
            let fields = entry.dropFirst(entry.hasPrefix("+") ? 1 : 0).split(separator: ":", maxSplits: 2)
            guard fields.count == 3, fields[0].hasSuffix(".httpdns.invalid") else { continue }
            message = message.replacingOccurrences(of: String(fields[0]), with: String(fields[2]))
        }
        return message
    }

    /// RESOLVE entries mapping each IP literal among the URL's host and the connect-to targets to
    /// itself. libcurl passes even a literal through its resolver-start hook; with the literal in
    /// its DNS cache it looks nothing up, so the hook can refuse every real lookup. Runs for every
    /// transfer on the engine's thread: a scan over bytes that allocates only for a literal.
    static func literalEntries(url: String, connectTo: [String]) -> [String] {
        var entries: [String] = []
        if let entry = urlLiteralEntry(url) { entries.append(entry) }
        for entry in connectTo where !entry.hasSuffix(".httpdns.invalid") {
            if let literal = connectTargetLiteralEntry(entry) { entries.append(literal) }
        }
        return entries
    }

    /// `+host:port:host` when the URL's host is an IP literal.
    private static func urlLiteralEntry(_ url: String) -> String? {
        // Called for every transfer (a DoH GET's URL carries the query): a plain scan of the
        // first bytes, not Foundation's generic search (a visible share of the engine thread's time
        // in the profile: docs/benchmarks-history.md).
        let bytes = Array(url.utf8.prefix(300))
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), bytes[colon...].starts(with: "://".utf8) else { return nil }
        let defaultPort = colon == 4 ? 80 : 443  // "http" or "https"
        var index = colon + 3
        let authorityEnd =
            bytes[index...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? bytes.endIndex
        if let at = bytes[index..<authorityEnd].lastIndex(of: UInt8(ascii: "@")) { index = at + 1 }
        return literalEntry(bytes[index..<authorityEnd], defaultPort: defaultPort)
    }

    /// `+host:port:host` when the connect-to target of `host:port:target:port` is an IP literal.
    private static func connectTargetLiteralEntry(_ entry: String) -> String? {
        let bytes = Array(entry.utf8)
        var index = bytes.startIndex
        // Skip host:port (the host possibly bracketed).
        if bytes.first == UInt8(ascii: "["), let close = bytes.firstIndex(of: UInt8(ascii: "]")) { index = close + 1 }
        guard let first = bytes[index...].firstIndex(of: UInt8(ascii: ":")),
            let second = bytes[(first + 1)...].firstIndex(of: UInt8(ascii: ":"))
        else { return nil }
        return literalEntry(bytes[(second + 1)...], defaultPort: nil)
    }

    /// For `host[:port]` bytes whose host is an IPv4 or bracketed IPv6 literal.
    private static func literalEntry(_ authority: ArraySlice<UInt8>, defaultPort: Int?) -> String? {
        var hostEnd: Int
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostEnd = close + 1
        } else {
            hostEnd = authority.firstIndex(of: UInt8(ascii: ":")) ?? authority.endIndex
            let host = authority[authority.startIndex..<hostEnd]
            guard !host.isEmpty, host.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == UInt8(ascii: ".") }),
                host.filter({ $0 == UInt8(ascii: ".") }).count == 3
            else { return nil }
        }
        let host = String(decoding: authority[authority.startIndex..<hostEnd], as: UTF8.self)
        let rest = authority[hostEnd...]
        let port = rest.first == UInt8(ascii: ":") ? Int(String(decoding: rest.dropFirst(), as: UTF8.self)) : defaultPort
        guard let port else { return nil }
        return "+\(host):\(port):\(host)"
    }
}
