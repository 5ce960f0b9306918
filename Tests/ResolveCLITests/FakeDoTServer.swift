import Foundation
import TestSupport
import Testing

/// Tests/Fakes/dot_server.py: a DNS-over-TLS server (certificate doh-a.test from the test CA) that
/// misbehaves as its mode says and logs what it was asked.
enum FakeDoTServer {
    /// Starts the server in `mode` on an unused loopback port and waits until it listens; its port,
    /// PID and log (one line per connection and per query).
    static func start(_ mode: String) async throws -> (port: Int, pid: Int32, log: URL) {
        let port = unusedLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("dot-\(mode)-\(UUID().uuidString).log")
        let ca = "\(TestEnvironment.root)/.testenv/ca"
        let pid = try #require(
            try await CLI.startDetached(
                [
                    "/usr/bin/python3", "\(TestEnvironment.root)/Tests/Fakes/dot_server.py", "\(port)", "\(ca)/doh-a.test.pem",
                    "\(ca)/doh-a.test.key", mode, log.path,
                ], log: log.path + ".out"))
        for _ in 0..<50 {
            if ((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains("listening") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return (port, pid, log)
    }
}
