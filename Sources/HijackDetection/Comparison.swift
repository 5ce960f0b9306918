import AddressProbing
import DNSCore
import HTTPDNS
import SystemResolver

/// One side of a comparison: something that answers "which addresses does this host have".
public protocol AnswerSource: Sendable {
    /// The addresses of `host`, or why there are none. Never throws: a failure is an answer too.
    func answer(for host: String, type: AddressQuery) async -> ResolverAnswer
    /// The answer with what DNSSEC proved about it (nil: not validated).
    func provenAnswer(for host: String, type: AddressQuery) async -> ProvenAnswer
}

/// An answer and its DNSSEC status, when the side validates.
public struct ProvenAnswer: Sendable, Hashable {
    public var answer: ResolverAnswer
    public var dnssec: DNSSECStatus?

    public init(_ answer: ResolverAnswer, dnssec: DNSSECStatus? = nil) {
        self.answer = answer
        self.dnssec = dnssec
    }
}

extension AnswerSource {
    public func provenAnswer(for host: String, type: AddressQuery) async -> ProvenAnswer { ProvenAnswer(await answer(for: host, type: type)) }
}

/// The trusted side: the HTTPDNS resolver (its DoH/JSON upstreams, its own timeout).
public struct TrustedAnswers: AnswerSource {
    public let resolver: HTTPDNSResolver

    public init(_ resolver: HTTPDNSResolver) {
        self.resolver = resolver
    }

    public func answer(for host: String, type: AddressQuery) async -> ResolverAnswer {
        await provenAnswer(for: host, type: type).answer
    }

    /// With the resolver's DNSSEC policy on, the status of its answer (or of its denial).
    public func provenAnswer(for host: String, type: AddressQuery) async -> ProvenAnswer {
        do {
            let resolution = try await resolver.resolve(host, type: type)
            return ProvenAnswer(ResolverAnswer(.success(resolution.addresses.map(\.ip))), dnssec: resolution.dnssec)
        } catch {
            return ProvenAnswer(ResolverAnswer(.failure(error)), dnssec: error.dnssec)
        }
    }
}

/// The system side: one plain-DNS upstream (c-ares' ``/SystemResolver/SystemResolver``), each address type asked
/// at once.
public struct PlainDNSAnswers: AnswerSource {
    public let upstream: any DNSUpstream
    public let timeout: Duration
    /// When set (and the upstream is a ``/SystemResolver/SystemResolver``), the system's answers are asked with DO
    /// and validated by this resolver's DNSSEC settings, the chain fetched from its trusted
    /// upstreams: a forged answer in a signed zone is then named bogus, with the reason.
    public var validator: HTTPDNSResolver?

    public init(_ upstream: any DNSUpstream, timeout: Duration = .seconds(3), validator: HTTPDNSResolver? = nil) {
        self.upstream = upstream
        self.timeout = timeout
        self.validator = validator
    }

    public func provenAnswer(for host: String, type: AddressQuery) async -> ProvenAnswer {
        guard let validator, let system = upstream as? SystemResolver, let name = try? DomainName(host) else {
            return ProvenAnswer(await answer(for: host, type: type))
        }
        let timeout = self.timeout
        let results = await withTaskGroup(of: (Int, Result<AddressAnswer, DNSError>, DNSSECStatus?).self) { group in
            for (index, recordType) in type.recordTypes.enumerated() {
                group.addTask {
                    let question = DNSMessage.Question(name: name, type: recordType)
                    do throws(DNSError) {
                        let message = try await system.message(question, timeout: timeout, dnssecOK: true)
                        let status = await validator.validate(message, name: name, type: recordType)
                        return (index, .success(try DNSMessage.answer(decoding: message.encode(), to: question, id: nil)), status)
                    } catch {
                        return (index, .failure(error), nil)
                    }
                }
            }
            var collected: [(Int, Result<AddressAnswer, DNSError>, DNSSECStatus?)] = []
            for await result in group { collected.append(result) }
            return collected.sorted { $0.0 < $1.0 }
        }
        let statuses = results.compactMap(\.2)
        let status = DNSSECStatus.combined(statuses)
        return ProvenAnswer(Self.combine(results.map(\.1)), dnssec: status)
    }

    public func answer(for host: String, type: AddressQuery) async -> ResolverAnswer {
        let name: DomainName
        do { name = try DomainName(host) } catch { return .failed(error) }
        let upstream = self.upstream, timeout = self.timeout
        let results = await withTaskGroup(of: (Int, Result<AddressAnswer, DNSError>).self) { group in
            for (index, recordType) in type.recordTypes.enumerated() {
                group.addTask {
                    do throws(DNSError) {
                        return (index, .success(try await upstream.query(DNSMessage.Question(name: name, type: recordType), timeout: timeout)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var collected: [(Int, Result<AddressAnswer, DNSError>)] = []
            for await result in group { collected.append(result) }
            return collected.sorted { $0.0 < $1.0 }.map(\.1)
        }
        return Self.combine(results)
    }

    /// Both types' answers as one: the addresses of either; absent only when every type is; a
    /// failure only when no type gave addresses.
    static func combine(_ results: [Result<AddressAnswer, DNSError>]) -> ResolverAnswer {
        var addresses: [IPAddress] = []
        var failure: DNSError?
        var allNXDOMAIN = true
        for result in results {
            switch result {
            case .success(.addresses(let found, _)):
                addresses += found.map(\.ip)
                allNXDOMAIN = false
            case .success(.nxdomain): break
            case .success(.nodata): allNXDOMAIN = false
            case .failure(let error):
                failure = failure ?? error
                allNXDOMAIN = false
            }
        }
        if !addresses.isEmpty { return .addresses(addresses) }
        if let failure { return .failed(failure) }
        return .absent(allNXDOMAIN ? .nxdomain : .nodata)
    }
}

/// Everything learned about one host: both answers, the probes made, the verdict.
public struct HostComparison: Sendable, Hashable {
    public var host: String
    public var trusted: ResolverAnswer
    public var system: ResolverAnswer
    public var probes: [AddressProbe]
    public var verdict: Verdict
    /// A canary: a random name that cannot exist, asked to catch a resolver that invents answers.
    public var isCanary: Bool
    /// What DNSSEC proved about each side's answer (nil: not validated).
    public var trustedDNSSEC: DNSSECStatus?
    public var systemDNSSEC: DNSSECStatus?
    /// When HTTPS records were compared: the system's hints that the trusted addresses do not hold.
    public var foreignHints: [IPAddress]?

    public init(
        host: String, trusted: ResolverAnswer, system: ResolverAnswer, probes: [AddressProbe],
        verdict: Verdict, isCanary: Bool = false, trustedDNSSEC: DNSSECStatus? = nil, systemDNSSEC: DNSSECStatus? = nil
    ) {
        self.host = host
        self.trusted = trusted
        self.system = system
        self.probes = probes
        self.verdict = verdict
        self.isCanary = isCanary
        self.trustedDNSSEC = trustedDNSSEC
        self.systemDNSSEC = systemDNSSEC
    }
}

/// Compares the trusted and the system view of hosts, probing addresses where they differ.
///
/// ```swift
/// let detector = HijackDetector(trusted: TrustedAnswers(resolver),
///                             system: PlainDNSAnswers(try SystemResolver(servers: ["192.0.2.1"])),
///                             prober: ConnectionProber(mode: .tls))
/// for result in await detector.compare(["api.example.com"], within: .seconds(10)) {
///     print(result.host, result.verdict.kind, result.verdict.reason)
/// }
/// ```
public struct HijackDetector: Sendable {
    public var trusted: any AnswerSource
    public var system: any AnswerSource
    /// nil: answers are compared without probing, so a difference stays `suspicious`.
    public var prober: (any AddressProbing)?
    /// The port probed on each address that only one side returned (443 for TLS).
    public var probePort: Int
    /// The address families asked on both sides.
    public var type: AddressQuery

    public init(
        trusted: any AnswerSource, system: any AnswerSource, prober: (any AddressProbing)?,
        probePort: Int = 443, type: AddressQuery = .both
    ) {
        self.trusted = trusted
        self.system = system
        self.prober = prober
        self.probePort = probePort
        self.type = type
    }

    /// Compares one host: both sides asked at once, then the probes the difference calls for, all
    /// at once.
    ///
    /// When the trusted answer is DNSSEC-secure, a differing system answer is judged on that proof
    /// alone and nothing is probed.
    public func compare(_ host: String) async -> HostComparison {
        async let trustedAnswer = trusted.provenAnswer(for: host, type: type)
        async let systemAnswer = system.provenAnswer(for: host, type: type)
        let (trustedSide, systemSide) = await (trustedAnswer, systemAnswer)
        let proven = trustedSide.dnssec == .secure
        let probes = proven ? [] : await probe(host, Self.addressesToProbe(trusted: trustedSide.answer, system: systemSide.answer))
        var verdict = Verdict.judge(
            host: host, trusted: trustedSide.answer, system: systemSide.answer, probes: probes, probing: prober != nil)
        verdict = verdict.withDNSSEC(host: host, trusted: trustedSide, system: systemSide)
        return HostComparison(
            host: host, trusted: trustedSide.answer, system: systemSide.answer, probes: probes, verdict: verdict,
            trustedDNSSEC: trustedSide.dnssec, systemDNSSEC: systemSide.dnssec)
    }

    /// Asks both sides for a random name under `zone` that cannot exist. An honest resolver says
    /// NXDOMAIN; one that answers with addresses rewrites absent names (ads, search pages, blocks).
    public func checkCanary(zone: String) async -> HostComparison {
        let host: String
        do { host = try Self.canaryName(in: zone) } catch {
            let failed = ResolverAnswer.failed(error)
            return HostComparison(
                host: "canary.\(zone)", trusted: failed, system: failed, probes: [],
                verdict: Verdict(.unverified, "no canary name under '\(zone)': \(error.message)"), isCanary: true)
        }
        async let trustedAnswer = trusted.answer(for: host, type: type)
        async let systemAnswer = system.answer(for: host, type: type)
        let (trustedSide, systemSide) = await (trustedAnswer, systemAnswer)
        return HostComparison(
            host: host, trusted: trustedSide, system: systemSide, probes: [],
            verdict: Verdict.judgeCanary(host: host, zone: zone, trusted: trustedSide, system: systemSide),
            isCanary: true)
    }

    /// Compares every host at once (and the canary first, when a zone is given) within one overall
    /// budget; results in the order given. A host not finished in time is `unverified`.
    public func compare(_ hosts: [String], canaryZone: String? = nil, within budget: Duration) async -> [HostComparison] {
        enum Job: Sendable { case host(String), canary(String) }
        let jobs = (canaryZone.map { [Job.canary($0)] } ?? []) + hosts.map { Job.host($0) }
        let detector = self
        // Each child returns its job's result; the deadline child returns nil.
        let finished = await withTaskGroup(of: (Int, HostComparison)?.self) { group in
            for (index, job) in jobs.enumerated() {
                group.addTask {
                    switch job {
                    case .host(let host): return (index, await detector.compare(host))
                    case .canary(let zone): return (index, await detector.checkCanary(zone: zone))
                    }
                }
            }
            group.addTask {
                try? await Task.sleep(for: budget)
                return nil
            }
            var results: [HostComparison?] = Array(repeating: nil, count: jobs.count)
            var remaining = jobs.count
            while remaining > 0, let next = await group.next() {
                guard let (index, result) = next else { break }
                results[index] = result
                remaining -= 1
            }
            group.cancelAll()
            return results
        }
        let seconds = Double(budget.components.seconds) + Double(budget.components.attoseconds) / 1e18
        let budgetText = seconds == seconds.rounded() ? "\(Int(seconds))" : "\(seconds)"
        return finished.enumerated().map { index, result in
            if let result { return result }
            let host: String
            switch jobs[index] {
            case .host(let name): host = name
            case .canary(let zone): host = "canary.\(zone)"
            }
            let late = ResolverAnswer.failed(DNSError(.timeout, "not finished within the overall timeout"))
            return HostComparison(
                host: host, trusted: late, system: late, probes: [],
                verdict: Verdict(.unverified, "not finished within the overall timeout of \(budgetText) s"),
                isCanary: { if case .canary = jobs[index] { return true } else { return false } }())
        }
    }

    /// A name under `zone` no resolver can know: a random 16-character label.
    public static func canaryName(in zone: String) throws(DNSError) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        var generator = SystemRandomNumberGenerator()
        let label = "canary-" + String((0..<16).map { _ in alphabet[Int(generator.next(upperBound: UInt(alphabet.count)))] })
        let trimmed = zone.hasSuffix(".") ? String(zone.dropLast()) : zone
        let name = "\(label).\(trimmed)"
        _ = try DomainName(name)
        return name
    }

    /// Which addresses the verdict needs probed: when the system has addresses the trusted side
    /// lacks, those and the trusted ones (a trusted proof is what makes a failing one damning);
    /// when the system denies a name, the trusted ones (proof the name is real).
    /// At most this many probes per host (system-only addresses first): a hostile answer with
    /// hundreds of addresses must not turn into hundreds of connections. Unprobed ones prove nothing.
    public static let maxProbesPerHost = 16

    static func addressesToProbe(trusted: ResolverAnswer, system: ResolverAnswer) -> [IPAddress] {
        switch (trusted, system) {
        case (.addresses(let trustedAddresses), .addresses(let systemAddresses)):
            let known = Set(trustedAddresses)
            let systemOnly = systemAddresses.filter { !known.contains($0) }
            return systemOnly.isEmpty ? [] : Array(unique(systemOnly + trustedAddresses).prefix(maxProbesPerHost))
        case (.addresses(let trustedAddresses), .absent):
            return Array(unique(trustedAddresses).prefix(maxProbesPerHost))
        default:
            return []
        }
    }

    private static func unique(_ addresses: [IPAddress]) -> [IPAddress] {
        var seen: Set<IPAddress> = []
        return addresses.filter { seen.insert($0).inserted }
    }

    private func probe(_ host: String, _ addresses: [IPAddress]) async -> [AddressProbe] {
        guard let prober, !addresses.isEmpty else { return [] }
        let port = probePort
        return await withTaskGroup(of: (Int, AddressProbe).self) { group in
            for (index, ip) in addresses.enumerated() {
                group.addTask { (index, await prober.probe(host: host, ip: ip, port: port)) }
            }
            var probes: [(Int, AddressProbe)] = []
            for await probe in group { probes.append(probe) }
            return probes.sorted { $0.0 < $1.0 }.map(\.1)
        }
    }
}
