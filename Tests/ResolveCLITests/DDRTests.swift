import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// DDR (RFC 9462) end to end, with dnspython 2.7's DDR client (`Resolver.try_ddr`) as the peer
    /// of both sides: the daemon's `_dns.resolver.arpa` answers (kdig reads them, dnspython and
    /// `resolve lookup --ddr` verify them and then ask over the designated DoT/DoH listeners), a
    /// daemon whose certificate does not name its address (neither client upgrades), and an
    /// on-path forger's designations (Tests/Fakes/ddr_forger.py): every class is refused by both
    /// clients alike and no name is looked up through any of them.
    @Suite(.serialized) struct DDRTests {
        static let port = 18561
        static let dotPort = 18562
        static let dnsPort = 18563
        static let ca = "\(TestEnvironment.root)/.testenv/ca"
        static let forger = "127.0.0.62"
        static let forgerPort = 18564

        static func daemon(certificate: String = "daemon.test", extra: String = "") async throws -> DaemonProcess {
            try await DaemonProcess(
                config: """
                    upstreams:
                      - {doh: "\(TestEnvironment.dohA)", bootstrap: [127.0.0.1]}
                    ca_file: \(TestEnvironment.caFile)
                    allow_private: true
                    system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
                    listen: "127.0.0.1:\(Self.port)"
                    tls: {cert: \(Self.ca)/\(certificate).pem, key: \(Self.ca)/\(certificate).key}
                    dot_listen: "127.0.0.1:\(Self.dotPort)"
                    dns_listen: "127.0.0.1:\(Self.dnsPort)"
                    \(extra)
                    """, port: Self.port, https: true, waitForHealth: false)
        }

        /// dnspython's `try_ddr` against IP:PORT: the nameservers it kept, and the DoT ones' answers.
        static func dnspython(_ ip: String, _ port: Int, ask name: String = "www.hd.test") async throws -> [[String: Any]] {
            let output = try await CLI.run(
                [
                    "PYTHONPATH=\(TestEnvironment.root)/.build/pydeps", "SSL_CERT_FILE=\(TestEnvironment.caFile)", "/usr/bin/python3",
                    "\(TestEnvironment.root)/Tests/Fakes/ddr_client.py", ip, "\(port)", name,
                ], executable: "/usr/bin/env")
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
            let result = try #require(
                object, "ddr_client.py: \(output.stdout)\(output.stderr) (Scripts/lib.sh need_python_peers installs dnspython 2.7)")
            #expect(result["version"] as? String == "2.7.0")
            return try #require(result["nameservers"] as? [[String: Any]])
        }

        /// `resolve lookup --ddr IP:PORT --json HOST…`: the discovery object, then one line per host.
        static func discover(
            _ server: String, _ hosts: [String] = []
        ) async throws -> (status: Int32, discovery: [String: Any], rest: [[String: Any]]) {
            let output = try await CLI.run(["lookup", "--ddr", server, "--ca-file", TestEnvironment.caFile, "--allow-private", "--json"] + hosts)
            let lines = try output.jsonLines()
            let discovery = try #require(lines.first, "\(output.stdout)\(output.stderr)")
            return (output.status, discovery, Array(lines.dropFirst()))
        }

        static func designations(_ discovery: [String: Any]) -> [[String: Any]] { discovery["designations"] as? [[String: Any]] ?? [] }

        @Test func theDaemonsDesignationsAreVerifiedByDnspythonAndByResolve() async throws {
            try TestEnvironment.requireRunning()
            let daemon = try await Self.daemon()
            defer { daemon.stop() }
            try await waitForDNS(port: Self.dnsPort)

            // What the daemon answers, read by kdig: authoritative, two SVCB records.
            let svcb = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+timeout=5", "+retry=0", "_dns.resolver.arpa", "SVCB"], executable: "/usr/bin/kdig")
            #expect(svcb.stdout.contains("status: NOERROR") && svcb.stdout.contains(" aa "), "\(svcb.stdout)")
            #expect(svcb.stdout.contains("1 daemon.test. alpn=h2,http/1.1 port=\(Self.port) ipv4hint=127.0.0.1"), "\(svcb.stdout)")
            #expect(svcb.stdout.contains("2 daemon.test. alpn=dot port=\(Self.dotPort) ipv4hint=127.0.0.1"), "\(svcb.stdout)")
            // Below it: NXDOMAIN from the daemon itself (AA, its SOA), never asked upstream.
            let below = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+timeout=5", "+retry=0", "x.resolver.arpa", "A"], executable: "/usr/bin/kdig")
            #expect(below.stdout.contains("status: NXDOMAIN") && below.stdout.contains(" aa "), "\(below.stdout)")
            #expect(below.stdout.contains("resolver.arpa.") && below.stdout.contains("SOA"), "\(below.stdout)")

            // The peer: dnspython verifies both and asks over DoT.
            let kept = try await Self.dnspython("127.0.0.1", Self.dnsPort)
            #expect(kept.map { $0["kind"] as? String } == ["DoH", "DoT"], "\(kept)")
            #expect(kept.first?["url"] as? String == "https://daemon.test:\(Self.port)/dns-query")
            #expect(kept.last?["port"] as? Int == Self.dotPort && kept.last?["hostname"] as? String == "daemon.test")
            #expect(kept.last?["answer"] as? [String] == ["198.18.0.10"], "\(kept)")

            // resolve: the same verdicts, then the name through the first verified designation.
            let (status, discovery, rest) = try await Self.discover("127.0.0.1:\(Self.dnsPort)", ["www.hd.test"])
            #expect(status == 0, "\(discovery) \(rest)")
            let found = Self.designations(discovery)
            #expect(found.map { $0["transport"] as? String } == ["doh", "dot"], "\(discovery)")
            #expect(found.allSatisfy { $0["verified"] as? Bool == true && $0["error"] == nil }, "\(discovery)")
            #expect(found.map { $0["port"] as? Int } == [Self.port, Self.dotPort])
            #expect(rest.count == 1 && (rest.first?["addresses"] as? [[String: Any]])?.isEmpty == false, "\(rest)")
            #expect((rest.first?["upstream"] as? String)?.hasPrefix("https://daemon.test:\(Self.port)/dns-query") == true, "\(rest)")
        }

        @Test func aCertificateThatDoesNotNameTheAddressUpgradesNoClient() async throws {
            try TestEnvironment.requireRunning()
            // json.test's certificate (the test CA's) names json.test only.
            let daemon = try await Self.daemon(certificate: "json.test")
            defer { daemon.stop() }
            try await waitForDNS(port: Self.dnsPort)
            let (status, discovery, rest) = try await Self.discover("127.0.0.1:\(Self.dnsPort)", ["www.hd.test"])
            #expect(status == 1 && rest.isEmpty, "nothing is looked up through an unverified designation: \(rest)")
            let found = Self.designations(discovery)
            #expect(found.count == 2 && found.allSatisfy { $0["target"] as? String == "json.test" && $0["verified"] as? Bool == false })
            #expect(found.allSatisfy { ($0["error"] as? String)?.contains("does not name 127.0.0.1") == true }, "\(found)")
            let kept = try await Self.dnspython("127.0.0.1", Self.dnsPort)
            #expect(kept.map { $0["kind"] as? String } == ["Do53"], "dnspython keeps the plain resolver too: \(kept)")
        }

        @Test func ddrOffAnswersNoDataAndForwardsNothing() async throws {
            try TestEnvironment.requireRunning()
            let daemon = try await Self.daemon(extra: "ddr: off")
            defer { daemon.stop() }
            try await waitForDNS(port: Self.dnsPort)
            let svcb = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+timeout=5", "+retry=0", "_dns.resolver.arpa", "SVCB"], executable: "/usr/bin/kdig")
            #expect(svcb.stdout.contains("status: NOERROR") && svcb.stdout.contains(" aa ") && svcb.stdout.contains("ANSWER: 0"), "\(svcb.stdout)")
            let (status, discovery, _) = try await Self.discover("127.0.0.1:\(Self.dnsPort)")
            #expect(status == 1 && Self.designations(discovery).isEmpty, "\(discovery)")
        }

        /// An on-path forger answers the plain DDR question, and serves DoT at the address that
        /// was asked, with what an attacker can hold: a trusted certificate for a name of its own
        /// (json.test, which names no address), and one from another CA (doh-untrusted.test). Its
        /// designations: its own name (the certificate is valid for it but does not name the
        /// resolver); the victim's resolver name doh-a.test (no certificate for it); the other CA's;
        /// a hint sending the client to an address of the forger's choosing (a trap listener); an
        /// HTTP designation without dohpath (a downgrade to nothing). Neither client verifies any,
        /// nothing is looked up, and the hint's address is never dialled.
        @Test func aForgersDesignationsAreNeverUsed() async throws {
            try TestEnvironment.requireRunning()
            let own = 18565, untrusted = 18567, trap = "127.0.0.63:18566"
            var pids: [Int32] = []
            var logs: [String] = []
            defer {
                for pid in pids { kill(pid, SIGKILL) }
                for log in logs { try? FileManager.default.removeItem(atPath: log) }
            }
            /// Starts a server; waits until `ready` is in `readyLog` (default: its output).
            func start(_ arguments: [String], until ready: String, in readyLog: String? = nil) async throws -> String {
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("ddr-forger-\(UUID().uuidString).log").path
                logs.append(log)
                pids.append(try #require(try await CLI.startDetached(arguments, log: log)))
                for _ in 0..<50 where !((try? String(contentsOfFile: readyLog ?? log, encoding: .utf8)) ?? "").contains(ready) {
                    try await Task.sleep(for: .milliseconds(100))
                }
                return log
            }
            for (port, certificate) in [(own, "json.test"), (untrusted, "doh-untrusted.test")] {
                let log = FileManager.default.temporaryDirectory.appendingPathComponent("ddr-dot-\(port)-\(UUID().uuidString).log").path
                logs.append(log)
                _ = try await start(
                    [
                        "/usr/bin/python3", "\(TestEnvironment.root)/Tests/Fakes/dot_server.py", "\(Self.forger):\(port)",
                        "\(Self.ca)/\(certificate).pem", "\(Self.ca)/\(certificate).key", "ok", log,
                    ], until: "listening", in: log)
            }
            let records = [
                "1 json.test. alpn=dot port=\(own)",
                "2 doh-a.test. alpn=dot port=\(own)",
                "3 doh-untrusted.test. alpn=dot port=\(untrusted)",
                "4 json.test. alpn=dot port=18566 ipv4hint=127.0.0.63",
                "5 doh-a.test. alpn=h2 port=\(own) ipv4hint=127.0.0.1",
            ]
            let forgerLog = try await start(
                [
                    "/usr/bin/env", "TRAP=\(trap)", "/usr/bin/python3", "\(TestEnvironment.root)/Tests/Fakes/ddr_forger.py", Self.forger,
                    "\(Self.forgerPort)",
                ]
                    + records, until: "ready")
            let (status, discovery, rest) = try await Self.discover("\(Self.forger):\(Self.forgerPort)", ["www.hd.test"])
            #expect(status == 1 && rest.isEmpty, "\(rest)")
            let found = Self.designations(discovery)
            #expect(found.count == 4, "\(discovery)")
            #expect(found.allSatisfy { $0["verified"] as? Bool == false && $0["addresses"] as? [String] == [Self.forger] }, "\(found)")
            let errors = found.map { $0["error"] as? String ?? "" }
            #expect(errors[0].contains("does not name \(Self.forger)"), "its own name: valid, but not for the address: \(errors)")
            #expect(errors[1].contains("doh-a.test") && !errors[1].contains("does not name"), "no certificate for the victim's name: \(errors)")
            #expect(errors[2].contains("doh-untrusted.test"), "another CA: \(errors)")
            #expect((discovery["skipped"] as? [[String: Any]])?.count == 1, "\(discovery)")
            let kept = try await Self.dnspython(Self.forger, Self.forgerPort)
            #expect(kept.map { $0["kind"] as? String } == ["Do53"], "\(kept)")
            let trapped = (try? String(contentsOfFile: forgerLog, encoding: .utf8)) ?? ""
            #expect(!trapped.contains("trap connection"), "the forged hint's address was dialled")
        }

        /// A forged answer of twenty designations, each at a port that accepts and never speaks:
        /// checked eight at a time within one `--timeout`, the rest reported, not dialled (F62-1:
        /// one at a time with no cap, a 65 KiB answer held the client for hours).
        @Test func aForgersManyStallingDesignationsCostOneTimeout() async throws {
            try TestEnvironment.requireRunning()
            let forger = "127.0.0.64", port = 18568, silent = 18569
            let records = (1...20).map { "\($0) json.test. alpn=dot port=\(silent)" }
            let log = FileManager.default.temporaryDirectory.appendingPathComponent("ddr-many-\(UUID().uuidString).log").path
            let pid = try #require(
                try await CLI.startDetached(
                    [
                        "/usr/bin/env", "SILENT=\(forger):\(silent)", "/usr/bin/python3", "\(TestEnvironment.root)/Tests/Fakes/ddr_forger.py", forger,
                        "\(port)",
                    ]
                        + records, log: log))
            defer {
                kill(pid, SIGKILL)
                try? FileManager.default.removeItem(atPath: log)
            }
            for _ in 0..<50 where !((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("ready") {
                try await Task.sleep(for: .milliseconds(100))
            }
            let started = ContinuousClock.now
            let output = try await CLI.run(
                ["lookup", "--ddr", "\(forger):\(port)", "--ca-file", TestEnvironment.caFile, "--timeout", "2", "--json", "www.hd.test"])
            let elapsed = ContinuousClock.now - started
            #expect(output.status == 1 && output.lines.count == 1, "\(output.stdout)\(output.stderr)")
            #expect(elapsed < .seconds(5), "\(elapsed)")
            let discovery = try #require(try output.jsonLines().first)
            let found = Self.designations(discovery)
            #expect(found.count == 8 && found.allSatisfy { $0["verified"] as? Bool == false }, "\(found)")
            let skipped = discovery["skipped"] as? [[String: Any]] ?? []
            #expect(skipped.filter { ($0["reason"] as? String)?.hasPrefix("not checked") == true }.count == 12, "\(skipped)")
        }

        /// Waits until the daemon's stub answers (it is up before its upstream is ready).
        func waitForDNS(port: Int) async throws {
            for _ in 0..<50 {
                let probe = try await CLI.run(
                    ["@127.0.0.1", "-p", "\(port)", "+timeout=1", "+retry=0", "resolver.arpa", "SOA"], executable: "/usr/bin/kdig")
                if probe.stdout.contains("status: ") { return }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }
}
