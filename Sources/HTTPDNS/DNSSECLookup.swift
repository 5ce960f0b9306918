import DNSCore
import DNSSEC
import Foundation
import Synchronization

/// DNSSEC policy for lookups (config `dnssec:`, CLI `--dnssec`).
public enum DNSSECPolicy: String, Sendable, CaseIterable {
    /// No validation (the default).
    case off
    /// Validate and label each answer; never refuse one.
    case report
    /// Validate; a bogus answer is the error `dnssec_bogus` and is not kept in the cache.
    case require
}

/// How answers are validated: config `dnssec:`, `trust_anchors:`, `negative_trust_anchors:`.
public struct DNSSECSettings: Sendable, Hashable {
    public var policy: DNSSECPolicy
    /// The root KSKs unless a trust-anchor file replaces them.
    public var anchors: TrustAnchors
    /// Zones not validated (RFC 7646): their answers are labelled indeterminate, never bogus.
    public var negativeAnchors: [DomainName]

    public init(policy: DNSSECPolicy = .off, anchors: TrustAnchors = .root, negativeAnchors: [DomainName] = []) {
        self.policy = policy
        self.anchors = anchors
        self.negativeAnchors = negativeAnchors
    }
}

/// Validation results kept until the answer they label expires, so a cache hit costs a lookup here
/// and not a validation; with the zone keys proven so far.
final class DNSSECMemo: Sendable {
    let chain = DNSSECChainCache()
    /// Validations run (not answered from here): what a test of the memo counts.
    let validations = Mutex(0)
    private let statuses = Mutex<[Key: (status: DNSSECStatus, until: ResolverInstant)]>([:])

    /// The host as asked and the addresses in the order given: cheap to hash on the cache-hit path
    /// (another spelling or order is another entry, validated once more).
    struct Key: Hashable {
        var host: String
        var addresses: [IPAddress]
    }

    static func key(_ resolution: Resolution) -> Key {
        Key(host: resolution.host, addresses: resolution.addresses.map(\.ip))
    }

    func status(of resolution: Resolution, now: ResolverInstant) -> DNSSECStatus? {
        statuses.withLock { entries in
            guard let entry = entries[Self.key(resolution)], now < entry.until else { return nil }
            return entry.status
        }
    }

    /// A bogus status is kept at most a minute (Unbound's `val-bogus-ttl`): long enough that a
    /// flood of lookups does not re-walk the chain, short enough that a repaired zone recovers.
    func store(_ status: DNSSECStatus, for resolution: Resolution, now: ResolverInstant) {
        let until = status.isBogus ? min(resolution.expiresAt, now + Self.bogusLifetime) : resolution.expiresAt
        statuses.withLock { entries in
            if entries.count >= 4096 { entries.removeAll(keepingCapacity: true) }
            entries[Self.key(resolution)] = (status, until)
        }
    }

    static let bogusLifetime: Duration = .seconds(60)
}

extension HTTPDNSResolver {
    /// How many answers were validated rather than labelled from the memo (for tests).
    package var dnssecValidations: Int { dnssecMemo.validations.withLock { $0 } }

    /// `resolution` with its DNSSEC status under the configured policy (unchanged when off).
    /// - Throws: `dnssec_bogus` under `require` when the answer is bogus; the answer is then
    ///   dropped from the cache so that the next lookup asks again.
    /// A lookup that is not a kept hit: the signed answers (DO+CD) are asked alongside it rather
    /// than after it, unless the status is known already (a stale or refreshing hit).
    func resolveValidating(_ host: String, name parsed: DomainName?, type: AddressQuery) async throws(DNSError) -> Resolution {
        var known = false
        if let cached = engine.cachedResolution(for: host, name: parsed, type: type) {
            known = dnssecMemo.status(of: cached, now: clock.now) != nil
        }
        let name = known ? nil : parsed ?? (try? DomainName(host))
        async let signed = signedAnswers(name, types: type.recordTypes)
        let resolution: Resolution
        do {
            resolution = try await engine.resolve(host, name: parsed, type: type)
        } catch  where error.code == .nxdomain || error.code == .nodata {
            throw await provingDenial(error, host: host, type: type, signed: await signed)
        }
        return try await applyingDNSSEC(to: resolution, type: type, signed: await signed)
    }

    /// The DO+CD answers for `name`, one per type, asked at once; failures left out (asked again later).
    func signedAnswers(_ name: DomainName?, types: [RecordType]) async -> [RecordType: DNSMessage] {
        guard let name else { return [:] }
        return await withTaskGroup(of: (RecordType, DNSMessage?).self) { group in
            for type in types { group.addTask { (type, try? await self.askValidating(name, type)) } }
            var answers: [RecordType: DNSMessage] = [:]
            for await (type, message) in group { answers[type] = message }
            return answers
        }
    }

    func applyingDNSSEC(
        to resolution: Resolution, type: AddressQuery, signed: [RecordType: DNSMessage] = [:]
    ) async throws(DNSError)
        -> Resolution
    {
        var labelled = resolution
        if resolution.dnssec == nil, resolution.source != .literal {
            // Labelled already on the engine's hit path; otherwise from the memo, or validated.
            let status: DNSSECStatus
            if let known = dnssecMemo.status(of: resolution, now: clock.now) {
                status = known
            } else {
                status = await dnssecStatus(of: resolution, settings: configuration.dnssec, signed: signed)
                dnssecMemo.validations.withLock { $0 += 1 }
                dnssecMemo.store(status, for: resolution, now: clock.now)
            }
            labelled.dnssec = status
            engine.label(resolution.host, type: type, with: status, addresses: resolution.addresses)
        }
        if configuration.dnssec.policy == .require, case .bogus(let reason) = labelled.dnssec {
            engine.forget(resolution.host)
            throw DNSError(.dnssecBogus, "\(resolution.host): DNSSEC validation failed: \(reason)")
        }
        return labelled
    }

    /// Validates a response from elsewhere (the system's resolver, asked with DO) with this
    /// resolver's anchors, the chain fetched from its trusted upstreams (and cached).
    public func validate(_ response: DNSMessage, name: DomainName, type: RecordType, now: Date = .now) async -> DNSSECStatus {
        await validator().validate(response, name: name, type: type, now: UInt32(clamping: Int64(now.timeIntervalSince1970)))
    }

    /// The validator of `settings` (the configured ones by default) over the trusted upstreams; the
    /// chain cache is shared only by validations with the configured anchors.
    func validator(_ settings: DNSSECSettings? = nil) -> DNSSECValidator {
        let settings = settings ?? configuration.dnssec
        var validator = DNSSECValidator(anchors: settings.anchors, cache: settings == configuration.dnssec ? dnssecMemo.chain : nil) {
            name, type in try await self.askValidating(name, type)
        }
        validator.negativeAnchors = settings.negativeAnchors
        // `require` accepts no answer whose chain could not be completed under an anchor.
        validator.undecidedIsBogus = settings.policy == .require
        // Validation runs after the lookup and gets the lookup's budget again, at most.
        validator.maxDuration = min(validator.maxDuration, options.timeout)
        return validator
    }

    /// `error` (nxdomain or nodata) labelled with whether the denial is proven: each type asked is
    /// asked again with DO and CD and its denial validated. Under `require` a bogus denial — a
    /// forged "does not exist" — becomes `dnssec_bogus`.
    func provingDenial(_ error: DNSError, host: String, type: AddressQuery, signed: [RecordType: DNSMessage] = [:]) async -> DNSError {
        guard let name = try? DomainName(host) else { return error }
        let validator = validator()
        let seconds = UInt32(clamping: Int64(Date.now.timeIntervalSince1970))
        var statuses: [DNSSECStatus] = []
        for recordType in error.code == .nxdomain ? [RecordType.a] : type.recordTypes {
            do {
                let response: DNSMessage
                if let asked = signed[recordType] { response = asked } else { response = try await askValidating(name, recordType) }
                if response.answers.contains(where: { $0.type == recordType }) {
                    statuses.append(.bogus("\(recordType) records exist for \(name): the \(error.code.rawValue) answer is not the zone's"))
                    continue
                }
                statuses.append(await validator.validate(response, name: name, type: recordType, now: seconds))
            } catch {
                statuses.append(.indeterminate("asking \(name) \(recordType) with DO failed: \(error)"))
            }
        }
        let status = DNSSECStatus.combined(statuses) ?? .secure
        if configuration.dnssec.policy == .require, case .bogus(let reason) = status {
            engine.forget(host)
            var bogus = DNSError(.dnssecBogus, "\(host): DNSSEC validation of the \(error.code.rawValue) answer failed: \(reason)")
            bogus.dnssec = status
            return bogus
        }
        var labelled = error
        labelled.dnssec = status
        return labelled
    }

    /// The DNSSEC status of `resolution`'s addresses, from `anchors` (see ``dnssecStatus(of:settings:now:)``).
    public func dnssecStatus(of resolution: Resolution, anchors: TrustAnchors, now: Date = .now) async -> DNSSECStatus {
        await dnssecStatus(of: resolution, settings: DNSSECSettings(policy: .report, anchors: anchors), now: now)
    }

    /// The DNSSEC status of `resolution`'s addresses: each address type it holds is asked again of
    /// the trusted upstreams with DO and CD, the answer validated (through its CNAME chain) from
    /// the anchors, and the validated addresses must be the ones the resolution holds (otherwise
    /// bogus: the answer used is not the one that was signed).
    ///
    /// Secure only when every type is; bogus when any is; otherwise the first other status.
    public func dnssecStatus(of resolution: Resolution, settings: DNSSECSettings, now: Date = .now) async -> DNSSECStatus {
        await dnssecStatus(of: resolution, settings: settings, signed: [:], now: now)
    }

    /// As above, with the DO+CD answers already asked (`signed`, by type).
    func dnssecStatus(
        of resolution: Resolution, settings: DNSSECSettings, signed answers: [RecordType: DNSMessage], now: Date = .now
    ) async
        -> DNSSECStatus
    {
        guard resolution.source != .literal else { return .indeterminate("an IP literal") }
        guard let name = try? DomainName(resolution.host) else { return .indeterminate("not a DNS name") }
        let validator = validator(settings)
        let seconds = UInt32(clamping: Int64(now.timeIntervalSince1970))
        var statuses: [DNSSECStatus] = []
        for (type, family) in [(RecordType.a, IPAddress.Family.ipv4), (.aaaa, .ipv6)] {
            let held = Set(resolution.addresses.map(\.ip).filter { $0.family == family })
            guard !held.isEmpty else { continue }
            let response: DNSMessage
            do {
                if let asked = answers[type] { response = asked } else { response = try await askValidating(name, type) }
            } catch {
                statuses.append(.indeterminate("asking \(name) \(type) with DO failed: \(error)"))
                continue
            }
            let (status, rrset) = await validator.validateAnswer(response, name: name, type: type, now: seconds)
            // The RRset the validator proved, not every address in the answer section: a forger
            // may add records of other owners beside a genuine signed set.
            let signed = Set(
                rrset.compactMap { record -> IPAddress? in
                    guard record.type == type, case .address(let ip) = record.data else { return nil }
                    return ip
                })
            // Every address used must be a signed one (a rotating upstream may hand out other subsets).
            if status == .secure, !held.isSubset(of: signed) {
                statuses.append(.bogus("the \(type) addresses used are not the signed ones"))
            } else {
                statuses.append(status)
            }
        }
        return DNSSECStatus.combined(statuses) ?? .indeterminate("no addresses to validate")
    }

    /// A query with DO and CD (RFC 4035 §3.2.2: the upstream must hand over what it would reject),
    /// through the trusted upstreams.
    func askValidating(_ name: DomainName, _ type: RecordType) async throws -> DNSMessage {
        try DNSMessage(decoding: try await forward(DNSMessage.validatingQuery(name, type).encode()))
    }
}

extension DNSMessage {
    /// A query for `name` `type` with RD, CD and an OPT record with DO (RFC 3225), 4,096-byte payload.
    public static func validatingQuery(_ name: DomainName, _ type: RecordType, id: UInt16 = 0) -> DNSMessage {
        let opt = DNSMessage.Record(name: .root, type: .opt, recordClass: 4096, ttl: 0x0000_8000, data: .opaque([]))
        return DNSMessage(id: id, flags: 0x0110, questions: [.init(name: name, type: type)], additionals: [opt])
    }
}
