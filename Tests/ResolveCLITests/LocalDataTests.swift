import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `records:`, `hosts_files:` and `block:` in a running daemon, asked by dig over the stub and by
    /// `resolve lookup --config`: local names answered with AA and never sent upstream, blocked
    /// names NXDOMAIN with EDE 15, an allow entry beside the block, PTR for local addresses, a local
    /// alias into the test zone, and a SIGHUP that re-reads the lists.
    @Suite(.serialized) struct LocalDataTests {
        static let port = 18511
        static let dnsPort = 18512

        let directory: URL
        let daemon: DaemonProcess

        init() async throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("local-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            try "192.168.1.20 laptop.home.test laptop\nfd00::20 laptop.home.test\n".write(
                to: directory.appendingPathComponent("hosts"), atomically: true, encoding: .utf8)
            try "# test list\nads.test\n0.0.0.0 pixel.tracker.test\n||hd.test^\n".write(
                to: directory.appendingPathComponent("block.txt"), atomically: true, encoding: .utf8)
            daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: Self.port,
                    extra: """
                        \(DaemonProcess.tlsConfig)
                        dns_listen: "127.0.0.1:\(Self.dnsPort)"
                        query_log: {file: \(directory.appendingPathComponent("queries.jsonl").path), anonymize: {ipv4_prefix: 24}}
                        local_ttl: 120
                        records:
                          - "nas.home.test A 192.168.1.10"
                          - "nas.home.test 600 AAAA fd00::10"
                          - "home.test TXT \\"v=spf1 -all\\""
                          - "alias.home.test CNAME www.hd.test"
                        hosts_files: [\(directory.appendingPathComponent("hosts").path)]
                        block:
                          lists: [\(directory.appendingPathComponent("block.txt").path)]
                          allow: [www.hd.test]
                        """), port: Self.port, https: true)
        }

        func dig(_ arguments: [String]) async throws -> CLI.Output {
            try await CLI.run(["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=3"] + arguments, executable: "/usr/bin/dig")
        }

        func short(_ arguments: [String]) async throws -> [String] {
            try await dig(["+short"] + arguments).stdout.split(separator: "\n").map(String.init)
        }

        func metric(_ line: String) async throws -> Double? {
            let text = daemon.text(try await daemon.get("/metrics"))
            guard let found = text.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else { return nil }
            return Double(found.split(separator: " ").last ?? "")
        }

        @Test func localRecordsAndBlockListsOverTheStubAndTheCLI() async throws {
            defer {
                daemon.stop()
                try? FileManager.default.removeItem(at: directory)
            }
            #expect(try await daemon.waitForLog("local data loaded"), "\(daemon.logText)")

            // Records: AA set, the configured TTLs (local_ttl for the one without).
            let nas = try await dig(["nas.home.test", "A", "+noall", "+answer", "+comments"])
            #expect(nas.stdout.contains("flags: qr aa rd ra"), "\(nas.stdout)")
            #expect(nas.stdout.contains("nas.home.test.\t\t120\tIN\tA\t192.168.1.10"), "\(nas.stdout)")
            #expect(try await short(["nas.home.test", "AAAA"]) == ["fd00::10"])
            #expect(try await short(["home.test", "TXT"]) == ["\"v=spf1 -all\""])
            #expect(try await short(["laptop.home.test", "AAAA"]) == ["fd00::20"])
            #expect(try await short(["-x", "192.168.1.10"]) == ["nas.home.test."])
            #expect(Set(try await short(["-x", "192.168.1.20"])) == ["laptop.home.test.", "laptop."])
            // A local name without the type asked: NODATA from us, not a lookup.
            let mx = try await dig(["nas.home.test", "MX"])
            #expect(mx.stdout.contains("status: NOERROR") && mx.stdout.contains("ANSWER: 0"), "\(mx.stdout)")
            // A local alias into the test zone: the CNAME, then the upstream's address.
            #expect(try await short(["alias.home.test", "A"]) == ["www.hd.test.", "198.18.0.10"])

            // Blocked: NXDOMAIN with EDE 15 (Blocked) and AA; the allow entry and names beside the
            // list pass.
            let blocked = try await dig(["x.ads.test", "A"])
            #expect(blocked.stdout.contains("status: NXDOMAIN"), "\(blocked.stdout)")
            #expect(blocked.stdout.contains("EDE: 15 (Blocked)"), "\(blocked.stdout)")
            #expect(try await dig(["pixel.tracker.test", "AAAA"]).stdout.contains("status: NXDOMAIN"))
            #expect(try await dig(["origin.hd.test", "TXT"]).stdout.contains("status: NXDOMAIN"))
            #expect(try await short(["www.hd.test", "A"]) == ["198.18.0.10"])
            let beside = try await dig(["tracker.test", "A"])
            #expect(!beside.stdout.contains("EDE: 15"), "\(beside.stdout)")
            #expect(try await metric("httpdns_local_answers_total{kind=\"blocked\"}") ?? 0 >= 3)
            #expect(try await metric("httpdns_local_answers_total{kind=\"record\"}") ?? 0 >= 7)

            // The CLI with the same file: source local, and the block as an nxdomain error.
            let lookup = try await CLI.run(["lookup", "--config", daemon.configFile.path, "--json", "nas.home.test", "x.ads.test"])
            let lines = try lookup.jsonLines()
            #expect(lines.first?["source"] as? String == "local", "\(lookup.stdout)")
            #expect((lines.last?["error"] as? [String: Any])?["code"] as? String == "nxdomain", "\(lookup.stdout)")

            // SIGHUP re-reads the lists: www.hd.test blocked once the allow entry is gone.
            let config = try String(contentsOf: daemon.configFile, encoding: .utf8).replacingOccurrences(of: "  allow: [www.hd.test]\n", with: "")
            try config.write(to: daemon.configFile, atomically: true, encoding: .utf8)
            try "ads.test\nnew.test\n".write(to: directory.appendingPathComponent("block.txt"), atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try await daemon.waitForLog("configuration reloaded"), "\(daemon.logText)")
            #expect(try await dig(["www.new.test", "A"]).stdout.contains("EDE: 15 (Blocked)"))
            #expect(try await short(["www.hd.test", "A"]) == ["198.18.0.10"])

            // The query log: every transport, where each answer came from, written by the time the
            // daemon has stopped.
            #expect(try await dig(["+tcp", "nas.home.test", "A"]).status == 0)
            let doh = try await CLI.run(
                [
                    "@127.0.0.1", "-p", "\(Self.port)", "+https=/dns-query", "+tls-ca=\(TestEnvironment.caFile)", "+tls-hostname=localhost",
                    "+timeout=5", "+retry=0", "www.hd.test", "A",
                ], executable: "/usr/bin/kdig")
            #expect(doh.stdout.contains("198.18.0.10"), "\(doh.stdout)\(doh.stderr)")
            #expect(daemon.stop() == 0)
            let log = try String(contentsOf: directory.appendingPathComponent("queries.jsonl"), encoding: .utf8)
            let entries = try log.split(separator: "\n").map { try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
            func find(_ name: String, _ transport: String) -> [String: Any]? {
                entries.last { $0["name"] as? String == name && $0["transport"] as? String == transport }
            }
            #expect(find("nas.home.test", "udp")?["source"] as? String == "local", "\(log)")
            #expect(find("nas.home.test", "tcp")?["answers"] as? [String] == ["192.168.1.10"], "\(log)")
            let blockedEntry = find("x.ads.test", "udp")
            #expect(blockedEntry?["source"] as? String == "blocked", "\(log)")
            #expect(blockedEntry?["rcode"] as? String == "NXDOMAIN")
            #expect(blockedEntry?["ede"] as? Int == 15)
            #expect(blockedEntry?["client"] as? String == "127.0.0.0")
            let viaDoH = find("www.hd.test", "doh")
            #expect(["cache", "doh"].contains(viaDoH?["source"] as? String ?? ""), "\(log)")
            #expect(viaDoH?["answers"] as? [String] == ["198.18.0.10"])
            #expect((viaDoH?["latency_ms"] as? Double ?? -1) >= 0)
            #expect(entries.contains { $0["name"] as? String == "alias.home.test" && $0["source"] as? String == "local+doh" }, "\(log)")
        }
    }
}
