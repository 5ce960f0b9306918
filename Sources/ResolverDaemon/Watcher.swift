import AddressProbing
import DNSCore
import Foundation
import HTTPDNS
import HijackDetection
import Logging
import ResolverConfig
import ServiceLifecycle

/// Checks every watched host each interval (with up to 10 % jitter): resolves it (keeping it warm),
/// compares trusted and system answers with probes, ranks the trusted addresses. Verdict changes
/// are logged and counted.
struct Watcher: Service {
    let state: DaemonState

    func run() async throws {
        // Graceful shutdown cancels the loop; that is the end of the service, not a failure.
        await cancelWhenGracefulShutdown {
            var due: [String: ContinuousClock.Instant] = [:]
            while !Task.isCancelled {
                let watches = state.current.config.daemon.watch
                let now = ContinuousClock.now
                let ready = watches.filter { due[$0.host].map { $0 <= now } ?? true }
                for watch in ready {
                    let jitter = Duration.milliseconds(Int64.random(in: 0...max(0, watch.interval.milliseconds / 10)))
                    due[watch.host] = now + watch.interval + jitter
                }
                if !ready.isEmpty {
                    // A vendor upstream answers the due names in batches first; the checks then
                    // find them in the cache.
                    await state.current.resolver.engine.warmInBatches(ready.map(\.host))
                    await withTaskGroup(of: Void.self) { group in
                        for watch in ready { group.addTask { await check(watch) } }
                    }
                }
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    func check(_ watch: DaemonSettings.Watch) async {
        let runtime = state.current
        let detector = HijackDetector(
            trusted: runtime.detector.trusted, system: runtime.detector.system,
            prober: runtime.detector.prober, probePort: watch.port)
        var comparison = await detector.compare(watch.host)
        if watch.httpsRecords {
            // As `resolve compare --https-records`: hints outside the trusted addresses are evidence,
            // not proof — named in the reason, and a consistent host becomes suspicious.
            let trusted: [IPAddress] = if case .addresses(let list) = comparison.trusted { list } else { [] }
            let bindings = await ServiceBindingComparison.compare(
                host: watch.host, resolver: runtime.resolver, system: runtime.system, trustedAddresses: trusted,
                timeout: min(runtime.config.lookup.options.timeout, .seconds(3)))
            if let evidence = bindings.evidence { comparison.verdict.reason += "; " + evidence }
            if !bindings.foreignHints.isEmpty, comparison.verdict.kind == .consistent { comparison.verdict.kind = .suspicious }
            comparison.foreignHints = bindings.foreignHints
        }
        var ranked: [RankedAddress] = []
        if case .addresses(let addresses) = comparison.trusted {
            ranked = await runtime.ranker.rank(addresses, host: watch.host, port: watch.port)
        }
        let status = WatchStatus(host: watch.host, port: watch.port, checkedAt: Date(), comparison: comparison, ranked: ranked)
        let previous = state.record(status)
        let verdict = comparison.verdict
        let metrics = state.metrics
        metrics.watchCheck(
            host: watch.host, verdict: verdict.kind.rawValue,
            all: [Verdict.Kind.consistent, .hijacked, .suspicious, .unverified].map(\.rawValue))
        for probe in comparison.probes { metrics.probe(result: probe.outcome.rawValue) }
        if previous != verdict.kind {
            metrics.verdictChanged(host: watch.host)
            let level: Logger.Level = verdict.kind == .hijacked ? .error : verdict.kind == .consistent ? .notice : .warning
            state.logger.log(
                level: level, "verdict changed",
                metadata: [
                    "host": "\(watch.host)", "from": "\(previous?.rawValue ?? "none")", "to": "\(verdict.kind.rawValue)",
                    "reason": "\(verdict.reason)",
                ])
        }
    }
}

extension Duration {
    var milliseconds: Int64 { components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000 }
}
