import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The last memo hits of this thread: a direct-mapped table per thread, read without a lock,
/// without hashing the whole host and without touching a cache line another core writes.
///
/// ``ResolutionMemo`` asks it first. A slot copies one of the memo's items with the memo's stamp
/// at the time it was read. Stamps come from one process-wide counter, so no two memos and no two
/// states of one memo share a stamp, and the memo takes a new one on every change that could make
/// its item differ (a cache store or removal, a DNSSEC label). A slot is therefore used only while
/// the shared item would itself be returned, and only before that item's `validUntil` (at most a
/// second away). The host is compared in full (it is the resolution's own `host`), so a slot that
/// two names share costs a trip to the memo, never a wrong answer; and a name that an attacker
/// makes collide gets nothing worse than the memo's ordinary path.
///
/// The table is 4,096 slots of 40 bytes, zeroed memory that the kernel maps only where a slot is
/// written: a thread that reads ten hot names holds ten pages at most. It is freed when the thread
/// ends (a pthread key destructor).
package enum ThreadHits {
    /// All-zero bytes are an empty slot: stamp 0 is never issued and a nil resolution is a null
    /// reference.
    private struct Slot {
        var stamp: UInt64
        var validUntil: ResolverInstant
        var resolution: Resolution?
        var type: AddressQuery
    }

    private static let slotBits = 12
    private static let slotCount = 1 << slotBits

    private static let stamps = Atomic<UInt64>(0)

    /// A stamp no memo state has had before.
    package static func newStamp() -> UInt64 {
        stamps.add(1, ordering: .relaxed).newValue
    }

    /// Nil when the process has no thread-local key left (`PTHREAD_KEYS_MAX`): every read then goes
    /// to the memo.
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        #if canImport(Darwin)
        let freeTable: @convention(c) (UnsafeMutableRawPointer) -> Void = { ThreadHits.discard($0) }
        #else
        let freeTable: @convention(c) (UnsafeMutableRawPointer?) -> Void = { if let table = $0 { ThreadHits.discard(table) } }
        #endif
        return pthread_key_create(&key, freeTable) == 0 ? key : nil
    }()

    private static func discard(_ table: UnsafeMutableRawPointer) {
        let slots = table.assumingMemoryBound(to: Slot.self)
        for index in 0..<slotCount where slots[index].stamp != 0 { (slots + index).deinitialize(count: 1) }
        free(table)
    }

    /// This thread's table, made on first use; nil when it cannot be made or registered, and then
    /// the memo is asked every time.
    @inline(__always)
    private static var slots: UnsafeMutablePointer<Slot>? {
        guard let key else { return nil }
        if let table = pthread_getspecific(key) { return table.assumingMemoryBound(to: Slot.self) }
        guard let table = calloc(slotCount, MemoryLayout<Slot>.stride) else { return nil }
        guard pthread_setspecific(key, table) == 0 else {
            free(table)
            return nil
        }
        return table.bindMemory(to: Slot.self, capacity: slotCount)
    }

    /// The slot for (`host`, `type`): from the length and up to 24 bytes of the host (its first,
    /// middle and last eight), mixed by multiplication.
    @inline(__always)
    private static func index(_ host: String, _ type: AddressQuery) -> Int {
        let seed = UInt64(truncatingIfNeeded: host.utf8.count) &+ (type == .a ? 0 : type == .aaaa ? 0x5bd1_e995 : 0xc2b2_ae35)
        let mix =
            host.utf8.withContiguousStorageIfAvailable { bytes -> UInt64 in
                var mix = seed
                guard let base = bytes.baseAddress, bytes.count >= 8 else {
                    for byte in bytes { mix = (mix << 8) | UInt64(byte) }
                    return mix
                }
                let raw = UnsafeRawPointer(base)
                mix ^= raw.loadUnaligned(as: UInt64.self)
                mix = (mix &* 0x9e37_79b9_7f4a_7c15) ^ raw.loadUnaligned(fromByteOffset: bytes.count / 2 - 4, as: UInt64.self)
                return (mix &* 0x9e37_79b9_7f4a_7c15) ^ raw.loadUnaligned(fromByteOffset: bytes.count - 8, as: UInt64.self)
            } ?? seed
        return Int(truncatingIfNeeded: (mix &* 0x9e37_79b9_7f4a_7c15) >> UInt64(64 - slotBits))
    }

    /// The resolution of (`host`, `type`) this thread kept from the memo state `stamp`, if still
    /// valid at `now`.
    @inline(__always)
    static func resolution(stamp: UInt64, host: String, type: AddressQuery, now: ResolverInstant) -> Resolution? {
        guard let slots else { return nil }
        let slot = slots + index(host, type)
        guard slot.pointee.stamp == stamp, slot.pointee.type == type, now < slot.pointee.validUntil,
            let resolution = slot.pointee.resolution, resolution.host == host
        else { return nil }
        return resolution
    }

    /// Keeps `resolution` (whose `host` is the host it was asked for), read from the memo state
    /// `stamp`, for this thread.
    @inline(__always)
    static func keep(_ resolution: Resolution, stamp: UInt64, type: AddressQuery, validUntil: ResolverInstant) {
        guard let slots else { return }
        let slot = slots + index(resolution.host, type)
        if slot.pointee.stamp == 0 {
            slot.initialize(to: Slot(stamp: stamp, validUntil: validUntil, resolution: resolution, type: type))
        } else {
            slot.pointee = Slot(stamp: stamp, validUntil: validUntil, resolution: resolution, type: type)
        }
    }
}
