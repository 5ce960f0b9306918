import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// The daemon with `dnssec: require` over the signed tree (BIND upstream, the tree's anchor),
    /// asked by dig on the stub (the DoH path shares its responder): AD on secure answers for clients that ask,
    /// SERVFAIL with Extended DNS Error 6 for bogus ones, CD honoured (the data as the upstream has
    /// it, RRSIGs included, for a client that validates itself), `dnssec` in `/v1/resolve`.
    @Suite(.serialized) struct DaemonDNSSECTests {
        static let port = 18498
        static let dnsPort = 18499
        let daemon: DaemonProcess

        init() async throws {
            daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: Self.port, watch: ["forged.sig.test"], watchHTTPS: ["forged.hd.test"],
                    extra: """
                        dns_listen: "127.0.0.1:\(Self.dnsPort)"
                        dnssec: require
                        trust_anchors: \(TestEnvironment.sigTreeAnchors)
                        """), port: Self.port)
        }

        func dig(_ arguments: [String]) async throws -> CLI.Output {
            try await CLI.run(["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=5"] + arguments, executable: "/usr/bin/dig")
        }

        static func flags(_ output: CLI.Output) -> [Substring] {
            let line = output.stdout.split(separator: "\n").first { $0.hasPrefix(";; flags:") } ?? ""
            return line.dropFirst(";; flags:".count).split(separator: ";").first?.split(separator: " ") ?? []
        }

        @Test func secureAnswersCarryADBogusOnesServfailWithEDE6AndCDPassesThrough() async throws {
            defer { _ = daemon.stop() }
            let secure = try await dig(["+dnssec", "www.sig.test", "A"])
            #expect(secure.stdout.contains("status: NOERROR") && secure.stdout.contains("192.0.2.11"), "\(secure.stdout)")
            #expect(Self.flags(secure).contains("ad"), "\(secure.stdout)")
            // Without DO or AD in the query, no AD (RFC 6840 §5.7).
            let plain = try await dig(["+noedns", "+noadflag", "www.sig.test", "A"])
            #expect(!Self.flags(plain).contains("ad"), "\(plain.stdout)")
            // Insecure: the data, no AD.
            let insecure = try await dig(["+dnssec", "www.insecure.sig.test", "A"])
            #expect(insecure.stdout.contains("192.0.2.51") && !Self.flags(insecure).contains("ad"), "\(insecure.stdout)")
            // Bogus: SERVFAIL with EDE 6 and the reason.
            let bogus = try await dig(["+dnssec", "www.nokey.sig.test", "A"])
            #expect(bogus.stdout.contains("status: SERVFAIL"), "\(bogus.stdout)")
            #expect(bogus.stdout.contains("EDE: 6 (DNSSEC Bogus)"), "\(bogus.stdout)")
            #expect(bogus.stdout.contains("no DNSKEY of nokey.sig.test matches"), "\(bogus.stdout)")
            // A proven NXDOMAIN carries AD.
            let nx = try await dig(["+dnssec", "nx.sig.test", "A"])
            #expect(nx.stdout.contains("status: NXDOMAIN") && Self.flags(nx).contains("ad"), "\(nx.stdout)")
            // CD: the client validates; it gets the bogus zone's data with its signatures.
            let unchecked = try await dig(["+dnssec", "+cd", "www.nokey.sig.test", "A"])
            #expect(unchecked.stdout.contains("status: NOERROR") && unchecked.stdout.contains("192.0.2.61"), "\(unchecked.stdout)")
            #expect(unchecked.stdout.contains("RRSIG"), "\(unchecked.stdout)")
            // The JSON API.
            let json = daemon.text(try await daemon.get("/v1/resolve?host=www.sig.test&type=a"))
            #expect(json.contains("\"dnssec\":\"secure\""), "\(json)")
            let refused = daemon.text(try await daemon.get("/v1/resolve?host=www.nokey.sig.test&type=a"))
            #expect(refused.contains("dnssec_bogus"), "\(refused)")
            // The watcher: the system's forged answer for a signed name is hijacked on the DNSSEC proof.
            var status = ""
            for _ in 0..<50 {
                status = daemon.text(try await daemon.get("/v1/status"))
                if status.contains("\"verdict\":\"hijacked\"") { break }
                try await Task.sleep(for: .milliseconds(200))
            }
            #expect(status.contains("\"verdict\":\"hijacked\""), "\(status)")
            #expect(status.contains("\"trusted_dnssec\":\"secure\"") && status.contains("\"system_dnssec\":\"bogus\""), "\(status)")
            // A watch with `https_records: true`: the system's forged HTTPS hint is named, and the
            // host whose A answers agree is suspicious rather than consistent.
            let hosts = try #require(
                (try JSONSerialization.jsonObject(with: Data(status.utf8)) as? [String: Any])?["hosts"] as? [[String: Any]], "\(status)")
            let hinted = try #require(hosts.first { $0["host"] as? String == "forged.hd.test" }, "\(status)")
            #expect(hinted["verdict"] as? String == "suspicious", "\(hinted)")
            #expect(hinted["https_foreign_hints"] as? [String] == ["203.0.113.66"], "\(hinted)")
            #expect((hinted["reason"] as? String)?.contains("203.0.113.66") == true, "\(hinted)")
            let unhinted = try #require(hosts.first { $0["host"] as? String == "forged.sig.test" })
            #expect(unhinted["https_foreign_hints"] as? [String] == nil, "HTTPS records are compared only when asked")
        }
    }
}
