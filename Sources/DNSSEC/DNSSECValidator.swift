import DNSCore
import Foundation

/// What validation proved about an answer (RFC 4035 §4.3).
public enum DNSSECStatus: Sendable, Equatable {
    /// A chain of signatures from a trust anchor to the answer.
    case secure
    /// Proven unsigned below a trust anchor.
    case insecure
    /// A trust anchor covers the name but the chain fails: the reason says where.
    case bogus(String)
    /// Validation could not decide: no trust anchor covers the name, a bound was hit, or what the
    /// proof needs (such as authenticated denial) is not implemented yet.
    case indeterminate(String)

    /// The contract's word: `secure`, `insecure`, `bogus`, `indeterminate`.
    public var name: String {
        switch self {
        case .secure: return "secure"
        case .insecure: return "insecure"
        case .bogus: return "bogus"
        case .indeterminate: return "indeterminate"
        }
    }
}

/// Trust anchors: DS or DNSKEY records for zone apexes, from a file in zone-file presentation
/// format (`trust_anchors:` / `--trust-anchors`), one record per line:
///
/// ```
/// sec.test. 3600 IN DS 40440 13 2 4B9A…
/// sec.test. IN DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==
/// ```
/// Comments (`;`), blank lines, TTL and class are allowed; names are absolute.
public struct TrustAnchors: Sendable {
    public var ds: [DomainName: [DSRecord]] = [:]
    public var keys: [DomainName: [DNSKEY]] = [:]

    public init() {}

    /// The root zone's KSKs as IANA publishes them (root-anchors.xml): 20326 (since 2017) and
    /// 38696 (since 2024), both RSA/SHA-256, as SHA-256 DS digests.
    public static let root: TrustAnchors = {
        var anchors = TrustAnchors()
        anchors.ds[.root] = [
            DSRecord(keyTag: 20326, algorithm: 8, digestType: 2, digest: hex("E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D")!),
            DSRecord(keyTag: 38696, algorithm: 8, digestType: 2, digest: hex("683D2D0ACB8C9B712A1948B27F741219298D0A450D612C483AF444A4C0FB2B16")!),
        ]
        return anchors
    }()

    public init(presentation text: String) throws(DNSSECFailure) {
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            var fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard !fields.isEmpty else { continue }
            let owner: DomainName
            do { owner = try DomainName(fields.removeFirst()) } catch { throw .malformed("line \(number + 1): \(error.message)") }
            if let first = fields.first, UInt32(first) != nil { fields.removeFirst() }  // TTL
            if fields.first?.uppercased() == "IN" { fields.removeFirst() }
            guard let type = fields.first?.uppercased() else { throw .malformed("line \(number + 1): no record type") }
            fields.removeFirst()
            switch type {
            case "DS":
                guard fields.count >= 4, let tag = UInt16(fields[0]), let algorithm = UInt8(fields[1]), let digestType = UInt8(fields[2]),
                    let digest = Self.hex(fields[3...].joined())
                else { throw .malformed("line \(number + 1): a DS needs key tag, algorithm, digest type and hex digest") }
                ds[owner, default: []].append(DSRecord(keyTag: tag, algorithm: algorithm, digestType: digestType, digest: digest))
            case "DNSKEY":
                guard fields.count >= 4, let flags = UInt16(fields[0]), let proto = UInt8(fields[1]), let algorithm = UInt8(fields[2]),
                    let key = Data(base64Encoded: fields[3...].joined())
                else { throw .malformed("line \(number + 1): a DNSKEY needs flags, protocol, algorithm and base64 key") }
                keys[owner, default: []].append(try DNSKEY(rdata: [UInt8(flags >> 8), UInt8(flags & 0xFF), proto, algorithm] + Array(key)))
            default:
                throw .malformed("line \(number + 1): \(type) is not a trust anchor (DS or DNSKEY)")
            }
        }
    }

    /// The closest zone at or above `name` that has an anchor.
    func closestAnchor(to name: DomainName) -> DomainName? {
        var labels = DNSSECVerifier.labelCount(name)
        while labels >= 0 {
            let zone = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: name.wire, labels: labels))
            if ds[zone] != nil || keys[zone] != nil { return zone }
            labels -= 1
        }
        return nil
    }

    static func hex(_ text: String) -> [UInt8]? {
        let digits = Array(text.utf8)
        guard digits.count % 2 == 0, !digits.isEmpty else { return nil }
        var out: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<(index + 2)], as: UTF8.self), radix: 16) else { return nil }
            out.append(byte)
        }
        return out
    }
}

/// Validates positive answers from a chain of DNSKEY and DS sets up to a trust anchor (RFC 4035
/// §5). Queries go through `fetch` (the trusted upstreams, with DO and CD), so the validator is
/// I/O-free and testable with fakes. Bounded: at most ``maxQueries`` fetches and ``maxDepth`` zones.
///
/// Not yet: authenticated denial (NSEC/NSEC3), so a delegation without DS is `indeterminate`
/// rather than proven `insecure`, and negative answers are not validated.
public struct DNSSECValidator: Sendable {
    public typealias Fetch = @Sendable (DomainName, RecordType) async throws -> DNSMessage

    public let anchors: TrustAnchors
    public let fetch: Fetch
    public var maxQueries = 16
    public var maxDepth = 8
    public var skew = DNSSECVerifier.defaultSkew

    public init(anchors: TrustAnchors, fetch: @escaping Fetch) {
        self.anchors = anchors
        self.fetch = fetch
    }

    /// The status of the `type` RRset of `name` in `response` (its answer section, with RRSIGs).
    public func validate(_ response: DNSMessage, name: DomainName, type: RecordType, now: UInt32) async -> DNSSECStatus {
        guard anchors.closestAnchor(to: name) != nil else { return .indeterminate("no trust anchor covers \(name)") }
        var budget = maxQueries
        do {
            let (rrset, signatures) = Self.rrset(in: response.answers, name: name, type: type)
            guard !rrset.isEmpty else { return .indeterminate("the answer holds no \(type) records for \(name)") }
            return try await validate(rrset, signatures: signatures, now: now, depth: 0, budget: &budget)
        } catch let failure as DNSSECFailure {
            return .bogus(failure.description)
        } catch let bound as Bound {
            return .indeterminate(bound.reason)
        } catch {
            return .indeterminate("fetching the chain failed: \(error)")
        }
    }

    struct Bound: Error { var reason: String }

    /// An RRset is secure when one of its signatures verifies with a key of a secure DNSKEY set.
    private func validate(
        _ rrset: [DNSMessage.Record], signatures: [RRSIG], now: UInt32, depth: Int, budget: inout Int
    ) async throws -> DNSSECStatus {
        guard !signatures.isEmpty else { throw DNSSECFailure.malformed("\(rrset[0].name) \(rrset[0].type) is not signed") }
        var lastFailure: DNSSECFailure = .badSignature
        for signature in signatures {
            let keys = try await secureKeys(of: signature.signerName, now: now, depth: depth + 1, budget: &budget)
            if case .some(let status) = keys.status { return status }
            for key in keys.keys where key.keyTag == signature.keyTag && key.algorithm == signature.algorithm {
                do {
                    try DNSSECVerifier.verify(rrset, signature: signature, key: key, now: now, skew: skew)
                    return .secure
                } catch { lastFailure = error }
            }
        }
        throw lastFailure
    }

    /// The zone's DNSKEY set once proven from an anchor or a secure DS set (`status` set when the
    /// chain ends otherwise: indeterminate).
    private func secureKeys(of zone: DomainName, now: UInt32, depth: Int, budget: inout Int) async throws -> (keys: [DNSKEY], status: DNSSECStatus?) {
        guard depth <= maxDepth else { throw Bound(reason: "a chain longer than \(maxDepth) zones") }
        let response = try await ask(zone, .dnskey, budget: &budget)
        let (records, signatures) = Self.rrset(in: response.answers, name: zone, type: .dnskey)
        let keys = records.compactMap { record -> DNSKEY? in
            guard case .opaque(let rdata) = record.data else { return nil }
            return try? DNSKEY(rdata: rdata)
        }
        guard !keys.isEmpty else { throw DNSSECFailure.malformed("\(zone) has no DNSKEY set") }
        // The keys that the parent (or an anchor) vouches for.
        var entry: [DNSKEY]
        if let anchoredKeys = anchors.keys[zone] {
            entry = keys.filter { key in anchoredKeys.contains { $0.rdata == key.rdata } }
        } else {
            let ds: [DSRecord]
            if let anchoredDS = anchors.ds[zone] {
                ds = anchoredDS
            } else {
                guard DNSSECVerifier.labelCount(zone) > 0 else { return ([], .indeterminate("no trust anchor above \(zone)")) }
                let parentResponse = try await ask(zone, .ds, budget: &budget)
                let (dsRecords, dsSignatures) = Self.rrset(in: parentResponse.answers, name: zone, type: .ds)
                guard !dsRecords.isEmpty else {
                    return ([], .indeterminate("\(zone) has no DS: proving the delegation unsigned needs NSEC/NSEC3, not implemented yet"))
                }
                let status = try await validate(dsRecords, signatures: dsSignatures, now: now, depth: depth, budget: &budget)
                guard status == .secure else { return ([], status) }
                ds = dsRecords.compactMap { record in
                    guard case .opaque(let rdata) = record.data else { return nil }
                    return try? DSRecord(rdata: rdata)
                }
            }
            entry = []
            for key in keys where ds.contains(where: { (try? DNSSECVerifier.matches($0, key: key, owner: zone)) == true }) { entry.append(key) }
        }
        guard !entry.isEmpty else { throw DNSSECFailure.keyMismatch("no DNSKEY of \(zone) matches its DS or trust anchor") }
        // An entry key must sign the whole DNSKEY set.
        var lastFailure: DNSSECFailure = .keyMismatch("no signature over \(zone)'s DNSKEY set by a key its DS or anchor names")
        for signature in signatures {
            for key in entry where key.keyTag == signature.keyTag && key.algorithm == signature.algorithm {
                do {
                    try DNSSECVerifier.verify(records, signature: signature, key: key, now: now, skew: skew)
                    return (keys.filter { $0.isZoneKey && !$0.isRevoked }, nil)
                } catch { lastFailure = error }
            }
        }
        throw lastFailure
    }

    private func ask(_ name: DomainName, _ type: RecordType, budget: inout Int) async throws -> DNSMessage {
        guard budget > 0 else { throw Bound(reason: "more than \(maxQueries) queries for one validation") }
        budget -= 1
        return try await fetch(name, type)
    }

    static func rrset(in records: [DNSMessage.Record], name: DomainName, type: RecordType) -> ([DNSMessage.Record], [RRSIG]) {
        let rrset = records.filter { $0.name == name && $0.type == type }
        let signatures = records.compactMap { record -> RRSIG? in
            guard record.name == name, record.type == .rrsig, case .opaque(let rdata) = record.data,
                let signature = try? RRSIG(rdata: rdata), signature.typeCovered == type
            else { return nil }
            return signature
        }
        return (rrset, signatures)
    }
}
