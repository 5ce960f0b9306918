import Synchronization

/// Finished resolutions by the host string as the caller wrote it: the cache-hit fast path.
///
/// A hit in ``ResolutionCache`` still parses the name, copies entries, counts down TTLs, applies the
/// rebinding filter and merges A with AAAA. For a hot name those steps give the same result for a
/// whole second, so the result is kept here, keyed by the caller's string, and returned as it is.
/// An item is used only while
/// - the cache has not changed since it was built (one generation counter, bumped on every store or
///   removal, read with one atomic load),
/// - the TTLs it reports are still right to the second (at most 1 s after it was built), and
/// - no entry in it has reached its prefetch window (hits there must take the slow path, which
///   starts the refresh).
/// Stale answers, failures and partial answers are never kept here.
///
/// A hit is copied into the reading thread's ``ThreadHits`` table, so the next hit of that name on
/// that thread needs neither the dictionary's hash of the host nor the shard's lock.
package final class ResolutionMemo: Sendable {
    private struct Key: Hashable {
        var host: String
        var type: AddressQuery
    }

    /// A value: a ``Resolution`` is one reference (its fields are boxed), so a lookup copies one
    /// reference under the lock, and no item box is retained and released around it.
    private struct Item: Sendable {
        var resolution: Resolution
        var validUntil: ResolverInstant
        var generation: UInt64
    }

    private final class Shard: Sendable {
        let items = Mutex<[Key: Item]>([:])
    }

    private let shards: [Shard]
    private let shardLimit: Int
    private let generation = Atomic<UInt64>(0)
    /// Renewed with `generation` and on every label: the stamp of the thread-local copies.
    private let stamp = Atomic<UInt64>(ThreadHits.newStamp())

    /// - Parameters:
    ///   - capacity: items kept at most; a full shard is emptied (hot names come back at once).
    ///   - shardCount: how many locks the items are spread over.
    package init(capacity: Int = 32_768, shardCount: Int = 8) {
        shards = (0..<shardCount).map { _ in Shard() }
        shardLimit = max(1, capacity / shardCount)
    }

    /// Marks every item out of date; called whenever the cache changes.
    @inline(__always)
    package func invalidate() {
        generation.add(1, ordering: .releasing)
        stamp.store(ThreadHits.newStamp(), ordering: .releasing)
    }

    /// The current generation, to be passed back to ``store(_:for:type:validUntil:generation:)``:
    /// read it *before* reading the cache, so a change made meanwhile makes the item unusable.
    @inline(__always)
    package var currentGeneration: UInt64 { generation.load(ordering: .acquiring) }

    /// The shard for `host`, from its length and last bytes: cheap, and a second full hash of the
    /// key (the dictionary makes one) would cost as much as the rest of the hit.
    @inline(__always)
    private func shard(_ host: String) -> Shard {
        var mix = UInt(host.utf8.count)
        for byte in host.utf8.suffix(4) { mix = mix &* 31 &+ UInt(byte) }
        return shards[Int(mix % UInt(shards.count))]
    }

    /// The kept resolution for `host`, if still valid at `now`.
    @inline(__always)
    package func resolution(for host: String, type: AddressQuery, now: ResolverInstant) -> Resolution? {
        let stamp = self.stamp.load(ordering: .acquiring)
        if let kept = ThreadHits.resolution(stamp: stamp, host: host, type: type, now: now) { return kept }
        let key = Key(host: host, type: type)
        let current = currentGeneration
        guard let item = shard(host).items.withLock({ $0[key] }),
            item.generation == current, now < item.validUntil
        else { return nil }
        ThreadHits.keep(item.resolution, stamp: stamp, type: type, validUntil: item.validUntil)
        return item.resolution
    }

    package func store(
        _ resolution: Resolution, for host: String, type: AddressQuery,
        validUntil: ResolverInstant, generation: UInt64
    ) {
        assert(resolution.host == host, "the thread-local copies find an item by its resolution's host")
        let key = Key(host: host, type: type)
        shard(host).items.withLock { items in
            if items.count >= shardLimit, items[key] == nil { items.removeAll(keepingCapacity: true) }
            items[key] = Item(resolution: resolution, validUntil: validUntil, generation: generation)
        }
    }

    /// Puts a DNSSEC status on the kept resolution for `host` when it still holds `addresses`, so
    /// that the hits of the rest of its second come labelled without another lookup.
    package func label(_ host: String, type: AddressQuery, with status: DNSSECStatus, addresses: [ResolvedAddress]) {
        let key = Key(host: host, type: type)
        shard(host).items.withLock { items in
            guard let item = items[key], item.resolution.dnssec == nil, item.resolution.addresses == addresses else { return }
            var labelled = item.resolution
            labelled.dnssec = status
            items[key] = Item(resolution: labelled, validUntil: item.validUntil, generation: item.generation)
            stamp.store(ThreadHits.newStamp(), ordering: .releasing)
        }
    }

    package func removeAll() {
        invalidate()
        for shard in shards { shard.items.withLock { $0.removeAll() } }
    }
}
