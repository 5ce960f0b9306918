/// A set of domain names kept as their wire forms back to back in one byte buffer, found through an
/// open-addressing table of 4-byte offsets: the form that keeps a block list of a million names at
/// about 35 bytes a name (a `Set<String>` of the same names costs about 90) and loads it without an
/// allocation per name.
///
/// Each entry says what it covers: the name itself (a hosts-file line), the names under it
/// (`*.ads.test`), or both (a domain-list line `ads.test`, as dnscrypt-proxy and Blocky read it).
package struct NameSet: Sendable {
    /// What an entry covers.
    package struct Coverage: OptionSet, Sendable, Hashable {
        package let rawValue: UInt32
        package init(rawValue: UInt32) { self.rawValue = rawValue }
        /// The name itself.
        package static let apex = Coverage(rawValue: 1 << 30)
        /// Every name under it.
        package static let below = Coverage(rawValue: 1 << 31)
        package static let subtree: Coverage = [.apex, .below]
    }

    /// Wire forms, lower-cased, back to back (each ends with its root label).
    private var names: [UInt8] = []
    /// 0 = empty; otherwise the entry's offset in ``names`` plus one in the low 30 bits and its
    /// ``Coverage`` in the top two.
    private var slots: [UInt32]
    package private(set) var count = 0

    private static let offsetMask: UInt32 = (1 << 30) - 1
    /// The most name bytes one set holds (the offsets' 30 bits).
    package static let maxBytes = Int(offsetMask) - 1

    package init() {
        slots = Array(repeating: 0, count: 16)
    }

    /// Bytes held: the names and the table.
    package var memoryBytes: Int { names.capacity + slots.capacity * MemoryLayout<UInt32>.stride }

    /// Adds the name whose lower-cased wire form is `wire`, covering `coverage` (merged with what an
    /// entry for the same name already covers). False when the set is full (``maxBytes``).
    @discardableResult
    package mutating func insert(wire: some RandomAccessCollection<UInt8>, _ coverage: Coverage) -> Bool {
        let hash = Self.hash(wire)
        if let slot = find(wire, hash: hash) {
            slots[slot] |= coverage.rawValue
            return true
        }
        guard names.count + wire.count <= Self.maxBytes else { return false }
        if (count + 1) * 2 > slots.count { grow() }
        let offset = UInt32(names.count)
        names.append(contentsOf: wire)
        var slot = Int(truncatingIfNeeded: hash) & (slots.count - 1)
        while slots[slot] != 0 { slot = (slot + 1) & (slots.count - 1) }
        slots[slot] = (offset + 1) | coverage.rawValue
        count += 1
        return true
    }

    /// Adds `name`.
    @discardableResult
    package mutating func insert(_ name: DomainName, _ coverage: Coverage) -> Bool {
        insert(wire: name.wire, coverage)
    }

    /// Whether an entry covers `name`: one for the name itself with ``Coverage/apex``, or one for a
    /// name above it with ``Coverage/below``.
    package func covers(_ name: DomainName) -> Bool {
        guard count > 0 else { return false }
        let wire = name.wire
        var start = 0
        while start < wire.count, wire[start] != 0 {
            let needed: Coverage = start == 0 ? .apex : .below
            let suffix = wire[start...]
            if let slot = find(suffix, hash: Self.hash(suffix)), Coverage(rawValue: slots[slot] & ~Self.offsetMask).contains(needed) {
                return true
            }
            start += Int(wire[start]) + 1
        }
        return false
    }

    /// The slot holding `wire`, or nil.
    private func find(_ wire: some RandomAccessCollection<UInt8>, hash: UInt64) -> Int? {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while slots[slot] != 0 {
            let offset = Int(slots[slot] & Self.offsetMask) - 1
            if Self.equal(names, at: offset, wire) { return slot }
            slot = (slot + 1) & mask
        }
        return nil
    }

    /// Whether the name stored at `offset` is `wire`. Both are whole wire forms, so equal bytes up
    /// to `wire`'s root label mean equal names.
    private static func equal(_ names: [UInt8], at offset: Int, _ wire: some RandomAccessCollection<UInt8>) -> Bool {
        guard offset + wire.count <= names.count else { return false }
        var index = offset
        for byte in wire {
            guard names[index] == byte else { return false }
            index += 1
        }
        return true
    }

    private mutating func grow() {
        let old = slots
        slots = Array(repeating: 0, count: old.count * 2)
        let mask = slots.count - 1
        for entry in old where entry != 0 {
            let offset = Int(entry & Self.offsetMask) - 1
            let length = Self.wireLength(names, at: offset)
            var slot = Int(truncatingIfNeeded: Self.hash(names[offset..<(offset + length)])) & mask
            while slots[slot] != 0 { slot = (slot + 1) & mask }
            slots[slot] = entry
        }
    }

    private static func wireLength(_ names: [UInt8], at offset: Int) -> Int {
        var index = offset
        while names[index] != 0 { index += Int(names[index]) + 1 }
        return index - offset + 1
    }

    /// FNV-1a, 64 bits.
    private static func hash(_ bytes: some Sequence<UInt8>) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }
}
