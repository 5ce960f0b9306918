import DNSCore
import Foundation
import TestSupport
import Testing

/// `resolve compare` end to end: the contract's JSON lines, the human form, the exit codes.
struct ResolveCompareTests {
    static let base =
        ["compare"] + CLI.dohA + [
            "--allow-private", "--system-dns", "127.0.0.1:\(TestEnvironment.systemDNSPort)",
            "--probe-port", "\(TestEnvironment.originPort)",
        ]

    @Test func jsonLinesFollowTheContractAndExitThreeWhenHijacked() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(Self.base + ["--json", "origin.hd.test", "bank.hd.test", "shop.hd.test"])
        #expect(output.status == 3, "\(output.stderr)")
        let lines = try output.jsonLines()
        #expect(lines.map { $0["host"] as? String } == ["origin.hd.test", "bank.hd.test", "shop.hd.test"])
        #expect(lines.map { $0["verdict"] as? String } == ["consistent", "hijacked", "hijacked"])
        // Keys in the contract's order, extensions after.
        let first = output.lines[1]
        let keys = ["\"host\"", "\"verdict\"", "\"trusted\"", "\"system\"", "\"probes\"", "\"reason\""]
        let positions = keys.compactMap { first.range(of: $0)?.lowerBound }
        #expect(positions.count == keys.count && positions == positions.sorted(), "\(first)")
        let bank = lines[1]
        #expect(bank["trusted"] as? [String] == ["127.0.0.4"])
        #expect(bank["system"] as? [String] == [TestEnvironment.impostorAddress])
        let probes = try #require(bank["probes"] as? [[String: Any]])
        let impostor = try #require(probes.first { $0["ip"] as? String == TestEnvironment.impostorAddress })
        #expect(impostor["port"] as? Int == TestEnvironment.originPort)
        #expect(impostor["tls"] as? String == "untrusted_certificate")
        let genuine = try #require(probes.first { $0["ip"] as? String == "127.0.0.4" })
        #expect(genuine["tls"] as? String == "ok")
        #expect((genuine["handshake_ms"] as? Double ?? -1) > 0)
        #expect((bank["reason"] as? String)?.contains("127.0.0.8") == true)
        #expect(lines[2]["probes"].map { "\($0)".contains("name_mismatch") } == true)
        #expect(lines[0]["probes"] as? [Any] != nil && (lines[0]["probes"] as? [Any])?.isEmpty == true)
    }

    @Test func nothingHijackedExitsZeroAndTheHumanFormNamesTheEvidence() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(Self.base + ["origin.hd.test", "cdn.hd.test", "sinkhole.hd.test"])
        #expect(output.status == 0, "\(output.stderr)")
        #expect(output.stdout.contains("cdn.hd.test  CONSISTENT"))
        #expect(output.stdout.contains("probe 127.0.0.10:\(TestEnvironment.originPort) tls ok"))
        #expect(output.stdout.contains("sinkhole.hd.test  SUSPICIOUS"))
        #expect(output.stdout.contains("tls connect_failed"))
    }

    @Test func noProbeLeavesADifferenceSuspicious() async throws {
        try TestEnvironment.requireRunning()
        let arguments =
            ["compare"] + CLI.dohA + [
                "--allow-private", "--system-dns", "127.0.0.1:\(TestEnvironment.systemDNSPort)",
                "--no-probe", "--json", "bank.hd.test",
            ]
        let output = try await CLI.run(arguments)
        #expect(output.status == 0)
        let line = try #require(try output.jsonLines().first)
        #expect(line["verdict"] as? String == "suspicious")
        #expect((line["probes"] as? [Any])?.isEmpty == true)
    }

    @Test func theCanaryLineComesFirst() async throws {
        try TestEnvironment.requireRunning()
        let lying = try await CLI.run(Self.base + ["--json", "--canary-zone", "nxrewrite.hd.test", "origin.hd.test"])
        #expect(lying.status == 3)
        let lines = try lying.jsonLines()
        #expect(lines.count == 2)
        #expect(lines[0]["canary"] as? Bool == true)
        #expect((lines[0]["host"] as? String)?.hasSuffix(".nxrewrite.hd.test") == true)
        #expect(lines[0]["verdict"] as? String == "hijacked")
        #expect(lines[0]["trusted_status"] as? String == "nxdomain")
        let honest = try await CLI.run(Self.base + ["--json", "--canary-zone", "hd.test"])
        #expect(honest.status == 0, "\(honest.stdout)")
        #expect(try honest.jsonLines().first?["verdict"] as? String == "consistent")
    }

    @Test func plainHTTPProbesWithAMarker() async throws {
        try TestEnvironment.requireRunning()
        let arguments =
            ["compare"] + CLI.dohA + [
                "--allow-private", "--system-dns", "127.0.0.1:\(TestEnvironment.systemDNSPort)",
                "--probe-port", "\(TestEnvironment.originPlainPort)",
                "--http-marker", TestEnvironment.genuineMarker, "--json", "bank.hd.test", "cdn.hd.test",
            ]
        let output = try await CLI.run(arguments)
        #expect(output.status == 3)
        let lines = try output.jsonLines()
        #expect(lines.map { $0["verdict"] as? String } == ["hijacked", "consistent"])
        let probes = try #require(lines[0]["probes"] as? [[String: Any]])
        #expect(probes.first { $0["ip"] as? String == TestEnvironment.impostorAddress }?["http"] as? String == "marker_missing")
    }

    @Test func aHostThatCannotBeCheckedExitsOne() async throws {
        try TestEnvironment.requireRunning()
        // Nothing answers DNS on 127.0.0.1:9: the system side fails.
        let arguments =
            ["compare"] + CLI.dohA + [
                "--allow-private", "--system-dns", "127.0.0.1:9", "--timeout", "1",
                "--json", "origin.hd.test",
            ]
        let output = try await CLI.run(arguments)
        #expect(output.status == 1)
        let line = try #require(try output.jsonLines().first)
        #expect(line["verdict"] as? String == "unverified")
        #expect(line["system_status"] as? String != "addresses")
    }

    @Test(arguments: [
        (["--no-probe", "--probe-port", "443", "a.hd.test"], "--no-probe"),
        (["--probe-port", "0", "a.hd.test"], "--probe-port"),
        (["--http-path", "/x", "a.hd.test"], "--http-marker"),
        (["--overall-timeout", "-1", "a.hd.test"], "--overall-timeout"),
        ([], "HOST"),
    ])
    func usageErrorsExitTwo(extra: [String], mentions: String) async throws {
        let output = try await CLI.run(["compare"] + CLI.dohA + ["--system-dns", "127.0.0.1:9"] + extra)
        #expect(output.status == 2)
        #expect(output.stderr.contains(mentions), "\(output.stderr)")
    }

    /// DNSSEC evidence: with `--dnssec report` and the signed tree's anchor, the system's forged,
    /// unsigned answer for forged.sig.test is hijacked on the proof alone (no probe made) and named
    /// bogus; an honest signed name is consistent and says it is secure.
    @Test func aDNSSECSecureTrustedAnswerProvesTheHijackWithoutProbing() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(
            Self.base + [
                "--json", "--type", "a", "--dnssec", "report", "--trust-anchors", TestEnvironment.sigTreeAnchors, "forged.sig.test", "www.sig.test",
            ])
        #expect(output.status == 3, "\(output.stderr)")
        let lines = try output.jsonLines()
        #expect(lines[0]["verdict"] as? String == "hijacked")
        #expect((lines[0]["probes"] as? [Any])?.isEmpty == true, "no probe needed: \(lines[0])")
        #expect(lines[0]["trusted_dnssec"] as? String == "secure")
        #expect(lines[0]["system_dnssec"] as? String == "bogus")
        #expect((lines[0]["system_dnssec_reason"] as? String)?.contains("not signed") == true, "\(lines[0])")
        #expect((lines[0]["reason"] as? String)?.contains("which the signed data does not hold") == true, "\(lines[0])")
        #expect(lines[1]["verdict"] as? String == "consistent")
        #expect(lines[1]["trusted_dnssec"] as? String == "secure" && lines[1]["system_dnssec"] as? String == "secure", "\(lines[1])")
        // Without --dnssec the same comparison has no such proof: the forged address is probed (nothing listens: unproven).
        let plain = try await CLI.run(Self.base + ["--json", "--type", "a", "forged.sig.test"])
        let line = try #require(try plain.jsonLines().first)
        #expect(line["verdict"] as? String != "hijacked" && line["trusted_dnssec"] == nil, "\(line)")
    }
}
