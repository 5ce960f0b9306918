import DNSCore
import HTTPDNS
import SystemResolver

/// Both sides' HTTPS records for one host (RFC 9460), as evidence beside the address verdict.
///
/// Forged HTTPS records with address hints are injected on hijacked paths (a client that trusts
/// the hints connects where the attacker says without any A/AAAA answer being forged). The hints the
/// system side gives that the trusted A/AAAA answers do not hold are named: never to be dialled.
/// A side that fails or has no records is reported as such; it never makes the verdict unverified.
public struct ServiceBindingComparison: Sendable {
    public var trusted: Result<[ServiceBinding], DNSError>
    public var system: Result<[ServiceBinding], DNSError>
    /// System-side hints outside the trusted addresses, in the order the records give them.
    public var foreignHints: [IPAddress]

    public init(trusted: Result<[ServiceBinding], DNSError>, system: Result<[ServiceBinding], DNSError>, trustedAddresses: [IPAddress]) {
        self.trusted = trusted
        self.system = system
        var foreign: [IPAddress] = []
        if case .success(let records) = system {
            for hint in records.flatMap({ $0.hintsOutside(trustedAddresses) }) where !foreign.contains(hint) { foreign.append(hint) }
        }
        foreignHints = foreign
    }

    /// Whether both sides hold the same records (in any order).
    public var agree: Bool {
        switch (trusted, system) {
        case let (.success(a), .success(b)): return Set(a) == Set(b)
        case let (.failure(a), .failure(b)): return a.code == b.code && (a.code == .nodata || a.code == .nxdomain)
        default: return false
        }
    }

    /// Asks both sides at once.
    public static func compare(
        host: String, resolver: HTTPDNSResolver, system: SystemResolver, trustedAddresses: [IPAddress], timeout: Duration
    ) async -> ServiceBindingComparison {
        async let trusted = Self.result { () async throws(DNSError) in try await resolver.serviceBindings(for: host, type: .https).records }
        async let system = Self.result { () async throws(DNSError) in
            let name = try DomainName(host)
            let message = try await system.message(DNSMessage.Question(name: name, type: .https), timeout: timeout)
            return try ServiceBindingAnswer.records(in: message, for: name, type: .https).records
        }
        return ServiceBindingComparison(trusted: await trusted, system: await system, trustedAddresses: trustedAddresses)
    }

    private static func result(_ body: () async throws(DNSError) -> [ServiceBinding]) async -> Result<[ServiceBinding], DNSError> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    /// The sentence the verdict's reason gains, when there is something to say.
    public var evidence: String? {
        if !foreignHints.isEmpty {
            return
                "the system's HTTPS record hints \(foreignHints.map(\.description).joined(separator: ", ")), which the trusted addresses do not hold"
        }
        if case .success = system, case .failure(let error) = trusted, error.code == .nodata || error.code == .nxdomain {
            return "the system answers HTTPS records the trusted resolvers do not have"
        }
        return nil
    }
}
