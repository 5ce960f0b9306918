import Synchronization

/// What the cache holds for one (name, type).
package struct CacheEntry: Sendable {
    package enum Payload: Sendable, Equatable {
        /// Addresses with the TTLs they were received with (after clamping).
        case addresses([ResolvedAddress], canonicalName: DomainName?)
        /// An authoritative "no such name" or "no such record" (RFC 2308), with the zone's SOA when
        /// the upstream sent one (its TTL as received; a response counts it down with the entry).
        case negative(DNSError.Code, authority: NegativeAuthority? = nil)
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
/// slot's reference bit, and eviction sweeps the clock hand past referenced slots, keeping hot
/// names. Expired entries stay until evicted or until the stale window ends, so serve-stale works.
///
/// **Layout.** What it holds is measured per name (BENCHMARKS.md, "Cache hits and memory"): a name's
/// A and AAAA entries share one slot, one index entry and one copy of the name; an entry keeps its
/// instants as nanoseconds, its upstream as an index into the shard's list of upstream URLs, and one
/// address (most answers) inline rather than in an array of its own; slots sit in fixed pages, so
/// the store does not hold the spare half of a doubled array. Other record types, which the engine
/// does not cache today, are kept as they are in a side table.
package final class ResolutionCache: Sendable {
    /// A ``CacheEntry`` in fewer bytes; turned back into one on every read.
    fileprivate struct CompactEntry {
        enum Payload {
            /// One address with its TTL, the family in `isV4`; the name is the key's.
            case one(high: UInt64, low: UInt64, ttl: UInt32, isV4: Bool)
            case addresses([ResolvedAddress], canonicalName: DomainName?)
            case negative(DNSError.Code)
            /// A negative answer with its SOA; boxed, so that the other entries do not pay its 50 bytes.
            indirect case negativeWithAuthority(DNSError.Code, NegativeAuthority)
            indirect case failure(DNSError)
        }

        var payload: Payload
        var storedAt: Int64
        var expiresAt: Int64
        var staleUntil: Int64
        /// Index into the shard's upstream URLs; ``ResolutionCache/noUpstream`` for none.
        var upstream: UInt16
        var source: Resolution.Source
    }

    /// One name: its A and AAAA entries.
    fileprivate struct Slot {
        var name: DomainName
        var a: CompactEntry?
        var aaaa: CompactEntry?
        var referenced: Bool

        var isEmpty: Bool { a == nil && aaaa == nil }
        var entryCount: Int { (a == nil ? 0 : 1) + (aaaa == nil ? 0 : 1) }
    }

    fileprivate struct Shard {
        var index: [DomainName: Int] = [:]
        /// Slot `i` is `pages[i / pageSize][i % pageSize]`.
        var pages: [[Slot]] = []
        var slotCount = 0
        var entryCount = 0
        var hand = 0
        var evictions = 0
        var upstreams: [String] = []
        var upstreamIndex: [String: UInt16] = [:]
        /// Entries of types other than A and AAAA.
        var others: [CacheKey: CacheEntry] = [:]

        subscript(slot slot: Int) -> Slot {
            get { pages[slot / ResolutionCache.pageSize][slot % ResolutionCache.pageSize] }
            set { pages[slot / ResolutionCache.pageSize][slot % ResolutionCache.pageSize] = newValue }
        }

        mutating func append(_ slot: Slot) {
            if slotCount % ResolutionCache.pageSize == 0 {
                var page: [Slot] = []
                page.reserveCapacity(ResolutionCache.pageSize)
                pages.append(page)
            }
            pages[pages.count - 1].append(slot)
            slotCount += 1
        }

        mutating func removeLast() {
            pages[pages.count - 1].removeLast()
            if pages[pages.count - 1].isEmpty { pages.removeLast() }
            slotCount -= 1
        }

        /// The index of `upstream` in this shard's list, adding it when new.
        mutating func intern(_ upstream: String?) -> UInt16 {
            guard let upstream else { return ResolutionCache.noUpstream }
            if let known = upstreamIndex[upstream] { return known }
            // A cache that has seen 65,534 upstream URLs keeps no more of them (never seen outside a fuzzer).
            guard upstreams.count < Int(ResolutionCache.noUpstream) - 1 else { return ResolutionCache.noUpstream - 1 }
            let index = UInt16(upstreams.count)
            upstreams.append(upstream)
            upstreamIndex[upstream] = index
            return index
        }

        func upstream(_ index: UInt16) -> String? {
            index < upstreams.count ? upstreams[Int(index)] : nil
        }

        func entry(_ compact: CompactEntry) -> CacheEntry {
            let payload: CacheEntry.Payload
            switch compact.payload {
            case let .one(high, low, ttl, isV4):
                let ip: IPAddress = isV4 ? .v4(UInt32(truncatingIfNeeded: low)) : .v6(high, low)
                payload = .addresses([ResolvedAddress(ip: ip, ttl: ttl)], canonicalName: nil)
            case let .addresses(addresses, canonicalName): payload = .addresses(addresses, canonicalName: canonicalName)
            case let .negative(code): payload = .negative(code)
            case let .negativeWithAuthority(code, authority): payload = .negative(code, authority: authority)
            case let .failure(error): payload = .failure(error)
            }
            return CacheEntry(
                payload: payload, source: compact.source, upstream: upstream(compact.upstream),
                storedAt: ResolverInstant(nanoseconds: compact.storedAt), expiresAt: ResolverInstant(nanoseconds: compact.expiresAt),
                staleUntil: ResolverInstant(nanoseconds: compact.staleUntil))
        }

        mutating func compact(_ entry: CacheEntry) -> CompactEntry {
            let payload: CompactEntry.Payload
            switch entry.payload {
            case let .addresses(addresses, canonicalName):
                if canonicalName == nil, addresses.count == 1 {
                    let address = addresses[0]
                    switch address.ip {
                    case let .v4(value): payload = .one(high: 0, low: UInt64(value), ttl: address.ttl, isV4: true)
                    case let .v6(high, low): payload = .one(high: high, low: low, ttl: address.ttl, isV4: false)
                    }
                } else {
                    payload = .addresses(addresses, canonicalName: canonicalName)
                }
            case let .negative(code, nil): payload = .negative(code)
            case let .negative(code, authority?): payload = .negativeWithAuthority(code, authority)
            case let .failure(error): payload = .failure(error)
            }
            return CompactEntry(
                payload: payload, storedAt: entry.storedAt.nanoseconds, expiresAt: entry.expiresAt.nanoseconds,
                staleUntil: entry.staleUntil.nanoseconds, upstream: intern(entry.upstream), source: entry.source)
        }
    }

    /// Slots per page: 512 of about 150 bytes, so a shard's last page is its only spare room.
    fileprivate static let pageSize = 512
    fileprivate static let noUpstream = UInt16.max

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
    private func shard(for name: DomainName) -> ShardBox {
        shards[Int(UInt(bitPattern: name.hashValue) % UInt(shards.count))]
    }

    /// The entry for `key`, marking it recently used.
    package func entry(for key: CacheKey) -> CacheEntry? {
        shard(for: key.name).lock.withLock { shard -> CacheEntry? in
            guard key.type == .a || key.type == .aaaa else { return shard.others[key] }
            guard let slot = shard.index[key.name] else { return nil }
            guard let compact = key.type == .a ? shard[slot: slot].a : shard[slot: slot].aaaa else { return nil }
            shard.pages[slot / Self.pageSize][slot % Self.pageSize].referenced = true
            return shard.entry(compact)
        }
    }

    /// Stores `entry`, evicting a cold name when the shard is full.
    /// - Returns: whether another entry was evicted to make room.
    @discardableResult
    package func store(_ entry: CacheEntry, for key: CacheKey) -> Bool {
        shard(for: key.name).lock.withLock { shard in
            guard key.type == .a || key.type == .aaaa else {
                if shard.others.updateValue(entry, forKey: key) == nil { shard.entryCount += 1 }
                return false
            }
            let compact = shard.compact(entry)
            var evicted = false
            var slot: Int
            if let existing = shard.index[key.name] {
                slot = existing
                let had = key.type == .a ? shard[slot: slot].a != nil : shard[slot: slot].aaaa != nil
                if !had {
                    if shard.entryCount >= shardCapacity {
                        evicted = evict(from: &shard, sparing: slot)
                        // The eviction may have moved this name's slot into the victim's place.
                        slot = shard.index[key.name] ?? slot
                    }
                    shard.entryCount += 1
                }
            } else {
                if shard.entryCount >= shardCapacity { evicted = evict(from: &shard, sparing: nil) }
                slot = shard.slotCount
                shard.index[key.name] = slot
                shard.append(Slot(name: key.name, a: nil, aaaa: nil, referenced: false))
                shard.entryCount += 1
            }
            let page = slot / Self.pageSize
            let offset = slot % Self.pageSize
            if key.type == .a { shard.pages[page][offset].a = compact } else { shard.pages[page][offset].aaaa = compact }
            shard.pages[page][offset].referenced = true
            return evicted
        }
    }

    /// CLOCK: clears reference bits until an unreferenced slot (not `sparing`) comes under the hand,
    /// and removes that name.
    private func evict(from shard: inout Shard, sparing: Int?) -> Bool {
        guard shard.slotCount > (sparing == nil ? 0 : 1) else { return false }
        while true {
            if shard.hand >= shard.slotCount { shard.hand = 0 }
            let hand = shard.hand
            if hand != sparing, !shard[slot: hand].referenced { break }
            shard.pages[hand / Self.pageSize][hand % Self.pageSize].referenced = false
            shard.hand += 1
        }
        let victim = shard.hand
        shard.entryCount -= shard[slot: victim].entryCount
        removeSlot(victim, from: &shard)
        shard.evictions += 1
        return true
    }

    /// Takes out slot `slot`, moving the last slot into its place.
    private func removeSlot(_ slot: Int, from shard: inout Shard) {
        shard.index[shard[slot: slot].name] = nil
        let last = shard.slotCount - 1
        if slot != last {
            let moved = shard[slot: last]
            shard[slot: slot] = moved
            shard.index[moved.name] = slot
        }
        shard.removeLast()
        if shard.hand >= shard.slotCount { shard.hand = 0 }
    }

    package func remove(_ key: CacheKey) {
        shard(for: key.name).lock.withLock { shard in
            guard key.type == .a || key.type == .aaaa else {
                if shard.others.removeValue(forKey: key) != nil { shard.entryCount -= 1 }
                return
            }
            guard let slot = shard.index[key.name] else { return }
            let page = slot / Self.pageSize
            let offset = slot % Self.pageSize
            if key.type == .a {
                guard shard.pages[page][offset].a != nil else { return }
                shard.pages[page][offset].a = nil
            } else {
                guard shard.pages[page][offset].aaaa != nil else { return }
                shard.pages[page][offset].aaaa = nil
            }
            shard.entryCount -= 1
            if shard[slot: slot].isEmpty { removeSlot(slot, from: &shard) }
        }
    }

    package func removeAll() {
        for shard in shards { shard.lock.withLock { $0 = Shard() } }
    }

    /// Entries currently held (a name with A and AAAA counts twice).
    package var count: Int { shards.reduce(0) { $0 + $1.lock.withLock { $0.entryCount } } }

    /// Entries evicted for capacity since creation (a name's A and AAAA leave together: one eviction).
    package var evictions: Int { shards.reduce(0) { $0 + $1.lock.withLock { $0.evictions } } }

    /// Every entry, for persistence.
    package func snapshot() -> [(CacheKey, CacheEntry)] {
        shards.flatMap { box in
            box.lock.withLock { shard in
                var entries: [(CacheKey, CacheEntry)] = []
                for page in shard.pages {
                    for slot in page {
                        if let a = slot.a { entries.append((CacheKey(slot.name, .a), shard.entry(a))) }
                        if let aaaa = slot.aaaa { entries.append((CacheKey(slot.name, .aaaa), shard.entry(aaaa))) }
                    }
                }
                return entries + shard.others.map { ($0.key, $0.value) }
            }
        }
    }
}

extension ResolverInstant {
    /// The instant as whole nanoseconds since the clock's origin (the cache's compact form).
    fileprivate var nanoseconds: Int64 {
        let (seconds, attoseconds) = offset.components
        return seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
    }

    fileprivate init(nanoseconds: Int64) {
        self.init(offset: .nanoseconds(nanoseconds))
    }
}
