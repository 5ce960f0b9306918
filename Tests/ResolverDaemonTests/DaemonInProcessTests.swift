import CurlSupport
import DNSCore
import Foundation
import Logging
import MetricsTestKit
import TestSupport
import Testing

@testable import ResolverDaemon

/// The whole daemon run inside the test process: no process-wide logging or metrics bootstrap, its
/// metrics in the test's own factory, stopped by `shutdown()` instead of a signal.
@Suite struct DaemonInProcessTests {
    @Test func runsServesAndStopsInProcess() async throws {
        try TestEnvironment.requireRunning()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("daemon-inprocess-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
        let config = directory.appendingPathComponent("daemon.yaml")
        try """
        upstreams: [{doh: "\(TestEnvironment.dohA)", bootstrap: [127.0.0.1]}]
        ca_file: \(TestEnvironment.caFile)
        allow_private: true
        system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
        listen: "127.0.0.1:\(port)"
        dns_listen: "127.0.0.1:\(dnsPort)"
        cache: {persist: cache.bin}
        """.write(to: config, atomically: true, encoding: .utf8)
        let metrics = TestMetrics()
        let daemon = try Daemon(
            configPath: config.path, metrics: metrics, exposition: { Array("# test\n".utf8) },
            logger: Logger(label: "test"), signals: [])
        let running = Task { try await daemon.run() }
        await daemon.waitUntilListening()
        #expect(daemon.httpAddress?.port == port)

        let base = "http://127.0.0.1:\(port)"
        let health = try await CurlEngine.shared.perform(
            CurlRequest(url: base + "/healthz", timeout: .seconds(5), trust: TLSTrust(), protocols: "http"))
        #expect(health.status == 200)
        let resolve = try await CurlEngine.shared.perform(
            CurlRequest(
                url: base + "/v1/resolve?host=www.hd.test&type=a", timeout: .seconds(5),
                trust: TLSTrust(), protocols: "http"))
        #expect(String(decoding: resolve.body, as: UTF8.self).contains("198.18.0.10"))
        let counter = try metrics.expectCounter(
            "hb.requests",
            [
                ("http.route", "/v1/resolve"), ("http.request.method", "GET"),
                ("http.response.status_code", "200"),
            ])
        #expect(counter.totalValue == 1)

        await daemon.shutdown()
        try await running.value
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("cache.bin").path), "the cache is written on the way out")
    }
}
