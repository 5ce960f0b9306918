import AddressProbing
import ArgumentParser
import DNSCore
import Foundation
import HTTPDNS
import HijackDetection
import ResultFormatting
import SystemResolver

struct Compare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Compare the trusted resolvers' answers with the system DNS and prove hijacking with TLS probes.",
        discussion: """
            Every host is resolved through the trusted resolvers and the system DNS at once. Where \
            the system has addresses the trusted side lacks (or denies a name), each address is \
            probed: TCP connect, TLS handshake with SNI = host, certificate chain and name validated.
            Verdicts: consistent, hijacked (proven), suspicious (different, unproven), unverified \
            (a side did not answer).
            Exit status: 0 nothing hijacked, 3 a host is hijacked, 1 a host could not be checked, \
            2 usage or configuration error.
            """)

    @OptionGroup var options: LookupOptions

    @Option(
        name: .customLong("probe-port"), help: ArgumentHelp("Port the probes connect to (default 443, or 80 with --http-marker).", valueName: "N"))
    var probePort: Int?

    @Flag(name: .customLong("no-probe"), help: "Compare answers only: a difference stays suspicious.")
    var noProbe = false

    @Flag(
        name: .customLong("https-records"),
        help: "Also compare each host's HTTPS records (RFC 9460): system-side hints the trusted addresses do not hold are named.")
    var httpsRecords = false

    @Option(
        name: .customLong("http-marker"),
        help: ArgumentHelp("Probe plain HTTP instead of TLS: the genuine response contains TEXT (weaker evidence).", valueName: "TEXT"))
    var httpMarker: String?

    @Option(name: .customLong("http-path"), help: ArgumentHelp("Path the plain-HTTP probe asks for (default /).", valueName: "PATH"))
    var httpPath: String?

    @Option(
        name: .customLong("canary-zone"),
        help: ArgumentHelp("Also ask for a random, certainly absent name under ZONE: an honest resolver says NXDOMAIN.", valueName: "ZONE"))
    var canaryZone: String?

    @Option(
        name: .customLong("overall-timeout"),
        help: ArgumentHelp("Budget of the whole comparison in seconds (default 30); hosts not done are unverified.", valueName: "SECONDS"))
    var overallTimeout: Double = 30

    @Argument(help: "Host names to compare.")
    var hosts: [String] = []

    func validate() throws {
        if hosts.isEmpty && canaryZone == nil { throw ValidationError("give at least one HOST (or --canary-zone)") }
        _ = try options.addressQuery
        if noProbe && (probePort != nil || httpMarker != nil) {
            throw ValidationError("--no-probe cannot be combined with --probe-port or --http-marker")
        }
        if let probePort, !(1...65535).contains(probePort) {
            throw ValidationError("--probe-port must be between 1 and 65535, not \(probePort)")
        }
        if httpPath != nil && httpMarker == nil { throw ValidationError("--http-path needs --http-marker") }
        if let httpMarker, httpMarker.isEmpty { throw ValidationError("--http-marker must not be empty") }
        if let httpPath, !httpPath.hasPrefix("/") || httpPath.contains(where: { $0.isWhitespace || $0.isNewline }) {
            throw ValidationError("--http-path must start with / and hold no spaces, not '\(httpPath)'")
        }
        guard overallTimeout > 0, overallTimeout <= 3600, overallTimeout.isFinite else {
            throw ValidationError("--overall-timeout must be a number of seconds between 0 and 3600, not \(overallTimeout)")
        }
    }

    func run() async throws {
        let resolver = try options.makeResolver()
        let file = try options.loadConfig()
        let system: SystemResolver
        do { system = try options.makeSystemResolver(file) } catch { throw ValidationError(error.message) }
        defer { system.shutdown() }
        let stepTimeout = Duration.milliseconds(Int64((options.timeout ?? 3) * 1000))
        var prober: ConnectionProber?
        if !noProbe {
            let mode: ConnectionProber.Mode = httpMarker.map { .http(path: httpPath ?? "/", marker: $0) } ?? .tls
            prober = ConnectionProber(mode: mode, timeout: stepTimeout, caFile: options.caFile ?? file?.configuration.caFile)
        }
        let detector = HijackDetector(
            trusted: TrustedAnswers(resolver),
            system: PlainDNSAnswers(system, timeout: stepTimeout, validator: resolver.configuration.dnssec.policy == .off ? nil : resolver),
            prober: prober, probePort: probePort ?? (httpMarker == nil ? 443 : 80),
            type: try options.addressQuery)
        var results = await detector.compare(
            hosts, canaryZone: canaryZone,
            within: .milliseconds(Int64(overallTimeout * 1000)))
        var bindings: [ServiceBindingComparison?] = Array(repeating: nil, count: results.count)
        if httpsRecords {
            bindings = await Self.compareServiceBindings(results, resolver: resolver, system: system, timeout: stepTimeout)
            for (index, comparison) in bindings.enumerated() {
                guard let comparison, let evidence = comparison.evidence else { continue }
                results[index].verdict.reason += "; " + evidence
                // A hint outside the trusted addresses is evidence, not proof (CDNs move): a consistent
                // host becomes suspicious; a proven hijack stays hijacked.
                if !comparison.foreignHints.isEmpty, results[index].verdict.kind == .consistent { results[index].verdict.kind = .suspicious }
            }
        }
        for (result, binding) in zip(results, bindings) {
            print(options.json ? CompareOutput.json(result, https: binding) : CompareOutput.human(result, https: binding))
        }
        if results.contains(where: { $0.verdict.kind == .hijacked }) { throw ExitCode(Exit.hijacked) }
        throw ExitCode(results.contains { $0.verdict.kind == .unverified } ? Exit.failed : Exit.ok)
    }
}

extension Compare {
    /// The HTTPS records of every compared host (canaries skipped), all at once.
    static func compareServiceBindings(
        _ results: [HostComparison], resolver: HTTPDNSResolver, system: SystemResolver, timeout: Duration
    ) async -> [ServiceBindingComparison?] {
        await withTaskGroup(of: (Int, ServiceBindingComparison).self) { group in
            for (index, result) in results.enumerated() where !result.isCanary {
                let trusted: [IPAddress] = if case .addresses(let list) = result.trusted { list } else { [] }
                group.addTask {
                    (
                        index,
                        await ServiceBindingComparison.compare(
                            host: result.host, resolver: resolver, system: system, trustedAddresses: trusted, timeout: timeout)
                    )
                }
            }
            var collected = [ServiceBindingComparison?](repeating: nil, count: results.count)
            for await (index, comparison) in group { collected[index] = comparison }
            return collected
        }
    }
}

/// Renders comparisons: the contract's JSON line, or a few human lines per host.
enum CompareOutput {
    static func json(_ result: HostComparison, https: ServiceBindingComparison? = nil) -> String {
        var object = JSONObject()
        object["host"] = .string(result.host)
        object["verdict"] = .string(result.verdict.kind.rawValue)
        object["trusted"] = .array(addresses(result.trusted).map { .string($0.description) })
        object["system"] = .array(addresses(result.system).map { .string($0.description) })
        object["probes"] = .array(
            result.probes.map { probe in
                var entry = JSONObject()
                entry["ip"] = .string(probe.ip.description)
                entry["port"] = .int(probe.port)
                entry[probe.kind.rawValue] = .string(probe.outcome.rawValue)
                if let connect = probe.connectSeconds { entry["connect_ms"] = .double(milliseconds(connect)) }
                if let handshake = probe.handshakeSeconds { entry["handshake_ms"] = .double(milliseconds(handshake)) }
                if let detail = probe.detail { entry["detail"] = .string(detail) }
                return .object(entry)
            })
        object["reason"] = .string(result.verdict.reason)
        object["trusted_status"] = .string(status(result.trusted))
        object["system_status"] = .string(status(result.system))
        if result.isCanary { object["canary"] = .bool(true) }
        LookupOutput.dnssec(result.trustedDNSSEC, into: &object, key: "trusted_dnssec")
        LookupOutput.dnssec(result.systemDNSSEC, into: &object, key: "system_dnssec")
        if let https { object["https"] = .object(httpsJSON(https)) }
        return JSONValue.object(object).serialized
    }

    /// `{"trusted": [records] | {"error": code}, "system": …, "agree": bool, "foreign_hints": [ip]}`.
    static func httpsJSON(_ comparison: ServiceBindingComparison) -> JSONObject {
        func side(_ result: Result<[ServiceBinding], DNSError>) -> JSONValue {
            switch result {
            case .success(let records): return .array(records.map { .object(ServiceBindingOutput.record($0)) })
            case .failure(let error):
                var entry = JSONObject()
                entry["error"] = .string(error.code.rawValue)
                return .object(entry)
            }
        }
        var object = JSONObject()
        object["trusted"] = side(comparison.trusted)
        object["system"] = side(comparison.system)
        object["agree"] = .bool(comparison.agree)
        object["foreign_hints"] = .array(comparison.foreignHints.map { .string($0.description) })
        return object
    }

    static func human(_ result: HostComparison, https: ServiceBindingComparison? = nil) -> String {
        var lines = ["\(result.host)\(result.isCanary ? " (canary)" : "")  \(result.verdict.kind.rawValue.uppercased())"]
        func dnssec(_ status: DNSSECStatus?) -> String { status.map { "  (dnssec \($0.name))" } ?? "" }
        lines.append("  trusted: \(side(result.trusted))\(dnssec(result.trustedDNSSEC))")
        lines.append("  system:  \(side(result.system))\(dnssec(result.systemDNSSEC))")
        for probe in result.probes {
            var timing: [String] = []
            if let connect = probe.connectSeconds { timing.append("connect \(milliseconds(connect)) ms") }
            if let handshake = probe.handshakeSeconds { timing.append("handshake \(milliseconds(handshake)) ms") }
            let where_ = probe.ip.family == .ipv6 ? "[\(probe.ip)]:\(probe.port)" : "\(probe.ip):\(probe.port)"
            lines.append(
                "  probe \(where_) \(probe.kind.rawValue) \(probe.outcome.rawValue)"
                    + (timing.isEmpty ? "" : " (\(timing.joined(separator: ", ")))")
                    + (probe.detail.map { ": \($0)" } ?? ""))
        }
        if let https {
            func side(_ result: Result<[ServiceBinding], DNSError>) -> String {
                switch result {
                case .success(let records):
                    return records.map {
                        "\($0.priority) \($0.target) " + $0.parameters.map(ServiceBindingOutput.presentation).joined(separator: " ")
                    }
                    .joined(separator: " | ")
                case .failure(let error): return error.code.rawValue
                }
            }
            lines.append("  https trusted: \(side(https.trusted))")
            lines.append("  https system:  \(side(https.system))")
        }
        lines.append("  reason: \(result.verdict.reason)")
        return lines.joined(separator: "\n")
    }

    private static func addresses(_ answer: ResolverAnswer) -> [IPAddress] {
        if case .addresses(let list) = answer { return list }
        return []
    }

    private static func status(_ answer: ResolverAnswer) -> String {
        switch answer {
        case .addresses: return "addresses"
        case .absent(let code): return code.rawValue
        case .failed(let error): return error.code.rawValue
        }
    }

    private static func side(_ answer: ResolverAnswer) -> String {
        switch answer {
        case .addresses(let list): return list.map(\.description).joined(separator: ", ")
        case .absent(let code): return code == .nxdomain ? "NXDOMAIN" : "no addresses"
        case .failed(let error): return "failed: \(error.code.rawValue): \(error.message)"
        }
    }

    private static func milliseconds(_ seconds: Double) -> Double {
        (seconds * 10_000).rounded() / 10
    }
}
