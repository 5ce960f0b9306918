import DNSStubServer
import DNSWire
import DaemonHTTP
import DaemonListening
import Foundation
import NIOCore
import ResolverConfig

/// What a request may cost and who may make it — `limits`, `auth_token` and `protect_dns_query` of
/// the config — decided the same way for HTTP/1.1 and HTTP/2, before anything is routed.
///
/// The checks, in order: the request target's length (414); the bearer token on every path but
/// `/healthz` (and `/dns-query` unless protected), unknown paths included, so that they reveal
/// nothing (401 with `WWW-Authenticate`); a method the path does not take (405 with `Allow`); a
/// declared body over the limit (413). The concurrency limit (503 with `Retry-After: 1`) is the
/// gateway's, since a cached DoH answer holds nothing and is exempt.
struct RequestPolicy: Sendable {
    var limits: DaemonSettings.Limits
    var authToken: String?
    var protectDNSQuery: Bool

    init(_ config: ConfigFile) {
        limits = config.daemon.limits
        authToken = config.daemon.authToken
        protectDNSQuery = config.daemon.protectDNSQuery
    }

    /// The daemon's paths and the methods each takes.
    static let routes: [String: [String]] = [
        "/healthz": ["GET"], "/readyz": ["GET"], "/metrics": ["GET"], "/v1/resolve": ["GET"], "/v1/status": ["GET"],
        "/ui": ["GET"], "/dns-query": ["GET", "POST"],
    ]

    /// The refusal of a request head, or nil when it may go on.
    func check(method: String, target: String, contentLength: Int?, authorization: String?) -> HTTPAnswer? {
        let length = target.utf8.count
        guard length <= limits.maxURLLength else {
            return .text(414, "the request target is \(length) bytes; the limit is \(limits.maxURLLength)\n")
        }
        let path = Self.path(of: target)
        if let token = authToken, Self.isProtected(path, protectDNSQuery: protectDNSQuery) {
            guard let given = authorization, Self.credentials(given, match: token) else {
                let reason = authorization == nil ? "a bearer token is required" : "the bearer token is wrong"
                // The status page asks a browser for the token (Basic); the browser then sends it with
                // the page's own requests to the API, which takes it too.
                let challenge = path == "/ui" ? "Basic realm=\"resolve-daemon\", charset=\"UTF-8\"" : "Bearer realm=\"resolve-daemon\""
                return .text(401, reason + "\n", headers: [("www-authenticate", challenge)])
            }
        }
        if let allowed = Self.routes[String(path)], !allowed.contains(method) {
            let list = allowed.joined(separator: ", ")
            return .text(405, "method not allowed; allowed: \(list)\n", headers: [("allow", list)])
        }
        if let contentLength, contentLength > limits.maxBodyBytes {
            return .text(413, HTTPAnswer.bodyOverLimit(declared: contentLength, limit: limits.maxBodyBytes))
        }
        return nil
    }

    /// The refusal of a body that turned out larger than the limit.
    func bodyTooLarge() -> HTTPAnswer {
        .text(413, HTTPAnswer.bodyOverLimit(declared: nil, limit: limits.maxBodyBytes))
    }

    /// The path of a request target, without its query.
    static func path(of target: String) -> Substring {
        let utf8 = target.utf8
        guard let question = utf8.firstIndex(of: UInt8(ascii: "?")) else { return Substring(target) }
        return Substring(utf8[..<question])
    }

    static func isProtected(_ path: Substring, protectDNSQuery: Bool) -> Bool {
        switch path {
        case "/healthz": false
        case DoHRequest.path: protectDNSQuery
        default: true
        }
    }

    /// `Bearer <token>` (RFC 6750 §2.1), or `Basic` with the token as the password and any user name
    /// (RFC 7617: what a browser sends once asked); schemes case-insensitive, the token compared in
    /// time independent of where the first difference is.
    static func credentials(_ header: String, match token: String) -> Bool {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2 else { return false }
        switch parts[0].lowercased() {
        case "bearer":
            return HTTPSyntax.constantTimeEqual(parts[1].utf8, token.utf8)
        case "basic":
            guard parts[1].utf8.count <= 1_024, let decoded = Data(base64Encoded: String(parts[1])),
                let colon = decoded.firstIndex(of: UInt8(ascii: ":"))
            else { return false }
            return HTTPSyntax.constantTimeEqual(decoded[decoded.index(after: colon)...], token.utf8)
        default:
            return false
        }
    }
}

extension HTTPListener.Limits {
    /// The listener's limits from the configuration's `limits:`.
    init(_ limits: DaemonSettings.Limits, drainTimeout: Duration) {
        self.init(
            maxBodyBytes: limits.maxBodyBytes, requestTimeout: TimeAmount(setting: limits.requestTimeout),
            idleTimeout: TimeAmount(setting: limits.idleTimeout), drainTimeout: TimeAmount(setting: drainTimeout))
    }
}
