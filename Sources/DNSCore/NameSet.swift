/// A set of domain names kept as their wire forms back to back in one byte buffer, found through an
/// open-addressing table of 8-byte slots: the form that keeps a block list of a million names at
/// about 50 bytes a name and loads it without an allocation per name.
///
/// Each entry says what it covers: the name itself (a hosts-file line), the names under it
/// (`*.ads.test`), or both (a domain-list line `ads.test`, as dnscrypt-proxy and Blocky read it).
package struct NameSet: Sendable {
    /// What an entry covers.
    package struct Coverage: OptionSet, Sendable, Hashable {
        package let rawValue: UInt64
        package init(rawValue: UInt64) { self.rawValue = rawValue }
        /// The name itself.
        package static let apex = Coverage(rawValue: 1 << 32)
        /// Every name under it.
        package static let below = Coverage(rawValue: 1 << 33)
        package static let subtree: Coverage = [.apex, .below]
    }

    /// Wire forms, lower-cased, back to back (each ends with its root label).
    private var names: [UInt8] = []
    /// 0 = empty; otherwise the entry's offset in ``names`` plus one in the low 32 bits, its
    /// ``Coverage`` in the next two, and the top 30 bits of its hash above them, so that a probe
    /// reads the name only when those match (one cache miss a probe, not two).
    private var slots: [UInt64]
    package private(set) var count = 0

    private static let offsetMask: UInt64 = (1 << 32) - 1
    private static let coverageMask: UInt64 = 3 << 32
    private static let tagMask: UInt64 = ~((1 << 34) - 1)
    /// The most name bytes one set holds (the offsets' 32 bits).
    package static let maxBytes = Int(UInt32.max) - 1

    package init() {
        slots = Array(repeating: 0, count: 16)
    }

    /// Bytes held: the names and the table.
    package var memoryBytes: Int { names.capacity + slots.capacity * MemoryLayout<UInt64>.stride }

    /// Makes room for `more` entries without growing the table on the way.
    package mutating func reserve(_ more: Int) {
        var size = slots.count
        while (count + more) * 2 > size { size *= 2 }
        if size > slots.count { rehash(to: size) }
    }

    /// Adds the name whose lower-cased wire form is `wire`, covering `coverage` (merged with what an
    /// entry for the same name already covers). False when the set is full (``maxBytes``).
    @discardableResult
    package mutating func insert(wire: [UInt8], _ coverage: Coverage) -> Bool {
        let hash = Self.hash(wire, 0, wire.count, continuing: Self.seed)
        if let slot = find(wire, 0, wire.count, hash: hash) {
            slots[slot] |= coverage.rawValue
            return true
        }
        guard names.count + wire.count <= Self.maxBytes else { return false }
        if (count + 1) * 2 > slots.count { rehash(to: slots.count * 2) }
        let offset = UInt64(names.count)
        names.append(contentsOf: wire)
        place((offset + 1) | coverage.rawValue | (hash & Self.tagMask), hash: hash)
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
        // Every suffix's hash from one pass backwards (the hash runs from the root label up, so a
        // name's extends its parent's), then a probe at each label start.
        var starts = InlineArray<128, UInt8>(repeating: 0)
        var labels = 0
        var position = 0
        while wire[position] != 0 {
            starts[labels] = UInt8(position)
            labels += 1
            position += Int(wire[position]) + 1
        }
        var hash = Self.seed
        var end = wire.count
        for label in stride(from: labels - 1, through: 0, by: -1) {
            let start = Int(starts[label])
            hash = Self.hash(wire, start, end, continuing: hash)
            end = start
            if let slot = find(wire, start, wire.count, hash: hash),
                Coverage(rawValue: slots[slot] & Self.coverageMask).contains(label == 0 ? .apex : .below)
            {
                return true
            }
        }
        return false
    }

    /// The slot holding `wire[start..<end]`, or nil.
    private func find(_ wire: [UInt8], _ start: Int, _ end: Int, hash: UInt64) -> Int? {
        let mask = slots.count - 1
        let tag = hash & Self.tagMask
        var slot = Int(truncatingIfNeeded: hash) & mask
        while slots[slot] != 0 {
            let entry = slots[slot]
            if entry & Self.tagMask == tag, Self.equal(names, at: Int(entry & Self.offsetMask) - 1, wire, start, end) { return slot }
            slot = (slot + 1) & mask
        }
        return nil
    }

    /// Whether the name stored at `offset` is `wire[start..<end]`. Both are whole wire forms, so
    /// equal bytes up to the root label mean equal names.
    private static func equal(_ names: [UInt8], at offset: Int, _ wire: [UInt8], _ start: Int, _ end: Int) -> Bool {
        guard offset + (end - start) <= names.count else { return false }
        var index = offset
        for position in start..<end {
            guard names[index] == wire[position] else { return false }
            index += 1
        }
        return true
    }

    private mutating func place(_ entry: UInt64, hash: UInt64) {
        let mask = slots.count - 1
        var slot = Int(truncatingIfNeeded: hash) & mask
        while slots[slot] != 0 { slot = (slot + 1) & mask }
        slots[slot] = entry
    }

    private mutating func rehash(to size: Int) {
        let old = slots
        slots = Array(repeating: 0, count: size)
        for entry in old where entry != 0 {
            let offset = Int(entry & Self.offsetMask) - 1
            place(entry, hash: Self.hash(names, offset, offset + Self.wireLength(names, at: offset), continuing: Self.seed))
        }
    }

    private static func wireLength(_ names: [UInt8], at offset: Int) -> Int {
        var index = offset
        while names[index] != 0 { index += Int(names[index]) + 1 }
        return index - offset + 1
    }

    private static let seed: UInt64 = 0xcbf2_9ce4_8422_2325

    /// FNV-1a, 64 bits, over `bytes[start..<end]` from last to first, continuing from `hash`.
    private static func hash(_ bytes: [UInt8], _ start: Int, _ end: Int, continuing hash: UInt64) -> UInt64 {
        var hash = hash
        var index = end
        while index > start {
            index -= 1
            hash ^= UInt64(bytes[index])
            hash &*= 0x0000_0100_0000_01b3
        }
        return hash
    }
}
