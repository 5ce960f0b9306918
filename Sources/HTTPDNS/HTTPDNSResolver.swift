import CurlSupport
import Foundation

/// Resolves host names through trusted resolvers over HTTPS, never through the system's DNS.
///
/// ```swift
/// let resolver = try HTTPDNSResolver(configuration: .init(upstreams: [
///     .doh("https://dns.example.test/dns-query", bootstrap: ["192.0.2.53"]),
/// ]))
/// let resolution = try await resolver.resolve("api.example.test")
/// ```
///
/// A and AAAA are asked in parallel. Upstreams are tried in order: an upstream that fails (refused,
/// TLS, HTTP error, garbage, wrong answer) hands over at once, and a slow one after its share of the
/// remaining budget, so the last upstream always gets time to answer within ``HTTPDNSOptions/timeout``.
public final class HTTPDNSResolver: Sendable {
    public let configuration: HTTPDNSConfiguration
    public let options: HTTPDNSOptions
    private let upstreams: [any DNSUpstream]

    /// - Throws: ``DNSError`` with ``DNSError/Code/invalidConfiguration`` when an upstream cannot be
    ///   reached without DNS or the CA file is unreadable.
    public convenience init(configuration: HTTPDNSConfiguration, options: HTTPDNSOptions = .init()) throws(DNSError) {
        try configuration.validate()
        let transport = HTTPTransport(engine: .shared, trust: TLSTrust(caFile: configuration.caFile),
                                      maxResponseBytes: options.maxResponseBytes)
        let upstreams: [any DNSUpstream] = configuration.upstreams.map { endpoint in
            switch endpoint.kind {
            case let .doh(method): return DoHUpstream(endpoint: endpoint, method: method, transport: transport)
            case .json: return JSONUpstream(endpoint: endpoint, transport: transport)
            }
        }
        self.init(configuration: configuration, options: options, upstreams: upstreams)
    }

    /// Builds a resolver over any upstreams (tests inject fakes here).
    public init(configuration: HTTPDNSConfiguration = .init(upstreams: []), options: HTTPDNSOptions = .init(),
                upstreams: [any DNSUpstream]) {
        self.configuration = configuration
        self.options = options
        self.upstreams = upstreams
    }

    /// Resolves `host` to addresses.
    ///
    /// IP literals come back as they are (source ``Resolution/Source/literal``). Answers in special
    /// ranges are dropped unless ``HTTPDNSOptions/allowPrivate``.
    /// - Throws: ``DNSError``: `invalid_name`, `nxdomain`, `nodata`, `rejected_private`, or the
    ///   upstreams' failures (one code when they agree, `upstream_failed` when not, each listed).
    public func resolve(_ host: String, type: AddressQuery = .both) async throws(DNSError) -> Resolution {
        let clock = ContinuousClock()
        let start = clock.now
        if let literal = IPAddress(host) {
            return Resolution(host: host, addresses: [ResolvedAddress(ip: literal, ttl: 0)], source: .literal,
                              upstream: nil, elapsed: .zero, expiresAt: start)
        }
        let name = try DomainName(host)
        guard !upstreams.isEmpty else { throw DNSError(.invalidConfiguration, "no trusted upstream is configured") }
        let deadline = start + options.timeout

        let outcomes: [TypeOutcome]
        switch type {
        case .a, .aaaa:
            outcomes = [await lookup(name, type.recordTypes[0], deadline: deadline)]
        case .both:
            async let v4 = lookup(name, .a, deadline: deadline)
            async let v6 = lookup(name, .aaaa, deadline: deadline)
            outcomes = await [v4, v6]
        }
        if Task.isCancelled { throw DNSError(.cancelled, "the lookup of \(host) was cancelled") }
        return try merge(host: host, outcomes: outcomes, elapsed: clock.now - start, now: clock.now)
    }

    // MARK: Internals

    /// One record type's result: an answer from some upstream, or every upstream's failure.
    struct TypeOutcome: Sendable {
        var type: RecordType
        var answer: AddressAnswer?
        var upstream: (any DNSUpstream)?
        var failures: [DNSError.Attempt]
    }

    /// Asks the upstreams in order until one answers or the deadline passes.
    func lookup(_ name: DomainName, _ type: RecordType, deadline: ContinuousClock.Instant) async -> TypeOutcome {
        let question = DNSMessage.Question(name: name, type: type)
        var failures: [DNSError.Attempt] = []
        let clock = ContinuousClock()
        for (index, upstream) in upstreams.enumerated() {
            let remaining = deadline - clock.now
            guard remaining > .milliseconds(1), !Task.isCancelled else { break }
            // The remaining budget shared among the upstreams still to try: a blackholed first
            // upstream cannot starve the others.
            let share = remaining / (upstreams.count - index)
            do {
                let answer = try await upstream.query(question, timeout: share)
                return TypeOutcome(type: type, answer: answer, upstream: upstream, failures: failures)
            } catch {
                failures.append(.init(upstream: upstream.identifier, code: error.code, message: error.message))
                if error.code == .cancelled { break }
            }
        }
        if failures.isEmpty {
            failures.append(.init(upstream: upstreams[0].identifier, code: .timeout, message: "the time budget ran out"))
        }
        return TypeOutcome(type: type, answer: nil, upstream: nil, failures: failures)
    }

    private func merge(host: String, outcomes: [TypeOutcome], elapsed: Duration,
                       now: ContinuousClock.Instant) throws(DNSError) -> Resolution {
        var addresses: [ResolvedAddress] = []
        var rejected: [String] = []
        var canonical: DomainName?
        var answering: (any DNSUpstream)?
        var nxdomain = false
        var failures: [DNSError.Attempt] = []
        for outcome in outcomes {
            failures += outcome.failures
            switch outcome.answer {
            case let .addresses(found, canonicalName):
                canonical = canonical ?? canonicalName
                answering = answering ?? outcome.upstream
                for address in found {
                    if !options.allowPrivate, let range = address.ip.specialPurposeRange {
                        rejected.append("\(address.ip) (\(range))")
                    } else {
                        addresses.append(address)
                    }
                }
            case .nxdomain:
                nxdomain = true
                answering = answering ?? outcome.upstream
            case .nodata:
                answering = answering ?? outcome.upstream
            case nil:
                break
            }
        }
        if !addresses.isEmpty {
            addresses.sort { lhs, rhs in
                lhs.ip.family != rhs.ip.family && (lhs.ip.family == .ipv6) == options.preferIPv6
            }
            let ttl = addresses.map(\.ttl).min() ?? 0
            let name = try? DomainName(host)
            return Resolution(
                host: host, addresses: addresses,
                canonicalName: canonical.flatMap { $0 == name ? nil : $0.description },
                source: answering?.source ?? .doh, upstream: answering?.identifier, elapsed: elapsed,
                expiresAt: now + .seconds(Int64(ttl)), failedAttempts: failures)
        }
        if !rejected.isEmpty {
            throw DNSError(.rejectedPrivate, "\(host) resolved only to special-purpose addresses "
                           + "(\(rejected.joined(separator: ", "))); allow them with --allow-private")
        }
        if nxdomain {
            throw DNSError(.nxdomain, "\(host) does not exist (NXDOMAIN from \(answering?.identifier ?? "upstream"))",
                           attempts: failures)
        }
        if outcomes.allSatisfy({ $0.answer != nil }) {
            let types = outcomes.map(\.type.description).joined(separator: "/")
            throw DNSError(.nodata, "\(host) has no \(types) records", attempts: failures)
        }
        // Every type failed, or one said NODATA while the other failed: report the failures.
        var error = DNSError.combining(failures)
        error.message = "\(host): \(error.message)"
        throw error
    }
}
