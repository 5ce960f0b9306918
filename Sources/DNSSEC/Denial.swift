import Crypto
import DNSCore

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
        // The NSEC3 records of the zone the name is in, and no other: a sibling's or parent's
        // chain hashes the same names into another ordering and proves nothing here.
        if let zone = closestZone(of: name, type: nil, in: nsec3), sourceLabels + 1 <= DNSSECVerifier.labelCount(name),
            sourceLabels >= DNSSECVerifier.labelCount(zone.parameters.zone)
        {
            try checkIterations(zone.parameters)
            let nextCloser = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: sourceLabels + 1))
            let hash = NSEC3Record.hash(nextCloser, salt: zone.parameters.salt, iterations: zone.parameters.iterations)
            if let covering = zone.records.first(where: { $0.covers(hash) }) { return covering.optOut }
        }
        throw .unproven("no NSEC or NSEC3 proves that \(name) does not exist, so the wildcard answer is unproven")
    }

    static func proveWithNSEC(_ name: DomainName, type: RecordType, records: [NSECRecord]) throws(DNSSECFailure) -> DenialProof {
        if let match = records.first(where: { $0.owner == name }) {
            try checkSide(of: match.types, at: name, for: type)
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
        guard let (parameters, sameZone) = closestZone(of: name, type: type, in: records) else {
            throw .unproven("no NSEC3 records of a zone that holds \(name) \(type)")
        }
        try checkIterations(parameters)
        guard parameters.hashAlgorithm == 1 else { throw .unproven("NSEC3 hash algorithm \(parameters.hashAlgorithm) is not SHA-1") }
        func hash(_ name: DomainName) -> [UInt8] { NSEC3Record.hash(name, salt: parameters.salt, iterations: parameters.iterations) }
        let nameHash = hash(name)
        if let match = sameZone.first(where: { $0.matches(nameHash) }) {
            try checkSide(of: match.types, at: name, for: type)
            try checkAbsent(type, in: match.types, at: name)
            return .noData(delegation: match.isDelegation)
        }
        // Closest encloser proof (§8.3): the longest existing ancestor, and the next closer name covered.
        let total = DNSSECVerifier.labelCount(name)
        let zoneLabels = DNSSECVerifier.labelCount(parameters.zone)
        var labels = total - 1
        while labels >= zoneLabels {
            let candidate = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels))
            let candidateHash = hash(candidate)
            if let encloser = sameZone.first(where: { $0.matches(candidateHash) }) {
                if encloser.isDelegation || encloser.types.contains(RecordType.dname.rawValue) {
                    throw .unproven("the closest encloser \(candidate) of \(name) is a delegation or DNAME: the proof is not the zone's to give")
                }
                let nextCloser = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels + 1))
                let nextCloserHash = hash(nextCloser)
                guard let covering = sameZone.first(where: { $0.covers(nextCloserHash) }) else {
                    throw .unproven("no NSEC3 covers the next closer name \(nextCloser)")
                }
                if covering.optOut { return .optOut }
                let wildcard = DomainName(uncheckedWire: [1, UInt8(ascii: "*")] + candidate.wire)
                let wildcardHash = hash(wildcard)
                if let wildcardMatch = sameZone.first(where: { $0.matches(wildcardHash) }) {
                    try checkAbsent(type, in: wildcardMatch.types, at: wildcard)
                    return .noData(delegation: false)
                }
                guard sameZone.contains(where: { $0.covers(wildcardHash) }) else {
                    throw .unproven("no NSEC3 denies the wildcard \(wildcard) that could answer \(name)")
                }
                return .nameError
            }
            labels -= 1
        }
        throw .unproven("no NSEC3 proves a closest encloser of \(name)")
    }

    /// The NSEC3 records of the zone that answers for `name` `type` — the deepest zone among them
    /// that holds the name; for DS, strictly above it (the parent answers for DS, RFC 4035 §5.2) —
    /// with that zone's hash parameters (the first record's). Records of other zones, or of other
    /// parameters, are left out: each zone's chain proves things about that zone only.
    static func closestZone(of name: DomainName, type: RecordType?, in records: [NSEC3Record]) -> (parameters: NSEC3Record, records: [NSEC3Record])? {
        let holding = records.filter { record in
            DNSSECVerifier.isSubdomain(name, of: record.zone) && (type != .ds || name != record.zone || name.wire == DomainName.root.wire)
        }
        guard let parameters = holding.max(by: { DNSSECVerifier.labelCount($0.zone) < DNSSECVerifier.labelCount($1.zone) }) else { return nil }
        let same = holding.filter { $0.zone == parameters.zone && $0.salt == parameters.salt && $0.iterations == parameters.iterations }
        return (parameters, same)
    }

    /// A record at a zone cut is two records: the parent's (NS, no SOA) speaks only for DS and the
    /// delegation; the child's apex (SOA) for everything but DS. Used for the other side's type it
    /// would deny what the other zone holds (unbound's `nsec_proves_nodata` refuses both).
    static func checkSide(of types: Set<UInt16>, at name: DomainName, for type: RecordType) throws(DNSSECFailure) {
        let parentSide = types.contains(RecordType.ns.rawValue) && !types.contains(RecordType.soa.rawValue)
        if parentSide, type != .ds {
            throw .unproven("the denial for \(name) \(type) is the parent's record at a delegation: it says nothing of the child's data")
        }
        if type == .ds, types.contains(RecordType.soa.rawValue), name.wire != DomainName.root.wire {
            throw .unproven("the denial of DS at \(name) is the child zone's apex record: only the parent can deny DS")
        }
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

extension NSEC3Record {
    /// RFC 5155 §5: iterated SHA-1 of the canonical (lower-case wire) name with the salt.
    public static func hash(_ name: DomainName, salt: [UInt8], iterations: UInt16) -> [UInt8] {
        var digest = Array(Insecure.SHA1.hash(data: name.wire + salt))
        for _ in 0..<iterations { digest = Array(Insecure.SHA1.hash(data: digest + salt)) }
        return digest
    }
}
