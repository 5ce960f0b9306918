// `resolve compare`'s engine over many hosts: is it fully concurrent, and how many connections
// does it make? Usage:
//
//   CompareBenchmark DOH_URL CA_FILE SYSTEM_DNS PROBE_PORT HOSTS ROUNDS
//
// Hosts are h0…h(HOSTS-1).cmp.hd.test: the trusted side answers 127.0.0.4, the system side
// 127.0.0.10, both genuine nginx nodes, so each host costs two TLS probes. Per round, one JSON line:
//   concurrent  every host at once (what `resolve compare` does): wall time, the slowest probe's
//               own time inside that run, connections opened
//   sequential  the peer: the same comparisons one host after another
//   isolated    one probe alone (the floor of a single probe on an idle machine)
// Only loopback traffic, to servers Scripts/env/testenv.sh starts.
import AddressProbing
import CurlSupport
import DNSCore
import Foundation
import HTTPDNS
import HijackDetection
import Synchronization
import SystemResolver

/// Wraps the real prober to time each probe as its caller sees it (queueing included).
final class TimingProber: AddressProbing {
    let inner: ConnectionProber
    let durations = Mutex<[Double]>([])

    init(_ inner: ConnectionProber) { self.inner = inner }

    func probe(host: String, ip: IPAddress, port: Int) async -> AddressProbe {
        let start = ContinuousClock.now
        let probe = await inner.probe(host: host, ip: ip, port: port)
        let seconds = (ContinuousClock.now - start).seconds
        durations.withLock { $0.append(seconds) }
        return probe
    }

    func take() -> [Double] {
        durations.withLock { state in
            let taken = state
            state = []
            return taken
        }
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}

let arguments = CommandLine.arguments
guard arguments.count == 7, let probePort = Int(arguments[4]), let hostCount = Int(arguments[5]), let rounds = Int(arguments[6]) else {
    FileHandle.standardError.write(Data("usage: CompareBenchmark DOH_URL CA_FILE SYSTEM_DNS PROBE_PORT HOSTS ROUNDS\n".utf8))
    exit(2)
}
let (doh, caFile, systemServer) = (arguments[1], arguments[2], arguments[3])

func makeComparator(_ prober: TimingProber) throws -> (HijackDetector, HTTPDNSResolver, SystemResolver) {
    var options = HTTPDNSOptions(timeout: .seconds(5), allowPrivate: true)
    options.minTTL = .zero
    let resolver = try HTTPDNSResolver(
        configuration: .init(upstreams: [try .doh(doh, bootstrap: ["127.0.0.1"])], caFile: caFile),
        options: options)
    let system = try SystemResolver(servers: [systemServer])
    return (
        HijackDetector(trusted: TrustedAnswers(resolver), system: PlainDNSAnswers(system), prober: prober, probePort: probePort),
        resolver, system
    )
}

func line(_ fields: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])
    print(String(decoding: data, as: UTF8.self))
}

let prober = TimingProber(ConnectionProber(mode: .tls, timeout: .seconds(10), caFile: caFile))
for round in 1...rounds {
    // A fresh resolver each run: nothing cached, the DoH connection opened anew.
    let hosts = (0..<hostCount).map { "h\($0)-r\(round).cmp.hd.test" }
    do {
        let (detector, resolver, system) = try makeComparator(prober)
        let connectionsBefore = CurlEngine.shared.connectionsOpened
        let start = ContinuousClock.now
        let results = await detector.compare(hosts, within: .seconds(60))
        let wall = (ContinuousClock.now - start).seconds
        let probes = prober.take()
        let verdicts = Dictionary(grouping: results, by: \.verdict.kind.rawValue).mapValues(\.count)
        let setups = results.flatMap(\.probes).compactMap(\.setupSeconds)
        line([
            "mode": "concurrent", "round": round, "hosts": hostCount, "wall_s": wall, "probes": probes.count,
            "slowest_probe_s": probes.max() ?? 0, "slowest_setup_s": setups.max() ?? 0,
            "connections": CurlEngine.shared.connectionsOpened - connectionsBefore, "verdicts": verdicts,
        ])
        system.shutdown()
        _ = resolver
    }
    do {
        let (detector, resolver, system) = try makeComparator(prober)
        let sequentialHosts = hosts.map { $0.replacingOccurrences(of: "-r\(round).", with: "-s\(round).") }
        let start = ContinuousClock.now
        for host in sequentialHosts { _ = await detector.compare(host) }
        let wall = (ContinuousClock.now - start).seconds
        let probes = prober.take()
        line(["mode": "sequential", "round": round, "hosts": hostCount, "wall_s": wall, "probes": probes.count])
        system.shutdown()
        _ = resolver
    }
    do {
        let alone = await ConnectionProber(mode: .tls, timeout: .seconds(10), caFile: caFile)
            .probe(host: "h-alone.cmp.hd.test", ip: IPAddress("127.0.0.4")!, port: probePort)
        line(["mode": "isolated", "round": round, "setup_s": alone.setupSeconds ?? -1, "outcome": alone.outcome.rawValue])
    }
}
