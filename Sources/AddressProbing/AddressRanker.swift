import DNSCore

/// An address with what its latest probe measured.
public struct RankedAddress: Sendable, Hashable, CustomStringConvertible {
    public var ip: IPAddress
    /// Connect (plus TLS handshake, when probing TLS) seconds; nil when the probe failed.
    public var rtt: Double?
    public var outcome: AddressProbe.Outcome

    public init(ip: IPAddress, rtt: Double?, outcome: AddressProbe.Outcome) {
        self.ip = ip
        self.rtt = rtt
        self.outcome = outcome
    }

    public var isHealthy: Bool { outcome == .ok }

    public var description: String {
        rtt.map { "\(ip) (\(Int(($0 * 1_000_000).rounded())) µs)" } ?? "\(ip) (\(outcome.rawValue))"
    }
}

/// Orders a host's addresses by measured connect latency (the vendor SDKs' "IP selection"):
/// every address is probed at once within one budget, healthy ones first by RTT, failing ones last.
///
/// Measurements are remembered for `memory` per (host, address, port), so a busy client probes each
/// address once per period, and concurrent callers share one round of probes.
///
/// ```swift
/// let ranker = AddressRanker(resolver: resolver)
/// let best = try await ranker.rankedAddresses(for: "api.example.com", port: 443)
/// ```
public actor AddressRanker {
    private struct Key: Hashable {
        var host: String
        var ip: IPAddress
        var port: Int
    }

    private struct Measurement {
        var address: RankedAddress
        var at: ResolverInstant
    }

    public nonisolated let resolver: any HostResolving
    private let prober: any AddressProbing
    private let memory: Duration
    private let clock: any ResolverClock
    private var measurements: [Key: Measurement] = [:]
    private var inFlight: [Key: Task<RankedAddress, Never>] = [:]

    /// - Parameters:
    ///   - resolver: where a host's addresses come from (an `HTTPDNSResolver`, or a fake in tests).
    ///   - prober: how an address is measured; default TCP connect within 1 s (TLS proves more
    ///     and costs a handshake: `ConnectionProber(mode: .tls)`).
    ///   - memory: how long a measurement is reused. Default 60 s.
    ///   - clock: the clock measurements age by (a manual one in tests).
    public init(
        resolver: any HostResolving, prober: any AddressProbing = ConnectionProber(mode: .tcp, timeout: .seconds(1)),
        memory: Duration = .seconds(60), clock: any ResolverClock = MonotonicClock()
    ) {
        self.resolver = resolver
        self.prober = prober
        self.memory = memory
        self.clock = clock
    }

    /// The host's trusted addresses, healthy ones only, fastest first. When none is healthy, all of
    /// them in the resolver's order (a caller may still try; nothing better is known).
    public func rankedAddresses(for host: String, port: Int, type: AddressQuery = .both) async throws(DNSError) -> [RankedAddress] {
        let resolution = try await resolver.resolve(host, type: type)
        let ranked = await rank(resolution.addresses.map(\.ip), host: host, port: port)
        let healthy = ranked.filter(\.isHealthy)
        return healthy.isEmpty ? ranked : healthy
    }

    /// All of `addresses`, healthy ones first by RTT, failing ones after in the given order.
    public func rank(_ addresses: [IPAddress], host: String, port: Int) async -> [RankedAddress] {
        let keys = addresses.map { Key(host: host.lowercased(), ip: $0, port: port) }
        var tasks: [Task<RankedAddress, Never>] = []
        for key in keys {
            if let known = measurements[key], clock.now < known.at + memory {
                tasks.append(Task { known.address })
            } else if let running = inFlight[key] {
                tasks.append(running)
            } else {
                let prober = self.prober
                let task = Task { () -> RankedAddress in
                    let probe = await prober.probe(host: key.host, ip: key.ip, port: key.port)
                    return RankedAddress(ip: key.ip, rtt: probe.outcome == .ok ? probe.setupSeconds ?? 0 : nil, outcome: probe.outcome)
                }
                inFlight[key] = task
                tasks.append(task)
            }
        }
        var results: [RankedAddress] = []
        for (key, task) in zip(keys, tasks) {
            let address = await task.value
            if inFlight[key] != nil {
                inFlight[key] = nil
                measurements[key] = Measurement(address: address, at: clock.now)
            }
            if measurements.count > Self.pruneThreshold { prune() }
            results.append(address)
        }
        let healthy = results.filter(\.isHealthy).sorted { ($0.rtt ?? 0) < ($1.rtt ?? 0) }
        return healthy + results.filter { !$0.isHealthy }
    }

    /// Past this many remembered measurements, expired ones are dropped.
    static let pruneThreshold = 4096

    private func prune() {
        let now = clock.now
        measurements = measurements.filter { now < $0.value.at + memory }
    }
}
