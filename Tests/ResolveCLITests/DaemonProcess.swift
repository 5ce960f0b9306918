import CurlSupport
import DNSCore
import Foundation
import TestSupport
import Testing

/// The daemon suites run one after another: one daemon process at a time, so the suite's startup
/// burst on 2 cores stays smaller.
@Suite(.serialized) enum DaemonSuites {}

/// `resolve daemon` as a real process with a config written for the test, queried by libcurl at
/// 127.0.0.1 (over HTTPS with the test CA when the config has `tls:`).
final class DaemonProcess: @unchecked Sendable {
    // Safety: every property is set once in init; Process is only read or signalled afterwards.
    let port: Int
    let scheme: String
    let directory: URL
    let configFile: URL
    let log: URL
    let process: Process

    /// The config every daemon test starts from: the loopback DoH server, dnsmasq as the system
    /// side, the listener on `port`; `extra` is appended as it is (more top-level keys).
    static func config(
        port: Int, watch: [String] = [], watchHTTPS: [String] = [], upstreams: [String] = [TestEnvironment.dohA], extra: String = ""
    ) -> String {
        let entries =
            watch.map { "{host: \($0), port: \(TestEnvironment.originPort), interval: 1}" }
            + watchHTTPS.map { "{host: \($0), port: \(TestEnvironment.originPort), interval: 1, https_records: true}" }
        return """
            upstreams:
            \(upstreams.map { "  - {doh: \"\($0)\", bootstrap: [127.0.0.1]}" }.joined(separator: "\n"))
            ca_file: \(TestEnvironment.caFile)
            allow_private: true
            system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
            listen: "127.0.0.1:\(port)"
            watch: [\(entries.joined(separator: ", "))]
            \(extra)
            """
    }

    /// The daemon's TLS files in the test environment (`daemon.test`, SANs localhost and 127.0.0.1).
    static let tlsConfig =
        "tls: {cert: \(TestEnvironment.root)/.testenv/ca/daemon.test.pem, key: \(TestEnvironment.root)/.testenv/ca/daemon.test.key}"

    /// Starts the daemon with `config`; `environment` is added to the test process's own.
    init(config: String, port: Int, https: Bool = false, environment: [String: String] = [:], waitForHealth: Bool = true) async throws {
        try TestEnvironment.requireRunning()
        self.port = port
        scheme = https ? "https" : "http"
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("daemon-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        configFile = directory.appendingPathComponent("config.yaml")
        log = directory.appendingPathComponent("daemon.log")
        try config.write(to: configFile, atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        process = Process()
        process.executableURL = URL(fileURLWithPath: CLI.binary)
        process.arguments = ["daemon", "--config", configFile.path]
        process.standardError = try FileHandle(forWritingTo: log)
        process.standardOutput = FileHandle.nullDevice
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        try process.run()
        guard waitForHealth else { return }
        // Up within 10 s.
        for _ in 0..<100 {
            if (try? await get("/healthz"))?.status == 200 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("the daemon did not come up: \(logText)")
    }

    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    var baseURL: String { "\(scheme)://127.0.0.1:\(port)" }

    /// SIGTERM, then up to 5 s for a clean exit (SIGKILL after that): the exit status, or nil
    /// when it had to be killed. Synchronous so that `defer` can run it when a test fails midway
    /// (the next test binds the same port).
    @discardableResult
    func stop() -> Int32? {
        if process.isRunning { process.terminate() }
        for _ in 0..<50 where process.isRunning { usleep(100_000) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            return nil
        }
        try? FileManager.default.removeItem(at: directory)
        return process.terminationStatus
    }

    func request(_ path: String, method: String = "GET", headers: [String] = [], body: [UInt8]? = nil) async throws -> CurlResponse {
        try await CurlEngine.shared.perform(
            CurlRequest(
                url: baseURL + path, method: method, headers: headers, body: body,
                timeout: .seconds(10), trust: TLSTrust(caFile: TestEnvironment.caFile),
                maxResponseBytes: 1 << 20, protocols: scheme))
    }

    func get(_ path: String, headers: [String] = []) async throws -> CurlResponse {
        try await request(path, headers: headers)
    }

    func post(_ path: String, _ body: [UInt8], type: String = "application/dns-message", headers: [String] = []) async throws -> CurlResponse {
        try await request(path, method: "POST", headers: ["Content-Type: \(type)"] + headers, body: body)
    }

    func text(_ response: CurlResponse) -> String { String(decoding: response.body, as: UTF8.self) }

    /// Waits up to 5 s for `line` in the log.
    func waitForLog(_ line: String) async throws -> Bool {
        for _ in 0..<50 {
            if logText.contains(line) { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return false
    }
}
