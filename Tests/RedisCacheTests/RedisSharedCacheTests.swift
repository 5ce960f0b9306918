import Crypto
import Logging
import MetricsTestKit
import Testing

@testable import DNSCore
@testable import RedisCache

/// The values of `cache.shared` against a forger who can write to Redis but has not the members'
/// key: every class of forgery is refused by `open`, whatever Redis holds.
@Suite struct RedisSharedCacheTests {
    static let key = SymmetricKey(data: Array("0123456789abcdef0123456789abcdef".utf8))
    let clock = ManualClock()

    func cache(_ key: SymmetricKey = Self.key) -> RedisSharedCache {
        RedisSharedCache(
            endpoint: .tcp(host: "127.0.0.1", port: 9), password: nil, key: key, prefix: "httpdns:", timeout: .milliseconds(50),
            metrics: TestMetrics(), logger: Logger(label: "test"))
    }

    func entry(_ address: String, ttl: Int64 = 300) -> CacheEntry {
        let now = clock.now
        return CacheEntry(
            payload: .addresses([ResolvedAddress(ip: IPAddress(address)!, ttl: UInt32(ttl))], canonicalName: nil), source: .doh,
            upstream: "https://doh-a.test/dns-query", storedAt: now, expiresAt: now + .seconds(ttl), staleUntil: now + .seconds(ttl + 60))
    }

    @Test func aMemberOpensWhatAnotherSealed() throws {
        let key = CacheKey(try DomainName("www.hd.test"), .a)
        let value = cache().seal(entry("198.18.0.10"), for: key, redisKey: "httpdns:www.hd.test/1", now: clock.now)
        let opened = try #require(cache().open(value, redisKey: "httpdns:www.hd.test/1", for: key, now: clock.now))
        #expect(opened.payload == .addresses([ResolvedAddress(ip: IPAddress("198.18.0.10")!, ttl: 300)], canonicalName: nil))
        #expect(cache().redisKey(key) == "httpdns:www.hd.test/1")
    }

    /// F24 of redteam-4: the largest genuine entry (512 IPv6 addresses and a canonical name of 250
    /// bytes) seals within ``RedisSharedCache/maxValueBytes``; a value past it is refused by its length
    /// alone, even under a valid MAC (the daemon never asks Redis for more: GETRANGE).
    @Test func valuesLongerThanAnyGenuineEntryAreRefused() throws {
        let key = CacheKey(try DomainName("www.hd.test"), .aaaa)
        let now = clock.now
        func entry(_ count: Int) throws -> CacheEntry {
            let addresses = (0..<count).map { ResolvedAddress(ip: .v6(0x2001_0db8_ffff_ffff, UInt64.max - UInt64($0)), ttl: 300) }
            let canonical = try DomainName(Array(repeating: String(repeating: "c", count: 61), count: 4).joined(separator: "."))
            return CacheEntry(
                payload: .addresses(addresses, canonicalName: canonical), source: .doh, upstream: "https://" + String(repeating: "u", count: 200),
                storedAt: now, expiresAt: now + .seconds(300), staleUntil: now + .seconds(360))
        }
        let largest = cache().seal(try entry(512), for: key, redisKey: "httpdns:www.hd.test/28", now: now)
        #expect(largest.count <= RedisSharedCache.maxValueBytes, "\(largest.count)")
        #expect(cache().open(largest, redisKey: "httpdns:www.hd.test/28", for: key, now: now) != nil)
        let oversized = cache().seal(try entry(1_000), for: key, redisKey: "httpdns:www.hd.test/28", now: now)
        #expect(oversized.count > RedisSharedCache.maxValueBytes)
        #expect(cache().open(oversized, redisKey: "httpdns:www.hd.test/28", for: key, now: now) == nil)
    }

    @Test func forgeriesAreRefused() throws {
        let www = CacheKey(try DomainName("www.hd.test"), .a)
        let bank = CacheKey(try DomainName("bank.hd.test"), .a)
        let genuine = cache().seal(entry("198.18.0.10"), for: www, redisKey: "httpdns:www.hd.test/1", now: clock.now)
        let member = cache()
        // Sealed with the forger's own key.
        let foreign = cache(SymmetricKey(size: .bits256)).seal(entry("203.0.113.66"), for: bank, redisKey: "httpdns:bank.hd.test/1", now: clock.now)
        #expect(member.open(foreign, redisKey: "httpdns:bank.hd.test/1", for: bank, now: clock.now) == nil)
        // Another name: a genuine value copied under another key.
        #expect(member.open(genuine, redisKey: "httpdns:bank.hd.test/1", for: bank, now: clock.now) == nil)
        // Another type under the same name.
        let aaaa = CacheKey(try DomainName("www.hd.test"), .aaaa)
        #expect(member.open(genuine, redisKey: "httpdns:www.hd.test/28", for: aaaa, now: clock.now) == nil)
        // The right Redis key but a question the entry does not answer.
        #expect(member.open(genuine, redisKey: "httpdns:www.hd.test/1", for: bank, now: clock.now) == nil)
        // Every single bit flipped, one at a time.
        for index in genuine.indices {
            for bit in 0..<8 {
                var flipped = genuine
                flipped[index] ^= UInt8(1 << bit)
                #expect(member.open(flipped, redisKey: "httpdns:www.hd.test/1", for: www, now: clock.now) == nil, "byte \(index) bit \(bit)")
            }
        }
        // Cut short, empty, only a MAC.
        for length in [0, 1, 31, 32, 33, genuine.count - 1] {
            #expect(member.open(Array(genuine.prefix(length)), redisKey: "httpdns:www.hd.test/1", for: www, now: clock.now) == nil)
        }
    }

    @Test func aReplayedValuePastItsLifetimeIsDropped() throws {
        let www = CacheKey(try DomainName("www.hd.test"), .a)
        let sealed = cache().seal(entry("198.18.0.10", ttl: 1), for: www, redisKey: "httpdns:www.hd.test/1", now: clock.now)
        // Its lifetimes are anchored on the wall clock of the writer: read 61 s later by the
        // monotonic clock alone it is still fresh; the wall clock decides (checked with a real Redis
        // in the daemon's tests), so here only its structure: an entry whose stale window has passed
        // by the time it is written is not written.
        let stale = CacheEntry(
            payload: .negative(.nxdomain), source: .doh, upstream: nil, storedAt: clock.now, expiresAt: clock.now,
            staleUntil: clock.now)
        let value = cache().seal(stale, for: www, redisKey: "httpdns:www.hd.test/1", now: clock.now)
        #expect(cache().open(value, redisKey: "httpdns:www.hd.test/1", for: www, now: clock.now) == nil)
        #expect(cache().open(sealed, redisKey: "httpdns:www.hd.test/1", for: www, now: clock.now) != nil)
    }
}
