import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// Split DNS with dnsmasq as the "corporate" resolver: the daemon forwards corp.test and
    /// 10.in-addr.arpa to it and everything else to the trusted DoH upstream. dnsmasq's query log
    /// shows what reached it; the daemon's per-upstream exchange count shows what reached the
    /// trusted side.
    @Suite(.serialized) struct SplitDNSTests {
        static let port = 18514
        static let dnsPort = 18515
        let corpPort = unusedLoopbackPort()

        let directory: URL
        let daemon: DaemonProcess

        init() async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("split-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            // Daemonized, as the test environment runs its own: a dnsmasq kept as a child of this
            // process left the next client's output pipe waiting (seen as a hang in dig's CLI.run).
            let dnsmasq = FileManager.default.fileExists(atPath: "/usr/sbin/dnsmasq") ? "/usr/sbin/dnsmasq" : "/usr/bin/dnsmasq"
            let arguments = [
                "--port=\(corpPort)", "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts", "--no-poll",
                "--user=root", "--pid-file=\(directory.appendingPathComponent("corp.pid").path)", "--log-queries",
                "--log-facility=\(directory.appendingPathComponent("corp.log").path)",
                "--address=/corp.test/10.20.30.40", "--txt-record=info.corp.test,internal",
                "--ptr-record=40.30.20.10.in-addr.arpa,intranet.corp.test",
                // Anything else it is asked is an answer the test would see: a leak.
                "--address=/#/127.0.0.99",
            ]
            let started = try await CLI.run(["-c", "exec \"$0\" \"$@\" </dev/null >/dev/null 2>&1", dnsmasq] + arguments, executable: "/bin/sh")
            #expect(started.status == 0, "\(started.stderr)")
            daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: Self.port,
                    extra: """
                        dns_listen: "127.0.0.1:\(Self.dnsPort)"
                        forward:
                          - zones: [corp.test, 10.in-addr.arpa]
                            upstreams: [{dns: "127.0.0.1:\(corpPort)"}]
                        """), port: Self.port)
        }

        var corpLog: String { (try? String(contentsOf: directory.appendingPathComponent("corp.log"), encoding: .utf8)) ?? "" }

        func short(_ arguments: [String]) async throws -> [String] {
            let output = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=3", "+short"] + arguments, executable: "/usr/bin/dig")
            return output.stdout.split(separator: "\n").map(String.init)
        }

        /// How many exchanges the daemon had with the trusted upstream.
        func trustedExchanges() async throws -> Double {
            let text = daemon.text(try await daemon.get("/metrics"))
            let prefix = "httpdns_upstream_duration_seconds_count{upstream=\"\(TestEnvironment.dohA)\"}"
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(prefix) }) else { return 0 }
            return Double(line.split(separator: " ").last ?? "") ?? -1
        }

        @Test func corporateNamesGoToTheCorporateResolverOnly() async throws {
            defer {
                daemon.stop()
                if let pid = try? String(contentsOf: directory.appendingPathComponent("corp.pid"), encoding: .utf8),
                    let number = Int32(pid.trimmingCharacters(in: .whitespacesAndNewlines))
                {
                    kill(number, SIGKILL)
                }
                try? FileManager.default.removeItem(at: directory)
            }
            for _ in 0..<50 where !corpLog.contains("started") { try await Task.sleep(for: .milliseconds(100)) }
            // A public name first: the trusted side works, and dnsmasq never sees it.
            #expect(try await short(["www.hd.test", "A"]) == ["198.18.0.10"])
            let before = try await trustedExchanges()
            #expect(before >= 1)

            // The internal names, over the stub: addresses (private, kept), TXT and PTR forwarded.
            #expect(try await short(["intranet.corp.test", "A"]) == ["10.20.30.40"])
            #expect(try await short(["deep.dev.corp.test", "A"]) == ["10.20.30.40"])
            #expect(try await short(["info.corp.test", "TXT"]) == ["\"internal\""])
            #expect(try await short(["-x", "10.30.20.40"]) == [])  // not in its data: dnsmasq's own NXDOMAIN
            #expect(try await short(["-x", "10.20.30.40"]) == ["intranet.corp.test."])
            // …and through the CLI with the same file.
            let lookup = try await CLI.run(["lookup", "--config", daemon.configFile.path, "--json", "--type", "a", "intranet.corp.test"])
            #expect(
                (try lookup.jsonLines().first?["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "10.20.30.40",
                "\(lookup.stdout)\(lookup.stderr)")

            // None of it reached the trusted upstream.
            #expect(try await trustedExchanges() == before)
            // And dnsmasq saw only its own zones, never a public name.
            let log = corpLog
            #expect(log.contains("query[A] intranet.corp.test"), "\(log)")
            #expect(log.contains("query[TXT] info.corp.test"), "\(log)")
            #expect(log.contains("query[PTR] 40.30.20.10.in-addr.arpa"), "\(log)")
            #expect(!log.contains("hd.test"), "\(log)")

            // A public name after: still the trusted side, still not dnsmasq.
            #expect(try await short(["alias.hd.test", "A"]) == ["www.hd.test.", "198.18.0.10"])
            #expect(!corpLog.contains("hd.test"))
        }
    }
}
