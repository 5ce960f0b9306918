/// What a lookup does with what the cache holds for one (name, type) at one instant: a pure
/// function of the entry, the time and the options, so that serve-stale (RFC 8767) and prefetch are
/// tested without an engine.
package enum CacheDecision: Equatable, Sendable {
    /// Fresh: answer from the cache; `prefetch` when it is in the last 10 % of its life (and
    /// prefetch is on) and a refresh should start.
    case fresh(prefetch: Bool)
    /// A remembered failure, and the system's DNS may be asked instead (fallback `system`).
    case rememberedFailureWithFallback
    /// Expired addresses within the stale window: serve them — after waiting at most `waitFirst`
    /// for a fresh answer, when the options say so — and refresh.
    case stale(waitFirst: Duration?)
    /// Nothing usable: ask the upstreams.
    case miss

    package init(_ entry: CacheEntry?, at now: ResolverInstant, options: ResolverOptions, hasFallback: Bool) {
        guard let entry else {
            self = .miss
            return
        }
        if now < entry.expiresAt {
            switch entry.payload {
            case .failure where options.fallback == .system && hasFallback:
                self = .rememberedFailureWithFallback
            case .addresses:
                self = .fresh(prefetch: options.prefetch && entry.isNearExpiry(at: now))
            case .negative, .failure:
                self = .fresh(prefetch: false)
            }
            return
        }
        if case .addresses = entry.payload, now < entry.staleUntil {
            self = .stale(waitFirst: options.staleAnswerDelay > .zero ? options.staleAnswerDelay : nil)
            return
        }
        self = .miss
    }
}
