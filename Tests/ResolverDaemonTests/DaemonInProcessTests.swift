import CurlSupport
import DNSCore
import Foundation
import Logging
import MetricsTestKit
import NIOCore
import NIOPosix
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

/// The systemd watchdog: pings only while every event loop turns.
@Suite struct WatchdogTests {
    @Test func aLoopThatDoesNotTurnStopsThePings() async throws {
        let listener = try NotifySocketListener()
        let notifier = try #require(SystemdNotifier(socketPath: listener.path))
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let pinger = WatchdogPinger(notifier: notifier, interval: .milliseconds(100), logger: Logger(label: "test"), group: group)
        let running = Task { try await pinger.run() }
        defer { running.cancel() }
        // The first ping (the pool may be busy with other suites), then one per interval.
        #expect(await listener.messages(for: 10) { $0 == "WATCHDOG=1" }.last == "WATCHDOG=1")
        let turning = await listener.messages(for: 0.55).filter { $0 == "WATCHDOG=1" }.count
        #expect((2...7).contains(turning), "\(turning) pings in 0.55 s at 100 ms")
        // One loop stuck in a handler for 1.5 s: after at most one interval's grace, no pings.
        let loops = Array(group.makeIterator())
        loops[1].execute { usleep(1_500_000) }
        _ = await listener.messages(for: 0.3)
        let stuck = await listener.messages(for: 0.9).filter { $0 == "WATCHDOG=1" }.count
        #expect(stuck == 0, "\(stuck) pings while a loop was stuck")
        // It turns again: the pings come back.
        #expect(await listener.messages(for: 10) { $0 == "WATCHDOG=1" }.last == "WATCHDOG=1", "no ping after the loop turned again")
        running.cancel()
        try await group.shutdownGracefully()
    }

    @Test func theNotifierNamesPathsAndAbstractSockets() async throws {
        #expect(SystemdNotifier(environment: [:]) == nil)
        #expect(SystemdNotifier(environment: ["NOTIFY_SOCKET": ""]) == nil)
        #expect(SystemdNotifier(socketPath: String(repeating: "x", count: 200)) == nil)
        let abstract = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": "@/org/test/notify", "WATCHDOG_USEC": "30000000"]))
        #expect(abstract.watchdogInterval == .seconds(15))
        // WATCHDOG_PID names another process: no watchdog for this one.
        let other = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"]))
        #expect(other.watchdogInterval == nil)
        // A value with a newline cannot start a second assignment.
        let listener = try NotifySocketListener()
        let notifier = try #require(SystemdNotifier(socketPath: listener.path))
        notifier.status("two\nREADY=1")
        #expect(await listener.messages(for: 1) { _ in true } == ["STATUS=two READY=1"])
    }

    /// The socket address is copied into `sun_path` (108 bytes): a path of 107 bytes (its NUL the
    /// last byte) and an abstract name of 108 (no NUL) are the longest that fit, and reach a
    /// listener bound to exactly that name; one byte more is no notifier.
    @Test func socketNamesAtTheBoundOfSunPath() async throws {
        let capacity = MemoryLayout.size(ofValue: sockaddr_un().sun_path)
        #expect(capacity == 108)
        let path = "/tmp/notify-" + UUID().uuidString.prefix(8) + String(repeating: "n", count: capacity - 1 - 20)
        #expect(path.utf8.count == capacity - 1)
        let onPath = try NotifySocketListener(path: path)
        let atPath = try #require(SystemdNotifier(socketPath: path))
        atPath.status("path")
        #expect(await onPath.messages(for: 1) { _ in true } == ["STATUS=path"])
        #expect(SystemdNotifier(socketPath: path + "n") == nil)

        let abstractName = "@" + String(repeating: "a", count: capacity - 9) + UUID().uuidString.prefix(8)
        #expect(abstractName.utf8.count == capacity)
        let onName = try NotifySocketListener(path: abstractName)
        let atName = try #require(SystemdNotifier(socketPath: abstractName))
        atName.status("abstract")
        #expect(await onName.messages(for: 1) { _ in true } == ["STATUS=abstract"])
        #expect(SystemdNotifier(socketPath: abstractName + "a") == nil)
    }
}
