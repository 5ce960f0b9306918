import Hummingbird

/// `limits:` of the config: the request target's length (414) and the requests handled at once
/// (503 with `Retry-After`, at once, rather than a queue that grows under a flood). Read from the
/// current configuration on every request, so a SIGHUP changes them.
struct LimitsMiddleware<Context: RequestContext>: RouterMiddleware {
    let state: DaemonState

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let limits = state.current.config.limits
        let target = request.head.path?.utf8.count ?? 0
        guard target <= limits.maxURLLength else {
            return Routes.text(.uriTooLong, "the request target is \(target) bytes; the limit is \(limits.maxURLLength)\n")
        }
        let running = state.requestsInFlight.add(1, ordering: .relaxed).newValue
        defer { state.requestsInFlight.subtract(1, ordering: .relaxed) }
        guard running <= limits.maxConcurrentRequests else {
            var response = Routes.text(.serviceUnavailable, "too many requests in flight (limit \(limits.maxConcurrentRequests))\n")
            response.headers[.retryAfter] = "1"
            return response
        }
        return try await next(request, context)
    }
}

/// `auth_token:` every endpoint but `/healthz` (and `/dns-query` unless `protect_dns_query`)
/// requires `Authorization: Bearer <token>`; anything else gets 401 with `WWW-Authenticate`.
struct AuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let state: DaemonState

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let config = state.current.config
        guard let token = config.authToken, Self.isProtected(request.uri.path, protectDNSQuery: config.protectDNSQuery) else {
            return try await next(request, context)
        }
        guard let given = request.headers[.authorization], Self.bearer(given, matches: token) else {
            let reason = request.headers[.authorization] == nil ? "a bearer token is required" : "the bearer token is wrong"
            var response = Routes.text(.unauthorized, reason + "\n")
            response.headers[.wwwAuthenticate] = "Bearer realm=\"resolve-daemon\""
            return response
        }
        return try await next(request, context)
    }

    static func isProtected(_ path: String, protectDNSQuery: Bool) -> Bool {
        switch path {
        case "/healthz": false
        case "/dns-query": protectDNSQuery
        default: true
        }
    }

    /// `Bearer <token>` (scheme case-insensitive, RFC 6750 §2.1), compared in time independent of
    /// where the first difference is.
    static func bearer(_ header: String, matches token: String) -> Bool {
        let parts = header.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return false }
        let given = Array(parts[1].utf8), expected = Array(token.utf8)
        var difference = UInt8(given.count == expected.count ? 0 : 1)
        for index in expected.indices {
            difference |= expected[index] ^ (index < given.count ? given[index] : 0)
        }
        return difference == 0
    }
}
