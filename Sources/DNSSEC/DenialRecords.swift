import DNSCore

/// An NSEC record (RFC 4034 §4): the next owner name in the zone's canonical order and the types
/// present at the owner.
public struct NSECRecord: Sendable, Hashable {
    public let owner: DomainName
    public let next: DomainName
    public let types: Set<UInt16>

    public init(owner: DomainName, rdata: [UInt8]) throws(DNSSECFailure) {
        self.owner = owner
        let (next, end) = try RRSIG.name(in: rdata, at: 0)
        self.next = next
        types = try TypeBitmap.decode(rdata, from: end)
    }

    /// Whether `name` sorts strictly between the owner and the next name. The last NSEC of a zone
    /// wraps around to the apex: it covers only the names after its owner that are inside the
    /// zone, strictly below the apex (as unbound's `val_nsec_proves_name_error` requires). Without
    /// that, any zone's last NSEC — public, genuinely signed data — would deny names of every zone
    /// that sorts after it (`www.sig.test` by `rsa.sig.test`'s).
    func covers(_ name: DomainName) -> Bool {
        let afterOwner = CanonicalOrder.less(owner, name)
        guard CanonicalOrder.less(next, owner) || next == owner else { return afterOwner && CanonicalOrder.less(name, next) }
        return afterOwner && name != next && NameLabels.isSubdomain(name, of: next)
    }

    /// A delegation point as the parent sees it: NS without SOA.
    var isDelegation: Bool { types.contains(RecordType.ns.rawValue) && !types.contains(RecordType.soa.rawValue) }
}

/// An NSEC3 record (RFC 5155 §3): hashed owner and next owner, with the hash parameters.
public struct NSEC3Record: Sendable, Hashable {
    public let owner: DomainName
    /// The zone the record belongs to: the owner without its hash label.
    public let zone: DomainName
    public let hashAlgorithm: UInt8
    public let flags: UInt8
    public let iterations: UInt16
    public let salt: [UInt8]
    public let ownerHash: [UInt8]
    public let nextHash: [UInt8]
    public let types: Set<UInt16>

    public var optOut: Bool { flags & 0x01 != 0 }

    public init(owner: DomainName, rdata: [UInt8]) throws(DNSSECFailure) {
        self.owner = owner
        guard rdata.count >= 5 else { throw .malformed("an NSEC3 shorter than its fixed fields") }
        hashAlgorithm = rdata[0]
        flags = rdata[1]
        iterations = UInt16(rdata[2]) << 8 | UInt16(rdata[3])
        let saltLength = Int(rdata[4])
        guard rdata.count >= 6 + saltLength else { throw .malformed("an NSEC3 salt that runs past the record") }
        salt = Array(rdata[5..<(5 + saltLength)])
        let hashLength = Int(rdata[5 + saltLength])
        let hashStart = 6 + saltLength
        guard hashLength > 0, rdata.count >= hashStart + hashLength else { throw .malformed("an NSEC3 next hash that runs past the record") }
        nextHash = Array(rdata[hashStart..<(hashStart + hashLength)])
        types = try TypeBitmap.decode(rdata, from: hashStart + hashLength)
        let wire = owner.wire
        guard let first = wire.first, first > 0, let hash = Base32Hex.decode(wire[1...Int(first)]) else {
            throw .malformed("an NSEC3 owner whose first label is not base32hex")
        }
        guard hash.count == hashLength else { throw .malformed("an NSEC3 owner hash and next hash of different lengths") }
        ownerHash = hash
        zone = DomainName(uncheckedWire: Array(wire[(Int(first) + 1)...]))
    }

    func matches(_ hash: [UInt8]) -> Bool { hash == ownerHash }

    func covers(_ hash: [UInt8]) -> Bool {
        let afterOwner = hash.lexicographicallyPrecedes(ownerHash) == false && hash != ownerHash
        guard nextHash.lexicographicallyPrecedes(ownerHash) || nextHash == ownerHash else {
            return afterOwner && hash.lexicographicallyPrecedes(nextHash)
        }
        return afterOwner || hash.lexicographicallyPrecedes(nextHash)
    }

    var isDelegation: Bool { types.contains(RecordType.ns.rawValue) && !types.contains(RecordType.soa.rawValue) }
}

/// RFC 4034 §6.1: names compared label by label from the root, each label as lower-case bytes.
enum CanonicalOrder {
    static func labels(_ name: DomainName) -> [ArraySlice<UInt8>] {
        var out: [ArraySlice<UInt8>] = []
        var index = 0
        let wire = name.wire
        while index < wire.count, wire[index] != 0 {
            let length = Int(wire[index])
            out.append(wire[(index + 1)..<(index + 1 + length)])
            index += 1 + length
        }
        return out.reversed()
    }

    static func less(_ a: DomainName, _ b: DomainName) -> Bool {
        let left = labels(a)
        let right = labels(b)
        for (l, r) in zip(left, right) where l != r { return l.lexicographicallyPrecedes(r) }
        return left.count < right.count
    }
}

/// The type bitmap of NSEC and NSEC3 (RFC 4034 §4.1.2): windows of up to 32 bytes.
enum TypeBitmap {
    static func decode(_ bytes: [UInt8], from start: Int) throws(DNSSECFailure) -> Set<UInt16> {
        var types = Set<UInt16>()
        var index = start
        var lastWindow = -1
        while index < bytes.count {
            guard index + 2 <= bytes.count else { throw .malformed("a type bitmap window without its length") }
            let window = Int(bytes[index])
            let length = Int(bytes[index + 1])
            guard window > lastWindow, (1...32).contains(length), index + 2 + length <= bytes.count else {
                throw .malformed("a type bitmap window out of order or of a bad length")
            }
            lastWindow = window
            for offset in 0..<length {
                let byte = bytes[index + 2 + offset]
                for bit in 0..<8 where byte & (0x80 >> bit) != 0 { types.insert(UInt16(window << 8 | offset * 8 + bit)) }
            }
            index += 2 + length
        }
        return types
    }
}

/// RFC 4648 §7 base32 with the extended hex alphabet, unpadded, case-insensitive.
enum Base32Hex {
    static func decode<Bytes: Collection>(_ text: Bytes) -> [UInt8]? where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        var buffer = 0
        var bits = 0
        for character in text {
            let value: Int
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): value = Int(character - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "v"): value = Int(character - UInt8(ascii: "a")) + 10
            case UInt8(ascii: "A")...UInt8(ascii: "V"): value = Int(character - UInt8(ascii: "A")) + 10
            default: return nil
            }
            buffer = (buffer << 5 | value) & 0xFFFF
            bits += 5
            if bits >= 8 {
                bits -= 8
                out.append(UInt8((buffer >> bits) & 0xFF))
            }
        }
        // Leftover bits must be zero padding.
        guard buffer & ((1 << bits) - 1) == 0 else { return nil }
        return out
    }
}
