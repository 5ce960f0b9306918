import ArgumentParser
import Foundation
import HealthCheck
import HTTPDNS
import Logging

struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Serve the trusted, health-checked view: HTTP API, RFC 8484 DoH endpoint, Prometheus metrics.",
        discussion: """
            Endpoints: GET /healthz, GET /readyz, GET /metrics, GET /v1/resolve?host=H&type=a|aaaa|both, \
            GET|POST /dns-query (RFC 8484), GET /v1/status. SIGHUP reloads the config file (an invalid \
            file is logged and the old configuration keeps serving); SIGTERM/SIGINT drain and exit 0.
            Exit status: 0 after a clean shutdown, 2 usage or configuration error, 1 anything else.
            """)

    @Option(name: .customLong("config"), help: ArgumentHelp("The YAML config file (required).", valueName: "FILE"))
    var config: String

    @Option(name: .customLong("log-level"), help: ArgumentHelp("trace, debug, info, notice, warning, error or critical (default info).", valueName: "LEVEL"))
    var logLevel: String = "info"

    func run() async throws {
        guard let level = Logger.Level(rawValue: logLevel.lowercased()) else {
            throw ValidationError("--log-level must be one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")), not '\(logLevel)'")
        }
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        do {
            try await Daemon.run(configPath: config, logLevel: level)
        } catch let error as DNSError where error.code == .invalidConfiguration {
            throw ValidationError(error.message)
        }
    }
}
