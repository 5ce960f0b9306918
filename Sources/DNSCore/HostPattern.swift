/// Host patterns as the interception policy and the proxy write them: `example.com` matches the
/// name and every name under it, `*.example.com` only the names under it; case and a final dot do
/// not matter.
package enum HostPattern {
    /// Whether `host` (lowercase, no final dot) matches `pattern`.
    package static func matches(_ host: String, _ pattern: String) -> Bool {
        var pattern = pattern.lowercased()
        if pattern.hasSuffix(".") { pattern.removeLast() }
        if pattern.hasPrefix("*.") {
            return host.hasSuffix(pattern.dropFirst())  // ".example.com": names under it only
        }
        return !pattern.isEmpty && (host == pattern || host.hasSuffix("." + pattern))
    }

    /// The deny list first, then the allow list (empty: every host).
    package static func admits(_ host: String, allow: [String], deny: [String]) -> Bool {
        if deny.contains(where: { matches(host, $0) }) { return false }
        return allow.isEmpty || allow.contains(where: { matches(host, $0) })
    }
}
