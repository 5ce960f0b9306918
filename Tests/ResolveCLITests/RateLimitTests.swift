import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `rate_limit:` against real load: dnsperf floods the stub from one loopback network
    /// (127.0.2.0/24) while a second dnsperf from another (127.0.3.0/24) asks at a polite rate; the
    /// flooder is refused past its bucket, the polite client gets every answer. A UDP flood (whose
    /// source anyone can forge) never charges the network's TCP and DoH, which a TCP flood does.
    @Suite(.serialized) struct RateLimitTests {
        static let port = 18517
        static let dnsPort = 18518
        let daemon: DaemonProcess
        let directory: URL

        init() async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("rate-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try "www.hd.test A\n".write(to: directory.appendingPathComponent("names.txt"), atomically: true, encoding: .utf8)
            daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: Self.port,
                    extra: """
                        \(DaemonProcess.tlsConfig)
                        dns_listen: "127.0.0.1:\(Self.dnsPort)"
                        rate_limit: {queries_per_second: 20, burst: 20, ipv4_prefix: 24, slip: 0}
                        """), port: Self.port, https: true)
        }

        /// dnsperf from `source`: the count of each response code.
        func dnsperf(from source: String, qps: Int, seconds: Int, tcp: Bool = false) async throws -> [String: Int] {
            let output = try await CLI.run(
                [
                    "-s", "127.0.0.1", "-p", "\(Self.dnsPort)", "-a", source, "-m", tcp ? "tcp" : "udp", "-c", "1", "-q", "16", "-Q", "\(qps)",
                    "-l", "\(seconds)", "-t", "2", "-d", directory.appendingPathComponent("names.txt").path,
                ],
                executable: "/usr/bin/dnsperf")
            // "Response codes:       NOERROR 60 (3.00%), REFUSED 1940 (97.00%)"
            guard let line = output.stdout.split(separator: "\n").first(where: { $0.contains("Response codes:") }) else { return [:] }
            var counts: [String: Int] = [:]
            let parts = line.split(separator: ":", maxSplits: 1)[1].split(separator: ",")
            for part in parts {
                let words = part.split(separator: " ")
                if words.count >= 2, let count = Int(words[1]) { counts[String(words[0])] = count }
            }
            return counts
        }

        @Test func aFloodingNetworkIsLimitedWhileAnotherIsServedInFull() async throws {
            defer {
                daemon.stop()
                try? FileManager.default.removeItem(at: directory)
            }
            // Cache the name first, so every answer below is a cache hit.
            _ = try await dnsperf(from: "127.0.9.1", qps: 5, seconds: 1)
            async let flood = dnsperf(from: "127.0.2.1", qps: 1_000, seconds: 3)
            async let polite = dnsperf(from: "127.0.3.1", qps: 15, seconds: 3)
            let (flooded, served) = try await (flood, polite)
            // 20 at once, then 20 a second: about 80 of ~3,000 in 3 s.
            #expect((40...140).contains(flooded["NOERROR"] ?? 0), "\(flooded)")
            #expect((flooded["REFUSED"] ?? 0) > 1_000, "\(flooded)")
            #expect(served["REFUSED"] == nil, "\(served)")
            #expect((35...48).contains(served["NOERROR"] ?? 0), "\(served)")

            // DoH from the flooder's network right after its UDP flood: answered (F23 of redteam-4:
            // spoofed UDP must not deny a victim's DoH).
            func doh() async throws -> String {
                let run = try await CLI.run(
                    [
                        "@127.0.0.1", "-p", "\(Self.port)", "-b", "127.0.2.1", "+https=/dns-query", "+tls-ca=\(TestEnvironment.caFile)",
                        "+tls-hostname=localhost", "+timeout=5", "+retry=0", "www.hd.test", "A",
                    ], executable: "/usr/bin/kdig")
                return run.stdout + run.stderr
            }
            _ = try await dnsperf(from: "127.0.2.1", qps: 1_000, seconds: 1)
            let afterUDP = try await doh()
            #expect(afterUDP.contains("NOERROR") && afterUDP.contains("198.18.0.10"), "\(afterUDP)")

            // TCP from a neighbour of the flooder (same /24): limited past its bucket.
            let tcp = try await dnsperf(from: "127.0.2.77", qps: 500, seconds: 1, tcp: true)
            #expect((tcp["REFUSED"] ?? 0) > (tcp["NOERROR"] ?? 0), "\(tcp)")
            // DoH from the same network now shares the TCP bucket: a DNS REFUSED.
            let afterTCP = try await doh()
            #expect(afterTCP.contains("REFUSED"), "\(afterTCP)")
            let metrics = daemon.text(try await daemon.get("/metrics"))
            #expect(metrics.contains("httpdns_rate_limited_total{transport=\"udp\"}"), "\(metrics)")
        }
    }
}
