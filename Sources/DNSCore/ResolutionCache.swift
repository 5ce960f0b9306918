import Synchronization

/// What the cache holds for one (name, type).
package struct CacheEntry: Sendable {
    package enum Payload: Sendable, Equatable {
        /// Addresses with the TTLs they were received with (after clamping).
        case addresses([ResolvedAddress], canonicalName: DomainName?)
        /// An authoritative "no such name" or "no such record" (RFC 2308).
        case negative(DNSError.Code)
        /// Every upstream failed; remembered briefly so a dead resolver is not hammered. Boxed
        /// (`indirect`): an error is 49 bytes, and every entry would pay for it.
        indirect case failure(DNSError)
    }

    package var payload: Payload
    package var source: Resolution.Source
    package var upstream: String?
    package var storedAt: ResolverInstant
    /// Fresh until this instant.
    package var expiresAt: ResolverInstant
    /// Servable as stale until this instant (RFC 8767); equals `expiresAt` for failures.
    package var staleUntil: ResolverInstant

    /// Whether a hit at `now` falls in the last 10 % of the entry's lifetime (prefetch window).
    package func isNearExpiry(at now: ResolverInstant) -> Bool {
        let lifetime = expiresAt - storedAt
        return now < expiresAt && expiresAt - now <= lifetime / 10
    }
}

package struct CacheKey: Hashable, Sendable {
    package var name: DomainName
    package var type: RecordType

    package init(_ name: DomainName, _ type: RecordType) {
        self.name = name
        self.type = type
    }
}

/// A bounded, sharded cache of resolutions with CLOCK (second-chance) eviction.
///
/// Each shard has its own lock, so lookups of different names rarely contend; a hit only sets the
/// entry's reference bit, and eviction sweeps the clock hand past referenced entries, keeping hot
/// names. Expired entries stay until evicted or until the stale window ends, so serve-stale works.
package final class ResolutionCache: Sendable {
    private struct Slot {
        var key: CacheKey
        var entry: CacheEntry
        var referenced: Bool
    }

    private struct Shard {
        var index: [CacheKey: Int] = [:]
        var slots: [Slot] = []
        var hand = 0
        var evictions = 0
    }

    /// Mutex is non-copyable, so each shard's lives in a box the array can hold.
    private final class ShardBox: Sendable {
        let lock = Mutex(Shard())
    }

    private let shards: [ShardBox]
    private let shardCapacity: Int

    /// - Parameters:
    ///   - capacity: entries kept at most, across all shards (default 100,000).
    ///   - shardCount: locks to spread lookups over; by default one per 4,096 entries, 1 to 16, so
    ///     every shard keeps enough slots for CLOCK to protect its hot entries.
    package init(capacity: Int = 100_000, shardCount: Int? = nil) {
        let count = max(1, min(shardCount ?? capacity / 4096, 16, capacity))
        shards = (0..<count).map { _ in ShardBox() }
        shardCapacity = max(1, capacity / count)
    }

    @inline(__always)
    private func shard(for key: CacheKey) -> ShardBox {
        shards[Int(UInt(bitPattern: key.hashValue) % UInt(shards.count))]
    }

    /// The entry for `key`, marking it recently used.
    package func entry(for key: CacheKey) -> CacheEntry? {
        shard(for: key).lock.withLock { shard in
            guard let slot = shard.index[key] else { return nil }
            shard.slots[slot].referenced = true
            return shard.slots[slot].entry
        }
    }

    /// Stores `entry`, evicting a cold entry when the shard is full.
    /// - Returns: whether another entry was evicted to make room.
    @discardableResult
    package func store(_ entry: CacheEntry, for key: CacheKey) -> Bool {
        shard(for: key).lock.withLock { shard in
            if let slot = shard.index[key] {
                shard.slots[slot].entry = entry
                shard.slots[slot].referenced = true
                return false
            }
            if shard.slots.count < shardCapacity {
                shard.index[key] = shard.slots.count
                shard.slots.append(Slot(key: key, entry: entry, referenced: false))
                return false
            }
            // CLOCK: clear reference bits until an unreferenced slot comes under the hand.
            while shard.slots[shard.hand].referenced {
                shard.slots[shard.hand].referenced = false
                shard.hand = (shard.hand + 1) % shard.slots.count
            }
            let victim = shard.hand
            shard.index[shard.slots[victim].key] = nil
            shard.slots[victim] = Slot(key: key, entry: entry, referenced: false)
            shard.index[key] = victim
            shard.hand = (victim + 1) % shard.slots.count
            shard.evictions += 1
            return true
        }
    }

    package func remove(_ key: CacheKey) {
        shard(for: key).lock.withLock { shard in
            guard let slot = shard.index.removeValue(forKey: key) else { return }
            let last = shard.slots.count - 1
            if slot != last {
                shard.slots[slot] = shard.slots[last]
                shard.index[shard.slots[slot].key] = slot
            }
            shard.slots.removeLast()
            if shard.hand >= shard.slots.count { shard.hand = 0 }
        }
    }

    package func removeAll() {
        for shard in shards { shard.lock.withLock { $0 = Shard() } }
    }

    /// Entries currently held.
    package var count: Int { shards.reduce(0) { $0 + $1.lock.withLock { $0.slots.count } } }

    /// Entries evicted for capacity since creation.
    package var evictions: Int { shards.reduce(0) { $0 + $1.lock.withLock { $0.evictions } } }

    /// Every entry, for persistence.
    package func snapshot() -> [(CacheKey, CacheEntry)] {
        shards.flatMap { shard in shard.lock.withLock { $0.slots.map { ($0.key, $0.entry) } } }
    }
}
