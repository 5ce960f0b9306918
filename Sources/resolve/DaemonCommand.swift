import ArgumentParser
import DNSCore
import Foundation
import HTTPDNS
import Logging
import Metrics
import ResolverConfig
import ResolverDaemon

struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Serve the trusted, health-checked view: HTTP API, RFC 8484 DoH endpoint, DNS stub, Prometheus metrics.",
        discussion: """
            Endpoints: GET /healthz, GET /readyz, GET /metrics, GET /v1/resolve?host=H&type=a|aaaa|both, \
            GET|POST /dns-query (RFC 8484), GET /v1/status. SIGHUP reloads the config file (an invalid \
            file is logged and the old configuration keeps serving); SIGTERM/SIGINT drain (at most 5 s) \
            and exit 0.
            Exit status: 0 after a clean shutdown, 2 usage or configuration error, 1 anything else.
            """)

    @Option(name: .customLong("config"), help: ArgumentHelp("The YAML config file (required).", valueName: "FILE"))
    var config: String

    @Option(
        name: .customLong("log-level"),
        help: ArgumentHelp("trace, debug, info, notice, warning, error or critical (default info).", valueName: "LEVEL"))
    var logLevel: String = "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel.lowercased()) else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(logLevel)'")
        }
        let (exposition, logger) = bootstrapServer(level: level, label: "resolve.daemon")
        let daemon: Daemon
        do {
            daemon = try Daemon(configPath: config, metrics: exposition.factory, exposition: exposition.render, logger: logger)
        } catch {
            throw ValidationError(error.message)
        }
        try await daemon.run()
        exitAfterStop()
    }

}

/// `resolve proxy`: the forward proxy alone, in the foreground (the daemon's proxy without its API,
/// stub or watch list).
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Run a local HTTP(S) forward proxy that connects by HTTPDNS (CONNECT tunnels and plain http://).",
        discussion: """
            Point any program at it: HTTPS_PROXY=http://127.0.0.1:8118 HTTP_PROXY=http://127.0.0.1:8118. \
            The trusted resolvers come from the lookup flags (--doh, --preset, --bootstrap, …) or --config, \
            the proxy: policy from the file; the flags override the listener and the policy. SIGHUP reloads \
            the file; SIGTERM/SIGINT stop accepting and let tunnels finish (at most 5 s).
            Exit status: 0 after a clean shutdown, 2 usage or configuration error, 1 anything else.
            """)

    /// The trusted resolvers and lookup policy, from `--config` and the lookup flags as for `resolve lookup`.
    @OptionGroup var lookup: LookupOptions

    @Option(
        name: .customLong("listen"), help: ArgumentHelp("Where the proxy listens (default proxy_listen, else 127.0.0.1:8118).", valueName: "IP:PORT"))
    var listen: String?

    @Option(
        name: .customLong("connect-port"),
        help: ArgumentHelp("A port CONNECT may reach (replaces proxy.connect_ports); repeatable.", valueName: "PORT"))
    var connectPorts: [Int] = []

    @Flag(name: .customLong("allow-private-destinations"), help: "Let tunnels reach private, loopback and link-local addresses.")
    var allowPrivateDestinations = false

    @Option(name: .customLong("log-level"), help: ArgumentHelp("trace … critical (default info).", valueName: "LEVEL"))
    var logLevel: String = "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel.lowercased()) else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(logLevel)'")
        }
        for port in connectPorts where !(1...65_535).contains(port) { throw ValidationError("--connect-port \(port) is not a port") }
        let (exposition, logger) = bootstrapServer(level: level, label: "resolve.proxy")
        let (listen, ports, allowPrivate) = (self.listen, connectPorts, allowPrivateDestinations)
        // Flags win over the file, as for every command; without `--config` they are all there is
        // (and SIGHUP has nothing to re-read).
        let settings = try lookup.makeSettings()
        let file = lookup.config
        let flagsGiven = !lookup.doh.isEmpty || !lookup.jsonAPI.isEmpty || !lookup.presets.isEmpty
        let adjust: @Sendable (inout ConfigFile) -> Void = { config in
            // The proxy alone: the API on a free loopback port, no TLS, stub or watch list.
            config.daemon.proxyListen = listen ?? config.daemon.proxyListen ?? "127.0.0.1:8118"
            config.daemon.listen = "127.0.0.1:0"
            config.daemon.tls = nil
            config.daemon.dnsListen = nil
            config.daemon.watch = []
            if !ports.isEmpty { config.daemon.proxy.connectPorts = ports }
            if allowPrivate { config.daemon.proxy.allowPrivateDestinations = true }
            if flagsGiven || file == nil { config.lookup = settings }
        }
        let daemon: Daemon
        do {
            if let file {
                daemon = try Daemon(configPath: file, metrics: exposition.factory, exposition: exposition.render, logger: logger, adjust: adjust)
            } else {
                var config = ConfigFile(lookup: settings)
                adjust(&config)
                daemon = try Daemon(
                    config: config, configPath: nil, metrics: exposition.factory, exposition: exposition.render, logger: logger)
            }
        } catch {
            throw ValidationError(error.message)
        }
        try await daemon.run()
        exitAfterStop()
    }
}

/// Ends the process once a server has stopped cleanly (cache saved, "stopped" logged), without the
/// C library's exit handlers: lookups still under way on other threads (a stalled upstream holds
/// them up to their time budget) may be inside OpenSSL, whose exit handler frees its locks under
/// them — a SIGSEGV at exit, seen under SIGTERM with 1,024 lookups waiting on a stalled upstream.
func exitAfterStop() -> Never {
    fflush(nil)
    _exit(Exit.ok)
}

/// The process's backends, bootstrapped once by `resolve daemon` and `resolve proxy` (the daemon only
/// uses what it is given): logs to stderr at `level`, Prometheus metrics, and the descriptor limit
/// raised to the hard limit, as servers do (each connection costs one, and the listeners'
/// `max_connections` should be what stops them, not EMFILE).
func bootstrapServer(level: Logger.Level, label: String) -> (PrometheusExposition, Logger) {
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
    let exposition = PrometheusExposition()
    MetricsSystem.bootstrap(exposition.factory)
    var limit = rlimit()
    if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
    var logger = Logger(label: label)
    logger.logLevel = level
    return (exposition, logger)
}
