import AddressProbing
import CoreMetrics
import Crypto
import DNSCore
import DNSStubServer
import DNSWire
import DaemonHTTP
import DaemonListening
import ForwardProxy
import Foundation
import HTTPDNS
import HijackDetection
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import RedisCache
import ResolverConfig
import ServiceLifecycle
import Synchronization
import SystemResolver
import UnixSignals

/// Keeps readiness true to the upstreams: every `readiness.interval`, an upstream that has had no
/// exchange for that long is asked the probe question (bypassing the cache). Traffic that misses
/// the cache counts too, so a busy daemon sends few probes.
struct ReadinessMonitor: Service {
    let state: DaemonState
    let notifier: SystemdNotifier?
    /// Called once, after the first check.
    let checked: @Sendable () -> Void

    func run() async throws {
        await cancelWhenGracefulShutdown {
            var first = true
            var status = ""
            while !Task.isCancelled {
                let runtime = state.current
                let interval = runtime.config.daemon.readiness.interval
                await runtime.resolver.probeIdleUpstreams(
                    runtime.readinessProbe, idle: interval,
                    timeout: min(runtime.config.lookup.options.timeout, interval))
                state.metrics.ready.record(state.passesHealthChecks ? 1 : 0)
                if first {
                    first = false
                    status = state.statusLine
                    checked()
                } else if let notifier, state.statusLine != status {
                    status = state.statusLine
                    notifier.status(status)
                }
                try? await Task.sleep(for: interval / 2)
            }
        }
    }
}

extension ConfigFile {
    /// The question readiness and the upstreams' health probes ask: `readiness.probe`, else the first
    /// watched host, else the first pre-resolved name (type A), else the root's NS.
    var readinessProbe: DNSMessage.Question {
        let name = daemon.readiness.probe ?? daemon.watch.first?.host ?? lookup.preresolve.first
        if let name, let domain = try? DomainName(name) { return DNSMessage.Question(name: domain, type: .a) }
        return DNSMessage.Question(name: .root, type: .ns)
    }
}
