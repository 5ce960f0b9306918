import Crypto
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

    /// Whether `name` sorts strictly between the owner and the next name (the last NSEC of a zone
    /// wraps around to the apex).
    func covers(_ name: DomainName) -> Bool {
        let afterOwner = CanonicalOrder.less(owner, name)
        guard CanonicalOrder.less(next, owner) || next == owner else { return afterOwner && CanonicalOrder.less(name, next) }
        return afterOwner || CanonicalOrder.less(name, next)
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

    /// RFC 5155 §5: iterated SHA-1 of the canonical (lower-case wire) name with the salt.
    public static func hash(_ name: DomainName, salt: [UInt8], iterations: UInt16) -> [UInt8] {
        var digest = Array(Insecure.SHA1.hash(data: name.wire + salt))
        for _ in 0..<iterations { digest = Array(Insecure.SHA1.hash(data: digest + salt)) }
        return digest
    }
}

/// What authenticated denial proves about a name and type, from NSEC or NSEC3 records that have
/// already been validated (RFC 4035 §5.4, RFC 5155 §8).
public enum DenialProof: Sendable, Equatable {
    /// The name exists (or a wildcard that would match it does) without the type. `delegation`:
    /// the name is a zone cut seen from the parent (NS, no SOA) — for a DS query, an unsigned child.
    case noData(delegation: Bool)
    /// Neither the name nor a wildcard that could match it exists.
    case nameError
    /// NSEC3 opt-out covers the name: an unsigned delegation may exist there (RFC 5155 §6, §8.6).
    case optOut
}

public enum Denial {
    /// RFC 9276 §3.2: validators may treat NSEC3 with more iterations as unproven; 150 is what
    /// Unbound and BIND chose.
    public static let maxIterations: UInt16 = 150

    /// The proof that `name` has no `type` records, or the reason there is none.
    public static func prove(_ name: DomainName, type: RecordType, nsec: [NSECRecord], nsec3: [NSEC3Record]) throws(DNSSECFailure) -> DenialProof {
        if !nsec.isEmpty { return try proveWithNSEC(name, type: type, records: nsec) }
        if !nsec3.isEmpty { return try proveWithNSEC3(name, type: type, records: nsec3) }
        throw .unproven("no NSEC or NSEC3 records deny \(name) \(type)")
    }

    /// For an answer expanded from a wildcard whose source keeps `sourceLabels` labels of `name`:
    /// proof that `name` itself does not exist (RFC 4035 §5.3.4, RFC 5155 §8.8). Returns true when
    /// the covering NSEC3 is opt-out: the name may sit under an unsigned delegation, so the answer
    /// is insecure (as Unbound and BIND conclude).
    public static func proveExpansion(
        of name: DomainName, sourceLabels: Int, nsec: [NSECRecord], nsec3: [NSEC3Record]
    ) throws(DNSSECFailure)
        -> Bool
    {
        if nsec.contains(where: { $0.owner != name && $0.covers(name) && !isBelowCut(name, $0) }) { return false }
        if let first = nsec3.first {
            try checkIterations(first)
            let nextCloser = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: sourceLabels + 1))
            let hash = NSEC3Record.hash(nextCloser, salt: first.salt, iterations: first.iterations)
            if let covering = nsec3.first(where: { $0.covers(hash) }) { return covering.optOut }
        }
        throw .unproven("no NSEC or NSEC3 proves that \(name) does not exist, so the wildcard answer is unproven")
    }

    static func proveWithNSEC(_ name: DomainName, type: RecordType, records: [NSECRecord]) throws(DNSSECFailure) -> DenialProof {
        if let match = records.first(where: { $0.owner == name }) {
            try checkAbsent(type, in: match.types, at: name)
            return .noData(delegation: match.isDelegation)
        }
        guard let covering = records.first(where: { $0.covers(name) && !isBelowCut(name, $0) }) else {
            throw .unproven("no NSEC matches or covers \(name)")
        }
        // An empty non-terminal: the next name lies below it (RFC 4035 §3.1.3.2, RFC 7129 §3).
        if DNSSECVerifier.isSubdomain(covering.next, of: name) { return .noData(delegation: false) }
        let encloser = closestEncloser(of: name, owner: covering.owner, next: covering.next)
        let wildcard = DomainName(uncheckedWire: [1, UInt8(ascii: "*")] + encloser.wire)
        if let wildcardMatch = records.first(where: { $0.owner == wildcard }) {
            try checkAbsent(type, in: wildcardMatch.types, at: wildcard)
            return .noData(delegation: false)
        }
        guard records.contains(where: { $0.covers(wildcard) && !isBelowCut(wildcard, $0) }) else {
            throw .unproven("no NSEC denies the wildcard \(wildcard) that could answer \(name)")
        }
        return .nameError
    }

    static func proveWithNSEC3(_ name: DomainName, type: RecordType, records: [NSEC3Record]) throws(DNSSECFailure) -> DenialProof {
        let parameters = records[0]
        try checkIterations(parameters)
        guard parameters.hashAlgorithm == 1 else { throw .unproven("NSEC3 hash algorithm \(parameters.hashAlgorithm) is not SHA-1") }
        func hash(_ name: DomainName) -> [UInt8] { NSEC3Record.hash(name, salt: parameters.salt, iterations: parameters.iterations) }
        let sameZone = records.filter { $0.zone == parameters.zone && $0.salt == parameters.salt && $0.iterations == parameters.iterations }
        guard DNSSECVerifier.isSubdomain(name, of: parameters.zone) else {
            throw .unproven("NSEC3 records of \(parameters.zone) cannot deny \(name)")
        }
        if let match = sameZone.first(where: { $0.matches(hash(name)) }) {
            try checkAbsent(type, in: match.types, at: name)
            return .noData(delegation: match.isDelegation)
        }
        // Closest encloser proof (§8.3): the longest existing ancestor, and the next closer name covered.
        let total = DNSSECVerifier.labelCount(name)
        let zoneLabels = DNSSECVerifier.labelCount(parameters.zone)
        var labels = total - 1
        while labels >= zoneLabels {
            let candidate = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels))
            if let encloser = sameZone.first(where: { $0.matches(hash(candidate)) }) {
                if encloser.isDelegation || encloser.types.contains(RecordType.dname.rawValue) {
                    throw .unproven("the closest encloser \(candidate) of \(name) is a delegation or DNAME: the proof is not the zone's to give")
                }
                let nextCloser = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels + 1))
                guard let covering = sameZone.first(where: { $0.covers(hash(nextCloser)) }) else {
                    throw .unproven("no NSEC3 covers the next closer name \(nextCloser)")
                }
                if covering.optOut { return .optOut }
                let wildcard = DomainName(uncheckedWire: [1, UInt8(ascii: "*")] + candidate.wire)
                if let wildcardMatch = sameZone.first(where: { $0.matches(hash(wildcard)) }) {
                    try checkAbsent(type, in: wildcardMatch.types, at: wildcard)
                    return .noData(delegation: false)
                }
                guard sameZone.contains(where: { $0.covers(hash(wildcard)) }) else {
                    throw .unproven("no NSEC3 denies the wildcard \(wildcard) that could answer \(name)")
                }
                return .nameError
            }
            labels -= 1
        }
        throw .unproven("no NSEC3 proves a closest encloser of \(name)")
    }

    static func checkIterations(_ record: NSEC3Record) throws(DNSSECFailure) {
        guard record.iterations <= maxIterations else {
            throw .tooCostly("NSEC3 with \(record.iterations) iterations (at most \(maxIterations), RFC 9276)")
        }
    }

    static func checkAbsent(_ type: RecordType, in types: Set<UInt16>, at name: DomainName) throws(DNSSECFailure) {
        if types.contains(type.rawValue) || (type != .ds && types.contains(RecordType.cname.rawValue)) {
            throw .unproven("the denial for \(name) lists \(type) (or a CNAME) as present")
        }
    }

    /// An NSEC at a delegation point, or at a DNAME, says nothing about names below it.
    static func isBelowCut(_ name: DomainName, _ record: NSECRecord) -> Bool {
        guard name != record.owner, DNSSECVerifier.isSubdomain(name, of: record.owner) else { return false }
        return record.isDelegation || record.types.contains(RecordType.dname.rawValue)
    }

    /// The longest ancestor of `name` shared with the covering NSEC's owner or next name.
    static func closestEncloser(of name: DomainName, owner: DomainName, next: DomainName) -> DomainName {
        func common(_ a: DomainName, _ b: DomainName) -> Int {
            var labels = 0
            while labels < min(DNSSECVerifier.labelCount(a), DNSSECVerifier.labelCount(b)),
                DNSSECVerifier.suffix(of: a.wire, labels: labels + 1) == DNSSECVerifier.suffix(of: b.wire, labels: labels + 1)
            {
                labels += 1
            }
            return labels
        }
        let labels = max(common(name, owner), common(name, next))
        return DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels))
    }
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
