import DNSCore
import Foundation
import Synchronization

/// Trust anchors: DS or DNSKEY records for zone apexes, from a file in zone-file presentation
/// format (`trust_anchors:` / `--trust-anchors`), one record per line:
///
/// ```
/// sec.test. 3600 IN DS 40440 13 2 4B9A…
/// sec.test. IN DNSKEY 257 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ==
/// ```
/// Comments (`;`), blank lines, TTL and class are allowed; names are absolute.
public struct TrustAnchors: Sendable, Hashable {
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

/// Validates answers — positive, negative, through CNAME and DNAME chains — from a chain of DNSKEY
/// and DS sets down from a trust anchor (RFC 4035 §5), with authenticated denial by NSEC and NSEC3
/// (RFC 5155) for negative answers, wildcard expansions and unsigned delegations. Queries go
/// through `fetch` (the trusted upstreams, with DO and CD), so the validator is I/O-free and
/// testable with fakes. Bounded: at most ``maxQueries`` fetches, ``maxDepth`` zones,
/// ``maxChain`` CNAME/DNAME links, ``maxSignatureChecks`` verifications, NSEC3 iterations per
/// RFC 9276, and ``maxDuration`` seconds;
/// each bound exceeded is `indeterminate` with its reason.
public struct DNSSECValidator: Sendable {
    public typealias Fetch = @Sendable (DomainName, RecordType) async throws -> DNSMessage

    public let anchors: TrustAnchors
    public let fetch: Fetch
    /// Zones below which nothing is validated (RFC 7646): answers there are `insecure`.
    public var negativeAnchors: [DomainName] = []
    /// Proven zone keys kept across validations, by TTL (nil: every validation walks the chain).
    public var cache: DNSSECChainCache?
    public var maxQueries = 16
    public var maxDepth = 8
    public var maxChain = 8
    public var maxDuration: Duration = .seconds(5)
    /// Signature verifications per validation: colliding key tags times many RRSIGs make a
    /// response cost millions of them (KeyTrap, CVE-2023-50387); an honest chain needs a handful.
    public var maxSignatureChecks = 32
    public var skew = DNSSECVerifier.defaultSkew
    /// When a trust anchor covers the name but the chain cannot be completed — a bound was hit or
    /// fetching failed — the status is `bogus` rather than `indeterminate`. A policy that requires
    /// validation sets it: otherwise a forger who makes the chain unfinishable (drops a DNSKEY
    /// answer, or loops the chain to the depth bound) would have an unproven answer accepted.
    /// Unbound and BIND answer SERVFAIL there too.
    public var undecidedIsBogus = false

    public init(anchors: TrustAnchors, cache: DNSSECChainCache? = nil, fetch: @escaping Fetch) {
        self.anchors = anchors
        self.cache = cache
        self.fetch = fetch
    }

    /// The status of the answer to `name` `type` in `response`: its RRset (following CNAME and
    /// DNAME links in the answer section), or — when it holds none — the denial in its authority
    /// section.
    public func validate(_ response: DNSMessage, name: DomainName, type: RecordType, now: UInt32) async -> DNSSECStatus {
        await validateAnswer(response, name: name, type: type, now: now).status
    }

    /// What ``validate(_:name:type:now:)`` concluded, with the RRset it judged: the `type` records
    /// at the end of the CNAME/DNAME chain from `name` (empty for a denial). Only these records
    /// are what `status` speaks for; anything else in the answer section was not proven.
    public func validateAnswer(
        _ response: DNSMessage, name: DomainName, type: RecordType, now: UInt32
    ) async -> (status: DNSSECStatus, rrset: [DNSMessage.Record]) {
        if let negative = negativeAnchors.first(where: { DNSSECVerifier.isSubdomain(name, of: $0) }) {
            return (.indeterminate("\(negative) is a negative trust anchor: not validated"), [])
        }
        guard let anchor = anchors.closestAnchor(to: name) else { return (.indeterminate("no trust anchor covers \(name)"), []) }
        var session = Session(anchor: anchor, now: now, budget: maxQueries, started: .now)
        do {
            return try await chain(response, name: name, type: type, session: &session)
        } catch let failure as DNSSECFailure {
            if case .tooCostly = failure { return (.indeterminate(failure.description), []) }
            return (.bogus(failure.description), [])
        } catch let bound as Bound {
            return (undecided(bound.reason), [])
        } catch {
            return (undecided("fetching the chain failed: \(error)"), [])
        }
    }

    private func undecided(_ reason: String) -> DNSSECStatus {
        undecidedIsBogus ? .bogus("the chain could not be completed: \(reason)") : .indeterminate(reason)
    }

    struct Bound: Error { var reason: String }

    /// What one validation knows: its clock, budget, the zones proven so far and the answers fetched.
    struct Session {
        var anchor: DomainName
        let now: UInt32
        var budget: Int
        let started: ContinuousClock.Instant
        var zones: [DomainName: ZoneState] = [:]
        var fetched: [String: DNSMessage] = [:]
        /// Zones whose keys are being proven: met again, the chain depends on itself.
        var proving: Set<DomainName> = []
        var depth = 0
        var checks = 0
    }

    private func spendCheck(_ session: inout Session) throws {
        guard session.checks < maxSignatureChecks else {
            throw Bound(reason: "more than \(maxSignatureChecks) signature checks for one validation (the KeyTrap bound, CVE-2023-50387)")
        }
        session.checks += 1
    }

    /// A zone as the chain proved it: its keys (secure), or unsigned below a secure parent.
    public enum ZoneState: Sendable, Equatable {
        case secure([DNSKEY])
        case insecure
    }

    // MARK: - Answers

    private func chain(
        _ response: DNSMessage, name: DomainName, type: RecordType, session: inout Session
    ) async throws -> (status: DNSSECStatus, rrset: [DNSMessage.Record]) {
        var owner = name
        var statuses: [DNSSECStatus] = []
        for _ in 0..<maxChain {
            // A link that leaves the anchor's tree is judged from its own anchor, if it has one.
            if !DNSSECVerifier.isSubdomain(owner, of: session.anchor) {
                guard let anchor = anchors.closestAnchor(to: owner) else {
                    return (Self.combine(statuses + [.indeterminate("no trust anchor covers \(owner), where the chain leads")]), [])
                }
                session.anchor = anchor
            }
            let (records, signatures) = Self.rrset(in: response.answers, name: owner, type: type)
            if !records.isEmpty {
                statuses.append(try await status(of: records, signatures: signatures, in: response, session: &session))
                return (Self.combine(statuses), records)
            }
            let (aliases, aliasSignatures) = Self.rrset(in: response.answers, name: owner, type: .cname)
            guard case .cname(let target) = aliases.first?.data else {
                statuses.append(try await denialStatus(owner, type: type, in: response, session: &session))
                return (Self.combine(statuses), [])
            }
            if aliasSignatures.isEmpty, let dname = try await synthesizingDNAME(for: owner, target: target, in: response, session: &session) {
                statuses.append(dname)
            } else {
                statuses.append(try await status(of: aliases, signatures: aliasSignatures, in: response, session: &session))
            }
            owner = target
        }
        throw Bound(reason: "a CNAME/DNAME chain longer than \(maxChain) links")
    }

    /// A CNAME synthesized from a DNAME (RFC 6672 §5.3.1) is unsigned: the DNAME's RRset is what
    /// validates, and the CNAME must be its substitution.
    private func synthesizingDNAME(
        for owner: DomainName, target: DomainName, in response: DNSMessage, session: inout Session
    ) async throws
        -> DNSSECStatus?
    {
        for record in response.answers where record.type == .dname && record.name != owner && DNSSECVerifier.isSubdomain(owner, of: record.name) {
            guard case .opaque(let rdata) = record.data else { continue }
            let (dnameTarget, _) = try RRSIG.name(in: rdata, at: 0)
            let keep = DNSSECVerifier.labelCount(owner) - DNSSECVerifier.labelCount(record.name)
            let prefix = Array(owner.wire[..<(owner.wire.count - record.name.wire.count)])
            guard keep > 0, prefix + dnameTarget.wire == target.wire else {
                throw DNSSECFailure.unproven("the CNAME \(owner) → \(target) is not the substitution of the DNAME at \(record.name)")
            }
            let (dnames, signatures) = Self.rrset(in: response.answers, name: record.name, type: .dname)
            return try await status(of: dnames, signatures: signatures, in: response, session: &session)
        }
        return nil
    }

    /// An RRset is secure when one of its signatures verifies with a key of a secure DNSKEY set
    /// (and, for a wildcard expansion, the exact name is proven absent); insecure when it lies in
    /// a zone proven unsigned.
    ///
    /// - Parameters:
    ///   - records: the RRset.
    ///   - signatures: the RRSIGs that came with it.
    ///   - response: the message it came in (for a wildcard expansion's denial).
    ///   - session: the validation's budget and the zones proven so far.
    ///   - cut: for what proves a zone cut (DS, or its denial), the cut's name: only a
    ///     signer strictly above it counts. The child's own key cannot vouch for its DS, and trying
    ///     would make the chain depend on itself.
    /// - Returns: the RRset's status when a signature verifies, or when it is unsigned in a zone proven unsigned.
    /// - Throws: ``DNSSECFailure`` when no signature verifies or a bound is hit (the caller names it bogus or indeterminate).
    private func status(
        of records: [DNSMessage.Record], signatures: [RRSIG], in response: DNSMessage, session: inout Session, signedAbove cut: DomainName? = nil
    ) async throws
        -> DNSSECStatus
    {
        let owner = records[0].name
        guard !signatures.isEmpty else { return try await unsignedStatus(of: owner, type: records[0].type, session: &session) }
        var lastFailure: DNSSECFailure = .keyMismatch("no signature of \(owner) \(records[0].type) is by a zone above it")
        for signature in signatures
        where DNSSECVerifier.isSubdomain(owner, of: signature.signerName) && DNSSECVerifier.isSubdomain(signature.signerName, of: session.anchor)
            && !(cut.map { DNSSECVerifier.isSubdomain(signature.signerName, of: $0) } ?? false)
        {
            let zone = try await zoneState(signature.signerName, session: &session)
            guard case .secure(let keys) = zone else { return .insecure }
            for key in keys where key.keyTag == signature.keyTag && key.algorithm == signature.algorithm {
                try spendCheck(&session)
                do {
                    try DNSSECVerifier.verify(records, signature: signature, key: key, now: session.now, skew: skew)
                } catch {
                    lastFailure = error
                    continue
                }
                if Int(signature.labels) < DNSSECVerifier.labelCount(owner) {
                    let (nsec, nsec3) = try await provenDenialRecords(in: response, session: &session)
                    if try Denial.proveExpansion(of: owner, sourceLabels: Int(signature.labels), nsec: nsec, nsec3: nsec3) { return .insecure }
                }
                return .secure
            }
        }
        throw lastFailure
    }

    /// A negative answer: secure when NSEC/NSEC3 prove it, insecure when the name lies in an
    /// unsigned zone, bogus otherwise.
    private func denialStatus(_ name: DomainName, type: RecordType, in response: DNSMessage, session: inout Session) async throws -> DNSSECStatus {
        let (nsec, nsec3) = try await provenDenialRecords(in: response, session: &session)
        if nsec.isEmpty && nsec3.isEmpty { return try await unsignedStatus(of: name, type: type, session: &session) }
        switch try Denial.prove(name, type: type, nsec: nsec, nsec3: nsec3) {
        case .optOut: return .insecure
        case .nameError where response.responseCode != .nameError:
            throw DNSSECFailure.unproven("\(name) is proven not to exist, but the answer is not NXDOMAIN")
        case .noData where response.responseCode == .nameError:
            throw DNSSECFailure.unproven("\(name) is NXDOMAIN, but the proof shows it exists")
        default: return .secure
        }
    }

    /// The NSEC and NSEC3 records of the authority section whose signatures verify; unsigned ones
    /// prove nothing and are left out, as are records of zones proven insecure.
    private func provenDenialRecords(
        in response: DNSMessage, session: inout Session, signedAbove cut: DomainName? = nil
    ) async throws -> ([NSECRecord], [NSEC3Record]) {
        var nsec: [NSECRecord] = []
        var nsec3: [NSEC3Record] = []
        var owners: [DomainName] = []
        for record in response.authorities where (record.type == .nsec || record.type == .nsec3) && !owners.contains(record.name) {
            owners.append(record.name)
        }
        for owner in owners.prefix(8) {
            for type in [RecordType.nsec, .nsec3] {
                let (records, signatures) = Self.rrset(in: response.authorities, name: owner, type: type)
                guard !records.isEmpty, !signatures.isEmpty else { continue }
                guard try await status(of: records, signatures: signatures, in: response, session: &session, signedAbove: cut) == .secure else {
                    continue
                }
                for record in records {
                    guard case .opaque(let rdata) = record.data else { continue }
                    if type == .nsec {
                        nsec.append(try NSECRecord(owner: owner, rdata: rdata))
                    } else {
                        nsec3.append(try NSEC3Record(owner: owner, rdata: rdata))
                    }
                }
            }
        }
        return (nsec, nsec3)
    }

    /// Unsigned data under an anchor is insecure only where a delegation on the way down is proven
    /// unsigned (no DS, by NSEC/NSEC3 of the parent); otherwise the signatures were stripped: bogus.
    private func unsignedStatus(of owner: DomainName, type: RecordType, session: inout Session) async throws -> DNSSECStatus {
        var labels = DNSSECVerifier.labelCount(session.anchor) + 1
        while labels <= DNSSECVerifier.labelCount(owner) {
            let candidate = DomainName(uncheckedWire: DNSSECVerifier.suffix(of: owner.wire, labels: labels))
            switch try await cut(at: candidate, session: &session) {
            case .insecure: return .insecure
            case .secure, nil: labels += 1
            }
        }
        throw DNSSECFailure.unproven("\(owner) \(type) is not signed although \(session.anchor) is, and no unsigned delegation is proven above it")
    }

    // MARK: - Zones

    /// The state of the zone at `zone` (the signer of some RRset), from memo, cache or the chain.
    private func zoneState(_ zone: DomainName, session: inout Session) async throws -> ZoneState {
        if let known = session.zones[zone] { return known }
        if let cached = cache?.state(of: zone, now: session.now) {
            session.zones[zone] = cached
            return cached
        }
        guard session.proving.insert(zone).inserted else {
            throw DNSSECFailure.unproven("proving \(zone)'s keys needs \(zone)'s keys: the chain depends on itself")
        }
        session.depth += 1
        defer {
            session.depth -= 1
            session.proving.remove(zone)
        }
        guard session.depth <= maxDepth else { throw Bound(reason: "a chain longer than \(maxDepth) zones") }
        let ds: [DSRecord]
        var expires = session.now &+ 3600
        if let anchoredKeys = anchors.keys[zone] {
            return try await proveKeys(
                of: zone, entry: { key in anchoredKeys.contains { $0.rdata == key.rdata } }, expires: expires, session: &session)
        } else if let anchoredDS = anchors.ds[zone] {
            ds = anchoredDS
        } else {
            guard DNSSECVerifier.labelCount(zone) > DNSSECVerifier.labelCount(session.anchor) else {
                throw Bound(reason: "no trust anchor above \(zone)")
            }
            switch try await cut(at: zone, session: &session) {
            case .insecure:
                session.zones[zone] = .insecure
                return .insecure
            case .none:
                throw DNSSECFailure.unproven("\(zone) signs records but is proven not to be a zone cut")
            case .secure(let records, let ttl):
                ds = records
                expires = min(expires, session.now &+ ttl)
            }
        }
        return try await proveKeys(
            of: zone, entry: { key in ds.contains { (try? DNSSECVerifier.matches($0, key: key, owner: zone)) == true } }, expires: expires,
            session: &session)
    }

    enum Cut {
        case secure([DSRecord], ttl: UInt32)
        case insecure
    }

    /// What the parent says at `name`: a secure DS set, a proven unsigned delegation, or (nil) no
    /// zone cut at all — an ordinary name or an empty non-terminal.
    private func cut(at name: DomainName, session: inout Session) async throws -> Cut? {
        let response = try await ask(name, .ds, session: &session)
        let (records, signatures) = Self.rrset(in: response.answers, name: name, type: .ds)
        if !records.isEmpty {
            guard try await status(of: records, signatures: signatures, in: response, session: &session, signedAbove: name) == .secure else {
                return .insecure
            }
            let ds = records.compactMap { record -> DSRecord? in
                guard case .opaque(let rdata) = record.data else { return nil }
                return try? DSRecord(rdata: rdata)
            }
            return .secure(ds, ttl: records.map(\.ttl).min() ?? 0)
        }
        let (nsec, nsec3) = try await provenDenialRecords(in: response, session: &session, signedAbove: name)
        if nsec.isEmpty && nsec3.isEmpty {
            // No proof at all: an unsigned parent is insecure (its own cut was proven above), a signed one lies.
            throw DNSSECFailure.unproven("no DS for \(name) and no NSEC/NSEC3 proving there is none")
        }
        switch try Denial.prove(name, type: .ds, nsec: nsec, nsec3: nsec3) {
        case .noData(delegation: true), .optOut: return .insecure
        case .noData(delegation: false): return nil
        case .nameError: return nil
        }
    }

    /// The zone's DNSKEY set once an entry key (named by DS or anchor) signs it.
    private func proveKeys(of zone: DomainName, entry isEntry: (DNSKEY) -> Bool, expires: UInt32, session: inout Session) async throws -> ZoneState {
        let response = try await ask(zone, .dnskey, session: &session)
        let (records, signatures) = Self.rrset(in: response.answers, name: zone, type: .dnskey)
        let keys = records.compactMap { record -> DNSKEY? in
            guard case .opaque(let rdata) = record.data else { return nil }
            return try? DNSKEY(rdata: rdata)
        }
        guard !keys.isEmpty else { throw DNSSECFailure.malformed("\(zone) has no DNSKEY set") }
        let entry = keys.filter(isEntry)
        guard !entry.isEmpty else { throw DNSSECFailure.keyMismatch("no DNSKEY of \(zone) matches its DS or trust anchor") }
        var lastFailure: DNSSECFailure = .keyMismatch("no signature over \(zone)'s DNSKEY set by a key its DS or anchor names")
        for signature in signatures {
            for key in entry where key.keyTag == signature.keyTag && key.algorithm == signature.algorithm {
                try spendCheck(&session)
                do {
                    try DNSSECVerifier.verify(records, signature: signature, key: key, now: session.now, skew: skew)
                    let state = ZoneState.secure(keys.filter { $0.isZoneKey && !$0.isRevoked })
                    session.zones[zone] = state
                    let ttl = records.map(\.ttl).min() ?? 0
                    cache?.store(state, for: zone, until: min(expires, session.now &+ ttl, signature.expiration))
                    return state
                } catch { lastFailure = error }
            }
        }
        throw lastFailure
    }

    private func ask(_ name: DomainName, _ type: RecordType, session: inout Session) async throws -> DNSMessage {
        let key = "\(name)/\(type.rawValue)"
        if let known = session.fetched[key] { return known }
        guard session.budget > 0 else { throw Bound(reason: "more than \(maxQueries) queries for one validation") }
        guard ContinuousClock.now - session.started < maxDuration else { throw Bound(reason: "validation took longer than \(maxDuration)") }
        session.budget -= 1
        let response = try await fetch(name, type)
        session.fetched[key] = response
        return response
    }

    static func combine(_ statuses: [DNSSECStatus]) -> DNSSECStatus {
        DNSSECStatus.combined(statuses) ?? .secure
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

/// Zone keys proven by earlier validations, kept until the shortest of their TTLs, the DS TTL
/// and their signature's expiry — so a cache hit validates without a query.
public final class DNSSECChainCache: Sendable {
    private let entries = Mutex<[DomainName: (state: DNSSECValidator.ZoneState, until: UInt32)]>([:])
    private let capacity: Int

    public init(capacity: Int = 1024) { self.capacity = capacity }

    func state(of zone: DomainName, now: UInt32) -> DNSSECValidator.ZoneState? {
        entries.withLock { entries in
            guard let entry = entries[zone] else { return nil }
            guard Int32(bitPattern: entry.until &- now) > 0 else {
                entries[zone] = nil
                return nil
            }
            return entry.state
        }
    }

    func store(_ state: DNSSECValidator.ZoneState, for zone: DomainName, until: UInt32) {
        entries.withLock { entries in
            if entries.count >= capacity, entries[zone] == nil { entries.removeAll(keepingCapacity: true) }
            entries[zone] = (state, until)
        }
    }

    public var count: Int { entries.withLock { $0.count } }
}
