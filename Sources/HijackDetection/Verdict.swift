import DNSCore

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

/// One TLS probe of an address: connect, handshake with SNI = host, validate chain and name.
public struct AddressProbe: Sendable, Hashable {
    public enum Outcome: String, Sendable, Hashable, Codable {
        case ok
        case untrustedCertificate = "untrusted_certificate"
        case nameMismatch = "name_mismatch"
        case connectFailed = "connect_failed"
        case timeout

        /// The address answered TLS with a certificate that does not prove it serves the host.
        public var disproves: Bool { self == .untrustedCertificate || self == .nameMismatch }
    }

    public var ip: IPAddress
    public var port: Int
    public var outcome: Outcome
    /// TCP connect and TLS handshake times, when they happened.
    public var connectSeconds: Double?
    public var handshakeSeconds: Double?

    public init(ip: IPAddress, port: Int, outcome: Outcome, connectSeconds: Double? = nil, handshakeSeconds: Double? = nil) {
        self.ip = ip
        self.port = port
        self.outcome = outcome
        self.connectSeconds = connectSeconds
        self.handshakeSeconds = handshakeSeconds
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
    public static func judge(host: String, trusted: ResolverAnswer, system: ResolverAnswer,
                             probes: [AddressProbe], probing: Bool) -> Verdict {
        switch (trusted, system) {
        case (.failed(let error), _):
            return Verdict(.unverified, "the trusted resolvers did not answer: \(error.message)")
        case (_, .failed(let error)):
            return Verdict(.unverified, "the system resolver did not answer: \(error.message)")
        case (.absent, .absent):
            return Verdict(.consistent, "both say \(host) has no addresses")
        case (.absent(let code), .addresses(let addresses)):
            return Verdict(.hijacked, "the trusted resolvers say \(code == .nxdomain ? "\(host) does not exist (NXDOMAIN)" : "\(host) has no addresses"), the system resolver answers \(list(addresses)): answer rewriting")
        case (.addresses(let addresses), .absent(let code)):
            let what = code == .nxdomain ? "does not exist (NXDOMAIN)" : "has no addresses"
            if let proof = probes.first(where: { addresses.contains($0.ip) && $0.outcome == .ok }) {
                return Verdict(.hijacked, "the system resolver says \(host) \(what), but trusted address \(proof.ip) presented a valid certificate for it: blocking")
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
           let bogon = systemOnly.first(where: { $0.specialPurposeRange != nil }) {
            return Verdict(.hijacked, "the system resolver answers \(bogon) (\(bogon.specialPurposeRange!)) for \(host), whose trusted addresses are all public")
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
                return Verdict(.suspicious, "system address \(address) failed validation (\(probe.outcome.rawValue)), but no trusted address validated either")
            }
            return Verdict(.hijacked, "system address \(address) failed validation (\(probe.outcome.rawValue)) while trusted address \(trustedProof.ip) presented a valid certificate for \(host)")
        }
        let unreachable = systemProbes.filter { $0.1?.outcome != .ok }.map(\.0)
        return Verdict(.suspicious, "system-only address\(unreachable.count == 1 ? "" : "es") \(list(unreachable)) could not be probed (no connection); unproven")
    }

    private static func list(_ addresses: [IPAddress]) -> String {
        addresses.map(\.description).joined(separator: ", ")
    }
}
