import ArgumentParser
import DNSCore
import Foundation
import HTTPDNS
import Logging
import Metrics
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
        // The process's backends are bootstrapped here, once; the daemon only uses what it is given.
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let exposition = PrometheusExposition()
        MetricsSystem.bootstrap(exposition.factory)
        raiseDescriptorLimit()
        var logger = Logger(label: "resolve.daemon")
        logger.logLevel = level
        let daemon: Daemon
        do {
            daemon = try Daemon(configPath: config, metrics: exposition.factory, exposition: exposition.render, logger: logger)
        } catch {
            throw ValidationError(error.message)
        }
        try await daemon.run()
    }

    /// Raises the soft limit on open descriptors to the hard limit, as servers do: each connection
    /// costs one, and the listeners' `max_connections` should be what stops them, not EMFILE.
    private func raiseDescriptorLimit() {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}
