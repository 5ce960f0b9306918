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
