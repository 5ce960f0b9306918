import AddressProbing
import DNSCore
import HTTPDNS

/// What one resolver said about a host.
public enum ResolverAnswer: Sendable, Hashable {
    case addresses([IPAddress])
    /// The name does not exist (NXDOMAIN), or exists without addresses of the asked type (NODATA).
    case absent(DNSError.Code)
    /// No usable answer: timeout, refused, malformed, …
    case failed(DNSError)

    public init(_ result: Result<[IPAddress], DNSError>) {
        switch result {
        case .success(let addresses): self = addresses.isEmpty ? .absent(.nodata) : .addresses(addresses)
        case .failure(let error) where error.code == .nxdomain || error.code == .nodata: self = .absent(error.code)
        case .failure(let error): self = .failed(error)
        }
    }
}

/// The judgement on one host: trusted resolvers against the system's, with the evidence.
public struct Verdict: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, Codable {
        /// Same answers, or every system-only address proved it serves the host.
        case consistent
        /// Proven: a system address fails validation while a trusted one passes, the system answers
        /// a name the trusted resolvers say does not exist, or it denies a name a trusted address
        /// proved to serve.
        case hijacked
        /// The answers differ and nothing proves either way.
        case suspicious
        /// A side did not answer.
        case unverified
    }

    public var kind: Kind
    /// What proved it, in words naming the addresses involved.
    public var reason: String

    public init(_ kind: Kind, _ reason: String) {
        self.kind = kind
        self.reason = reason
    }

    /// Judges `host` from both sides' answers and the probes made (empty when not probing; probes
    /// are expected for the system-only addresses and for trusted ones).
    public static func judge(
        host: String, trusted: ResolverAnswer, system: ResolverAnswer,
        probes: [AddressProbe], probing: Bool
    ) -> Verdict {
        switch (trusted, system) {
        case (.failed(let error), _):
            return Verdict(.unverified, "the trusted resolvers did not answer: \(error.message)")
        case (_, .failed(let error)):
            return Verdict(.unverified, "the system resolver did not answer: \(error.message)")
        case (.absent, .absent):
            return Verdict(.consistent, "both say \(host) has no addresses")
        case (.absent(let code), .addresses(let addresses)):
            return Verdict(
                .hijacked,
                "the trusted resolvers say \(code == .nxdomain ? "\(host) does not exist (NXDOMAIN)" : "\(host) has no addresses"), the system resolver answers \(list(addresses)): answer rewriting"
            )
        case (.addresses(let addresses), .absent(let code)):
            let what = code == .nxdomain ? "does not exist (NXDOMAIN)" : "has no addresses"
            if let proof = probes.first(where: { addresses.contains($0.ip) && $0.outcome == .ok }) {
                return Verdict(
                    .hijacked,
                    "the system resolver says \(host) \(what), but trusted address \(proof.ip) presented a valid certificate for it: blocking")
            }
            return Verdict(.suspicious, "the system resolver says \(host) \(what); the trusted resolvers answer \(list(addresses)), unproven")
        case (.addresses(let trustedAddresses), .addresses(let systemAddresses)):
            return judge(host: host, trusted: trustedAddresses, system: systemAddresses, probes: probes, probing: probing)
        }
    }

    private static func judge(host: String, trusted: [IPAddress], system: [IPAddress], probes: [AddressProbe], probing: Bool) -> Verdict {
        let trustedSet = Set(trusted)
        let systemOnly = system.filter { !trustedSet.contains($0) }
        if systemOnly.isEmpty {
            return Verdict(.consistent, Set(system) == trustedSet ? "same addresses" : "the system's addresses are among the trusted ones")
        }
        // Bogons: a public name the trusted side answers with public addresses only.
        if trusted.allSatisfy({ $0.specialPurposeRange == nil }),
            let bogon = systemOnly.first(where: { $0.specialPurposeRange != nil })
        {
            return Verdict(
                .hijacked, "the system resolver answers \(bogon) (\(bogon.specialPurposeRange!)) for \(host), whose trusted addresses are all public")
        }
        guard probing else {
            return Verdict(.suspicious, "the system resolver answers \(list(systemOnly)), which the trusted resolvers do not; not probed")
        }
        let byAddress = Dictionary(probes.map { ($0.ip, $0) }, uniquingKeysWith: { first, _ in first })
        let trustedProof = trusted.compactMap { byAddress[$0] }.first { $0.outcome == .ok }
        let systemProbes = systemOnly.map { ($0, byAddress[$0]) }
        if systemProbes.allSatisfy({ $0.1?.outcome == .ok }) {
            return Verdict(.consistent, "every system-only address (\(list(systemOnly))) presented a valid certificate for \(host)")
        }
        if let (address, probe) = systemProbes.first(where: { $0.1?.outcome.disproves == true }), let probe {
            guard let trustedProof else {
                return Verdict(
                    .suspicious, "system address \(address) failed validation (\(probe.outcome.rawValue)), but no trusted address validated either")
            }
            return Verdict(
                .hijacked,
                "system address \(address) failed validation (\(probe.outcome.rawValue)) while trusted address \(trustedProof.ip) presented a valid certificate for \(host)"
            )
        }
        let unproven = systemProbes.filter { $0.1?.outcome != .ok }
        let outcomes = unproven.map { "\($0.0): \($0.1?.outcome.rawValue ?? "not probed")" }.joined(separator: ", ")
        return Verdict(.suspicious, "system-only address\(unproven.count == 1 ? "" : "es") gave no proof either way (\(outcomes)); unproven")
    }

    /// The verdict with DNSSEC evidence: a DNSSEC-secure trusted answer proves what the name holds
    /// (or that it does not exist), so a system answer that differs is hijacked on that proof alone;
    /// a system answer that fails validation is named as such.
    public func withDNSSEC(host: String, trusted: ProvenAnswer, system: ProvenAnswer) -> Verdict {
        var verdict = self
        var notes: [String] = []
        if case .bogus(let reason) = system.dnssec { notes.append("the system's answer fails DNSSEC validation: \(reason)") }
        switch trusted.dnssec {
        case .secure?:
            switch (trusted.answer, system.answer) {
            case (.addresses(let genuine), .addresses(let answered)):
                let foreign = answered.filter { !genuine.contains($0) }
                if foreign.isEmpty {
                    notes.insert("the trusted answer is DNSSEC-secure", at: 0)
                } else {
                    verdict = Verdict(
                        .hijacked,
                        "the trusted answer is DNSSEC-secure (signed from the trust anchor) and holds \(Self.list(genuine)); "
                            + "the system resolver answers \(Self.list(foreign)), which the signed data does not hold")
                }
            case (.addresses, .absent(let code)):
                verdict = Verdict(
                    .hijacked,
                    "the trusted answer is DNSSEC-secure, so \(host) exists; the system resolver says "
                        + (code == .nxdomain ? "it does not exist (NXDOMAIN)" : "it has no addresses") + ": blocking")
            case (.absent, .addresses):
                notes.insert("the denial is DNSSEC-proven", at: 0)
            default:
                notes.insert("the trusted answer is DNSSEC-secure", at: 0)
            }
        case .bogus(let reason)?:
            notes.insert("the trusted answer is DNSSEC-bogus (\(reason)): the trusted side itself is in doubt", at: 0)
            if verdict.kind == .hijacked { verdict.kind = .suspicious }
        default:
            break
        }
        if !notes.isEmpty { verdict.reason += "; " + notes.joined(separator: "; ") }
        return verdict
    }

    /// Judges a canary: `host` is a random name under `zone` that cannot exist.
    public static func judgeCanary(host: String, zone: String, trusted: ResolverAnswer, system: ResolverAnswer) -> Verdict {
        switch (trusted, system) {
        case (_, .failed(let error)):
            return Verdict(.unverified, "the system resolver did not answer the canary \(host): \(error.message)")
        case (.addresses, .addresses):
            return Verdict(
                .unverified, "the trusted resolvers also answer the canary \(host) with addresses: \(zone) has a wildcard, pick a zone without one")
        case (_, .addresses(let addresses)):
            return Verdict(
                .hijacked,
                "the system resolver answers the canary \(host), a random name that cannot exist, with \(list(addresses)): NXDOMAIN rewriting")
        case (_, .absent(let code)):
            return Verdict(
                .consistent,
                "the system resolver answers the canary \(host) with \(code == .nxdomain ? "NXDOMAIN" : "no addresses"), as an honest resolver does")
        }
    }

    private static func list(_ addresses: [IPAddress]) -> String {
        addresses.map(\.description).joined(separator: ", ")
    }
}
