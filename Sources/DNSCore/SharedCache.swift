/// A second-level cache shared by several resolvers (the daemon's `cache.shared`, on Redis): asked
/// after a local miss and before the upstreams, and given every answer an upstream returns.
///
/// Implementations bound their own waits: a shared cache that is down or slow answers nil quickly
/// and never fails a lookup. What it returns is not trusted blindly: the engine takes only fresh
/// address or negative entries for the very key it asked, and an implementation must authenticate
/// what it stores (the Redis one with an HMAC key its readers share).
package protocol SharedCache: Sendable {
    /// The entry stored for `key`, fresh at `now`, or nil.
    func entry(for key: CacheKey, now: ResolverInstant) async -> CacheEntry?
    /// Stores an upstream's answer for other resolvers; returns at once (the write happens later,
    /// or is dropped and counted when the cache cannot keep up).
    func store(_ entry: CacheEntry, for key: CacheKey, now: ResolverInstant)
}
