import CoreMetrics
import DNSCore
import Dispatch
import NIOCore
import ResolverConfig
import Synchronization

/// Per-client rate limits (`rate_limit:`): a token bucket per client network — the address cut to
/// `ipv4_prefix` (default /24) or `ipv6_prefix` (/56), so that one host cannot escape by rotating
/// through its neighbours' addresses — shared by the stub (UDP, TCP) and DoH.
///
/// Buckets live in 16 shards, each behind its own lock, keyed by the network. A shard holds at most
/// ``maxBucketsPerShard``; when full, buckets that have refilled completely (their client has been
/// quiet for `burst / rate` seconds) are forgotten, and if none has, the new client is limited
/// at once: a flood from many networks cannot make the table grow without bound, and it limits the
/// flooders rather than letting them in.
final class RateLimiter: Sendable {
    let settings: DaemonSettings.RateLimit
    private let shards: [Shard]
    private let limited: (udp: Counter, tcp: Counter, dot: Counter, doh: Counter)
    static let maxBucketsPerShard = 8_192

    struct Bucket {
        var tokens: Double
        var updated: UInt64
    }

    private final class Shard: Sendable {
        let buckets = Mutex<[UInt64: Bucket]>([:])
    }

    enum Transport { case udp, tcp, dot, doh }

    init(settings: DaemonSettings.RateLimit, metrics: any MetricsFactory) {
        self.settings = settings
        shards = (0..<16).map { _ in Shard() }
        func counter(_ transport: String) -> Counter {
            Counter(label: "httpdns_rate_limited_total", dimensions: [("transport", transport)], factory: metrics)
        }
        limited = (counter("udp"), counter("tcp"), counter("dot"), counter("doh"))
    }

    /// Whether a question from `client` may be answered now; a refusal is counted.
    func allows(_ client: SocketAddress?, transport: Transport, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> Bool {
        guard let client, let key = key(client) else { return true }
        let allowed = take(key, now: now)
        if !allowed {
            switch transport {
            case .udp: limited.udp.increment()
            case .tcp: limited.tcp.increment()
            case .dot: limited.dot.increment()
            case .doh: limited.doh.increment()
            }
        }
        return allowed
    }

    /// Takes a token from `key`'s bucket.
    func take(_ key: UInt64, now: UInt64) -> Bool {
        let rate = settings.queriesPerSecond, burst = settings.burst
        let shard = shards[Int(truncatingIfNeeded: (key &* 0x9E37_79B9_7F4A_7C15) >> 60)]
        return shard.buckets.withLock { buckets in
            if var bucket = buckets[key] {
                let elapsed = Double(now &- bucket.updated) / 1e9
                bucket.tokens = min(burst, bucket.tokens + elapsed * rate)
                bucket.updated = now
                let allowed = bucket.tokens >= 1
                if allowed { bucket.tokens -= 1 }
                buckets[key] = bucket
                return allowed
            }
            if buckets.count >= Self.maxBucketsPerShard {
                let full = UInt64(burst / rate * 1e9)
                buckets = buckets.filter { now &- $0.value.updated < full }
                guard buckets.count < Self.maxBucketsPerShard else { return false }
            }
            buckets[key] = Bucket(tokens: burst - 1, updated: now)
            return true
        }
    }

    /// The client's network as a key: the family in the top bit, then the prefix's bits.
    func key(_ address: SocketAddress) -> UInt64? {
        switch address {
        case let .v4(v4):
            let ip = UInt32(bigEndian: v4.address.sin_addr.s_addr)
            let prefix = settings.ipv4Prefix
            return UInt64(prefix == 0 ? 0 : ip & ~UInt32(0) << UInt32(32 - prefix))
        case let .v6(v6):
            let high = withUnsafeBytes(of: v6.address.sin6_addr) { bytes in bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } }
            let prefix = settings.ipv6Prefix
            // The top bit set marks IPv6 (an IPv4 key is at most 32 bits); /64 is as fine as it gets.
            return 1 << 63 | (prefix == 0 ? 0 : (high & ~UInt64(0) << UInt64(64 - min(prefix, 64))) >> 1)
        default:
            return nil
        }
    }
}
