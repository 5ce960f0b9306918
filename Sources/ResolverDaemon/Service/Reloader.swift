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

/// SIGHUP: the new file is fully validated and built before it replaces the old; an invalid one is
/// logged (with its line and key) and the old configuration keeps serving.
struct Reloader: Service {
    let state: DaemonState
    let notifier: SystemdNotifier?

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                reload()
            }
        }
    }

    func reload() {
        let logger = state.logger
        guard let path = state.configPath else {
            logger.notice("SIGHUP ignored: the settings came from the command line, there is no file to re-read")
            return
        }
        notifier?.reloading()
        defer { notifier?.ready(status: state.statusLine) }
        do {
            var config = try ConfigFile.load(path)
            state.adjust(&config)
            // What the daemon started with: those keys do not change until a restart, so every
            // reload compares with them, not with the last reload's file (F63-1).
            let running = state.current.listenerConfig
            for (key, changed) in [
                ("listen", config.daemon.listen != running.daemon.listen), ("tls", config.daemon.tls != running.daemon.tls),
                ("dns_listen", config.daemon.dnsListen != running.daemon.dnsListen),
                ("dot_listen", config.daemon.dotListen != running.daemon.dotListen),
                ("proxy_listen", config.daemon.proxyListen != running.daemon.proxyListen),
                ("limits.max_connections", config.daemon.limits.maxConnections != running.daemon.limits.maxConnections),
                ("limits.request_timeout", config.daemon.limits.requestTimeout != running.daemon.limits.requestTimeout),
                ("limits.idle_timeout", config.daemon.limits.idleTimeout != running.daemon.limits.idleTimeout),
                ("query_log", config.daemon.queryLog != running.daemon.queryLog),
                ("rate_limit", config.daemon.rateLimit != running.daemon.rateLimit),
                ("trusted_proxies", config.daemon.trustedProxies != running.daemon.trustedProxies),
            ] where changed {
                logger.warning("\(key) changed: takes effect after a restart", metadata: ["key": "\(key)"])
            }
            // The TLS files must make a TLS context: a restart must not fail on what a reload accepted.
            // After the switch to `user:` the key may be root's alone: the files the running context
            // came from are not read again.
            if !(state.privilegesDropped.load(ordering: .relaxed) && config.daemon.tls == running.daemon.tls) {
                _ = try Daemon.tlsContext(config)
            }
            let runtime = try Runtime(config, metrics: state.metrics.factory, logger: logger, listeners: state.current.listenerConfig)
            Daemon.logDiscovery(runtime.discovery, logger: logger)
            let old = state.replace(with: runtime)
            state.forget(except: Set(config.daemon.watch.map(\.host)))
            // Lookups still running on the old runtime finish with its upstreams; its c-ares
            // thread is stopped once they had time to.
            Task {
                try? await Task.sleep(for: .seconds(30))
                old.shutdown()
            }
            // The query log's file is opened again (after an external rotation, say).
            state.queryLog?.reopen()
            logger.notice("configuration reloaded", metadata: ["file": "\(path)", "watched": "\(config.daemon.watch.count)"])
            Daemon.logLocalData(config, logger: logger)
        } catch {
            logger.error("configuration NOT reloaded, the previous one keeps serving", metadata: ["error": "\(error.message)"])
        }
    }
}
