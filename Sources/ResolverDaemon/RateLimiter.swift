import CoreMetrics
import DNSCore
import DNSWire
import Dispatch
import NIOCore
import ResolverConfig
import Synchronization

/// Per-client rate limits (`rate_limit:`): a token bucket per client network — the address cut to
/// `ipv4_prefix` (default /24) or `ipv6_prefix` (/56), so that one host cannot escape by rotating
/// through its neighbours' addresses.
///
/// Built so that the limiter cannot be turned against the clients it protects (F21–F23 of
/// redteam-4), as BIND's response-rate limiting and dnsdist's dynamic blocks are:
/// - **Two tables.** UDP, whose source anyone can forge, is charged to buckets of its own; TCP, DoT
///   and DoH — whose source a handshake proved — share the other table. A spoofed flood can use up
///   a victim's UDP bucket, never its DoH, DoT or TCP one.
/// - **Slip.** A limited UDP query gets, every `slip`-th time (default 2, BIND's), a truncated
///   reply (TC=1, no records) instead of the `action`: a real client whose address a flood borrows
///   goes on over TCP, which the flood cannot reach.
/// - **IPv4 behind IPv6.** A dual-stack listener sees IPv4 clients as `::ffff:a.b.c.d`, NAT64 as
///   `64:ff9b::a.b.c.d`: both are keyed as the IPv4 address they carry.
/// - **A bounded table that evicts.** Each table holds at most 16 × ``maxBucketsPerShard`` buckets;
///   a new network takes the slot of one that has not been seen since the CLOCK hand last passed
///   (second chance: a bucket used again after it was made survives a sweep; one seen once does
///   not). A flood of new sources therefore evicts itself first, costs O(1) per packet (no scan,
///   no copy), and never refuses a newcomer: an evicted client starts again with a full bucket.
final class RateLimiter: Sendable {
    let settings: DaemonSettings.RateLimit
    /// UDP's buckets.
    private let spoofable: BucketTable
    /// TCP's, DoT's and DoH's buckets.
    private let verified: BucketTable
    private let limited: (udp: Counter, tcp: Counter, dot: Counter, doh: Counter)
    private let truncated: Counter
    static let maxBucketsPerShard = 8_192

    /// What a question gets.
    enum Decision: Equatable {
        case allowed
        /// Past the limit: the configured `action`.
        case limited
        /// Past the limit over UDP, on a slip turn: a truncated reply.
        case truncated
    }

    init(settings: DaemonSettings.RateLimit, metrics: any MetricsFactory, bucketsPerShard: Int = RateLimiter.maxBucketsPerShard) {
        self.settings = settings
        spoofable = BucketTable(bucketsPerShard: bucketsPerShard)
        verified = BucketTable(bucketsPerShard: bucketsPerShard)
        func counter(_ transport: String) -> Counter {
            Counter(label: "httpdns_rate_limited_total", dimensions: [("transport", transport)], factory: metrics)
        }
        limited = (counter("udp"), counter("tcp"), counter("dot"), counter("doh"))
        truncated = Counter(label: "httpdns_rate_limit_truncated_total", factory: metrics)
    }

    /// Whether a question from `client` may be answered now; a refusal is counted.
    func decide(_ client: SocketAddress?, transport: DNSTransport, now: UInt64 = DispatchTime.now().uptimeNanoseconds) -> Decision {
        guard let client, let key = key(client) else { return .allowed }
        let table = transport == .udp ? spoofable : verified
        guard let limitedCount = table.take(key, now: now, rate: settings.queriesPerSecond, burst: settings.burst) else { return .allowed }
        switch transport {
        case .udp: limited.udp.increment()
        case .tcp: limited.tcp.increment()
        case .dot: limited.dot.increment()
        case .doh: limited.doh.increment()
        }
        if transport == .udp, settings.slip > 0, (limitedCount - 1) % UInt32(settings.slip) == 0 {
            truncated.increment()
            return .truncated
        }
        return .limited
    }

    /// Takes a token from `key`'s bucket in the table of `transport`; true when there was one.
    func take(_ key: UInt128, transport: DNSTransport = .tcp, now: UInt64) -> Bool {
        (transport == .udp ? spoofable : verified).take(key, now: now, rate: settings.queriesPerSecond, burst: settings.burst) == nil
    }

    /// Buckets held now (both tables), for tests.
    var bucketCount: Int { spoofable.count + verified.count }

    /// The client's network as a key: an IPv6 prefix in the top 64 bits (the low ones zero), an IPv4
    /// prefix in the low 32 with bit 32 set, so that neither family's keys can meet and every bit
    /// of a /64 counts. IPv4 carried in IPv6 (`::ffff:0:0/96`, RFC 4291 §2.5.5.2; NAT64's
    /// `64:ff9b::/96`, RFC 6052) is keyed as that IPv4 address.
    func key(_ address: SocketAddress) -> UInt128? {
        switch address {
        case let .v4(v4):
            return key(ipv4: UInt32(bigEndian: v4.address.sin_addr.s_addr))
        case let .v6(v6):
            let (high, low) = withUnsafeBytes(of: v6.address.sin6_addr) { bytes in
                (bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }, bytes.suffix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) })
            }
            if (high == 0 && low >> 32 == 0xffff) || (high == 0x0064_ff9b_0000_0000 && low >> 32 == 0) {
                return key(ipv4: UInt32(truncatingIfNeeded: low))
            }
            let prefix = min(settings.ipv6Prefix, 64)  // /64 is as fine as it gets
            return UInt128(prefix == 0 ? 0 : high & ~UInt64(0) << UInt64(64 - prefix)) << 64
        default:
            return nil
        }
    }

    private func key(ipv4 ip: UInt32) -> UInt128 {
        let prefix = settings.ipv4Prefix
        return 1 << 32 | UInt128(prefix == 0 ? 0 : ip & ~UInt32(0) << UInt32(32 - prefix))
    }
}

/// Token buckets by key in 16 shards, each a fixed number of slots behind its own lock, with a
/// CLOCK hand that picks the slot a new key takes when the shard is full.
private final class BucketTable: Sendable {
    struct Slot {
        var key: UInt128
        var tokens: Double
        var updated: UInt64
        /// Queries refused since the bucket last had a token (the slip's turn).
        var limited: UInt32
        /// Used since the hand last passed: spared once.
        var referenced: Bool
    }

    struct Shard {
        /// Key → slot. Swift's dictionaries hash with a per-process random seed, so keys a client
        /// picks cannot be made to collide.
        var index: [UInt128: Int] = [:]
        var slots: [Slot] = []
        var hand = 0
    }

    private final class Locked: Sendable {
        let shard = Mutex(Shard())
    }

    let bucketsPerShard: Int
    private let shards: [Locked]

    init(bucketsPerShard: Int) {
        self.bucketsPerShard = max(1, bucketsPerShard)
        shards = (0..<16).map { _ in Locked() }
    }

    var count: Int { shards.reduce(0) { total, locked in total + locked.shard.withLock { $0.slots.count } } }

    /// Takes a token from `key`'s bucket: nil when there was one, else how many queries the bucket
    /// has refused in a row (1 for the first).
    func take(_ key: UInt128, now: UInt64, rate: Double, burst: Double) -> UInt32? {
        let folded = UInt64(truncatingIfNeeded: key) ^ UInt64(truncatingIfNeeded: key >> 64)
        let locked = shards[Int(truncatingIfNeeded: (folded &* 0x9E37_79B9_7F4A_7C15) >> 60)]
        let capacity = bucketsPerShard
        return locked.shard.withLock { shard -> UInt32? in
            if let index = shard.index[key] {
                var slot = shard.slots[index]
                let elapsed = Double(now &- slot.updated) / 1e9
                slot.tokens = min(burst, slot.tokens + elapsed * rate)
                slot.updated = now
                slot.referenced = true
                defer { shard.slots[index] = slot }
                if slot.tokens >= 1 {
                    slot.tokens -= 1
                    slot.limited = 0
                    return nil
                }
                slot.limited &+= 1
                return max(slot.limited, 1)
            }
            let fresh = Slot(key: key, tokens: burst - 1, updated: now, limited: 0, referenced: false)
            if shard.slots.count < capacity {
                shard.index[key] = shard.slots.count
                shard.slots.append(fresh)
                return nil
            }
            // Second chance: each referenced slot the hand passes is spared once and cleared, so the
            // walk ends within one turn, and each bit cleared was set by a query: O(1) amortised.
            while shard.slots[shard.hand].referenced {
                shard.slots[shard.hand].referenced = false
                shard.hand = (shard.hand + 1) % capacity
            }
            let victim = shard.hand
            shard.index[shard.slots[victim].key] = nil
            shard.slots[victim] = fresh
            shard.index[key] = victim
            shard.hand = (victim + 1) % capacity
            return nil
        }
    }
}
