import Testing

@testable import DNSCore

/// The cache's compact layout (a name's A and AAAA in one slot, one address inline, instants as
/// nanoseconds, upstreams interned) must give back exactly what was stored, and CLOCK must keep
/// the names that are used.
@Suite struct ResolutionCacheTests {
    static let name = try! DomainName("www.hd.test")

    static func entry(_ payload: CacheEntry.Payload, upstream: String? = "https://doh.test/dns-query", at seconds: Int64 = 5) -> CacheEntry {
        let stored = ResolverInstant(offset: .seconds(seconds) + .nanoseconds(123))
        return CacheEntry(
            payload: payload, source: .doh, upstream: upstream, storedAt: stored, expiresAt: stored + .seconds(300),
            staleUntil: stored + .seconds(86_700))
    }

    static func same(_ lhs: CacheEntry?, _ rhs: CacheEntry) -> Bool {
        guard let lhs else { return false }
        return lhs.payload == rhs.payload && lhs.source == rhs.source && lhs.upstream == rhs.upstream && lhs.storedAt == rhs.storedAt
            && lhs.expiresAt == rhs.expiresAt && lhs.staleUntil == rhs.staleUntil
    }

    @Test func everyKindOfEntryComesBackAsStored() throws {
        let cache = ResolutionCache(capacity: 100)
        let other = try DomainName("cdn.hd.test")
        let entries: [(CacheKey, CacheEntry)] = [
            (CacheKey(Self.name, .a), Self.entry(.addresses([ResolvedAddress(ip: IPAddress("198.18.0.1")!, ttl: 300)], canonicalName: nil))),
            (CacheKey(Self.name, .aaaa), Self.entry(.addresses([ResolvedAddress(ip: IPAddress("2001:2::1")!, ttl: 299)], canonicalName: nil))),
            (
                CacheKey(other, .a),
                Self.entry(
                    .addresses(
                        [ResolvedAddress(ip: IPAddress("198.18.0.2")!, ttl: 60), ResolvedAddress(ip: IPAddress("198.18.0.3")!, ttl: 60)],
                        canonicalName: nil), upstream: nil)
            ),
            (
                CacheKey(try DomainName("alias.hd.test"), .a),
                Self.entry(.addresses([ResolvedAddress(ip: IPAddress("198.18.0.4")!, ttl: 30)], canonicalName: other))
            ),
            (CacheKey(try DomainName("none.hd.test"), .aaaa), Self.entry(.negative(.nxdomain))),
            (
                CacheKey(try DomainName("dead.hd.test"), .a),
                Self.entry(.failure(DNSError(.timeout, "no answer in time")), upstream: "https://b.test/")
            ),
            (CacheKey(Self.name, .txt), Self.entry(.negative(.nodata))),
        ]
        for (key, entry) in entries { cache.store(entry, for: key) }
        for (key, entry) in entries { #expect(Self.same(cache.entry(for: key), entry), "\(key)") }
        #expect(cache.count == entries.count)
        #expect(cache.snapshot().count == entries.count)
        // Replacing keeps the count; removing one family keeps the other.
        cache.store(entries[0].1, for: entries[0].0)
        #expect(cache.count == entries.count)
        cache.remove(CacheKey(Self.name, .a))
        #expect(cache.entry(for: CacheKey(Self.name, .a)) == nil)
        #expect(Self.same(cache.entry(for: CacheKey(Self.name, .aaaa)), entries[1].1))
        #expect(cache.count == entries.count - 1)
    }

    /// A full cache evicts a name nobody asked for since the hand last passed, never the one in use.
    @Test func clockKeepsTheNamesInUse() throws {
        let cache = ResolutionCache(capacity: 8, shardCount: 1)
        let names = try (0..<4).map { try DomainName("n\($0).hd.test") }
        let address = Self.entry(.addresses([ResolvedAddress(ip: IPAddress("198.18.0.1")!, ttl: 300)], canonicalName: nil))
        for name in names {
            cache.store(address, for: CacheKey(name, .a))
            cache.store(address, for: CacheKey(name, .aaaa))
        }
        #expect(cache.count == 8)
        // The hand clears every bit on its first pass, then takes n0; n0 is used again before the next.
        let newcomer = try DomainName("new.hd.test")
        #expect(cache.store(address, for: CacheKey(newcomer, .a)))
        #expect(cache.count == 7)
        _ = cache.entry(for: CacheKey(names[1], .a))
        #expect(!cache.store(address, for: CacheKey(newcomer, .aaaa)))
        #expect(cache.store(address, for: CacheKey(try DomainName("third.hd.test"), .a)))
        #expect(cache.entry(for: CacheKey(names[1], .a)) != nil, "a name in use survives")
        #expect(cache.entry(for: CacheKey(newcomer, .aaaa)) != nil)
        #expect(cache.evictions == 2)
    }

    /// A name whose second family arrives when the cache is full keeps its slot even when the
    /// eviction moves it (it was the last slot, moved into the victim's place).
    @Test func theSecondFamilyOfTheLastSlotLandsAfterAnEviction() throws {
        let cache = ResolutionCache(capacity: 4, shardCount: 1)
        let address = Self.entry(.addresses([ResolvedAddress(ip: IPAddress("198.18.0.1")!, ttl: 300)], canonicalName: nil))
        let first = try DomainName("first.hd.test")
        let last = try DomainName("last.hd.test")
        cache.store(address, for: CacheKey(first, .a))
        cache.store(address, for: CacheKey(first, .aaaa))
        cache.store(address, for: CacheKey(try DomainName("mid.hd.test"), .a))
        cache.store(address, for: CacheKey(last, .a))
        #expect(cache.store(address, for: CacheKey(last, .aaaa)))
        #expect(cache.entry(for: CacheKey(last, .a)) != nil)
        #expect(cache.entry(for: CacheKey(last, .aaaa)) != nil)
        #expect(cache.entry(for: CacheKey(first, .a)) == nil, "the first name was the victim")
        #expect(cache.count == 3)
    }

    /// Many names across pages (512 slots each) and shards: stores, removals that move the last
    /// slot into the hole, and lookups agree with a dictionary kept beside them.
    @Test func pagesAndRemovalsAgreeWithAPlainDictionary() throws {
        let cache = ResolutionCache(capacity: 100_000, shardCount: 2)
        var model: [CacheKey: UInt32] = [:]
        var generator = SystemRandomNumberGenerator()
        for step in 0..<20_000 {
            let key = CacheKey(
                try DomainName("h\(Int.random(in: 0..<3_000, using: &generator)).hd.test"), Bool.random(using: &generator) ? .a : .aaaa)
            if step % 5 == 4 {
                cache.remove(key)
                model[key] = nil
            } else {
                let ttl = UInt32(step)
                cache.store(Self.entry(.addresses([ResolvedAddress(ip: .v4(ttl), ttl: ttl)], canonicalName: nil)), for: key)
                model[key] = ttl
            }
        }
        #expect(cache.count == model.count)
        for (key, ttl) in model {
            guard case .addresses(let addresses, _)? = cache.entry(for: key)?.payload else {
                Issue.record("\(key) missing")
                continue
            }
            #expect(addresses == [ResolvedAddress(ip: .v4(ttl), ttl: ttl)])
        }
    }
}
