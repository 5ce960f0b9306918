import Foundation
import TestSupport
import Testing

/// `resolve lookup --dnssec report|require --trust-anchors FILE` against BIND's signed zones. The
/// lying trusted resolver is doh-b: perfect TLS, the same zone data, but signed with its own keys,
/// which the anchors (doh-a's keys) do not name.
@Suite struct DNSSECLookupTests {
    /// An anchor file holding doh-a's key for `zone`, as `dig` prints it.
    static func anchors(_ zone: String) async throws -> URL {
        var key = ""
        for _ in 0..<50 {
            let dig = try await CLI.run(
                ["+short", "@127.0.0.1", "-p", "\(TestEnvironment.dnsPort)", zone, "DNSKEY"], executable: "/usr/bin/dig")
            key = dig.lines.first ?? ""
            if !key.isEmpty { break }
            try await Task.sleep(for: .milliseconds(200))  // BIND signs at start
        }
        try #require(!key.isEmpty, "no DNSKEY for \(zone)")
        let (directory, _) = try CLI.writeConfig("")
        let file = directory.appendingPathComponent("anchors.txt")
        try "; doh-a's key\n\(zone). 3600 IN DNSKEY \(key)\n".write(to: file, atomically: true, encoding: .utf8)
        return file
    }

    @Test func reportLabelsSecureAndRequireRefusesAnotherSignersAnswers() async throws {
        try TestEnvironment.requireRunning()
        let file = try await Self.anchors("ed.sec.test")
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        let common = ["--allow-private", "--trust-anchors", file.path, "--json"]

        let report = try await CLI.run(CLI.dohA + common + ["--dnssec", "report", "www.ed.sec.test", "a.b.wild.ed.sec.test", "www.hd.test"])
        #expect(report.status == 0, "\(report.stdout) \(report.stderr)")
        let lines = try report.jsonLines()
        #expect(lines.map { $0["dnssec"] as? String } == ["secure", "secure", "indeterminate"])
        #expect(lines[2]["dnssec_reason"] as? String == "no trust anchor covers www.hd.test")

        // doh-b answers the same addresses, signed by keys the anchor does not name.
        let lying = try await CLI.run(CLI.dohB + common + ["--dnssec", "report", "www.ed.sec.test"])
        #expect(lying.status == 0)
        let labelled = try #require(try lying.jsonLines().first)
        #expect(labelled["dnssec"] as? String == "bogus")
        #expect((labelled["dnssec_reason"] as? String)?.contains("no DNSKEY of ed.sec.test matches") == true, "\(labelled)")

        let refused = try await CLI.run(CLI.dohB + common + ["--dnssec", "require", "www.ed.sec.test"])
        #expect(refused.status == 1)
        let error = try #require(try refused.jsonLines().first?["error"] as? [String: Any])
        #expect(error["code"] as? String == "dnssec_bogus")

        // Off (the default) adds nothing.
        let off = try await CLI.run(CLI.dohB + ["--allow-private", "--json", "www.ed.sec.test"])
        #expect(try off.jsonLines().first?["dnssec"] == nil)
    }

    @Test func badPoliciesAndAnchorFilesAreUsageErrors() async throws {
        let policy = try await CLI.run(CLI.dohA + ["--dnssec", "strict", "www.hd.test"])
        #expect(policy.status == 2)
        #expect(policy.stderr.contains("--dnssec must be off, report or require"))
        let missing = try await CLI.run(CLI.dohA + ["--dnssec", "report", "--trust-anchors", "/nonexistent/anchors", "www.hd.test"])
        #expect(missing.status == 2)
        let (directory, file) = try CLI.writeConfig("sec.test. IN A 192.0.2.1\n")
        defer { try? FileManager.default.removeItem(at: directory) }
        let wrong = try await CLI.run(CLI.dohA + ["--dnssec", "report", "--trust-anchors", file.path, "www.hd.test"])
        #expect(wrong.status == 2)
        #expect(wrong.stderr.contains("A is not a trust anchor (DS or DNSKEY)"), "\(wrong.stderr)")
    }

    /// A peer validator in the same environment: BIND's `delv`, with the same anchor, agrees with us
    /// name by name and server by server (a table of both verdicts in the failure message).
    @Test func delvAgreesNameByName() async throws {
        try TestEnvironment.requireRunning()
        let file = try await Self.anchors("ed.sec.test")
        defer { try? FileManager.default.removeItem(at: file.deletingLastPathComponent()) }
        // delv's anchor syntax: trust-anchors { zone static-key flags protocol algorithm "base64"; };
        let line = try String(contentsOf: file, encoding: .utf8).split(separator: "\n").last!.split(separator: " ")
        let delvAnchors = file.deletingLastPathComponent().appendingPathComponent("delv.conf")
        try "trust-anchors {\n  ed.sec.test. static-key \(line[4]) \(line[5]) \(line[6]) \"\(line[7...].joined())\";\n};\n"
            .write(to: delvAnchors, atomically: true, encoding: .utf8)
        var table: [String] = []
        var disagreements = 0
        for (server, dnsPort, doh) in [("doh-a", TestEnvironment.dnsPort, CLI.dohA), ("doh-b", TestEnvironment.dnsPortB, CLI.dohB)] {
            for name in ["www.ed.sec.test", "a.b.wild.ed.sec.test", "www.hd.test"] {
                let ours = try await CLI.run(doh + ["--allow-private", "--trust-anchors", file.path, "--json", "--dnssec", "report", name])
                let status = try ours.jsonLines().first?["dnssec"] as? String ?? "none"
                let delv = try await CLI.run(
                    ["-a", delvAnchors.path, "@127.0.0.1", "-p", "\(dnsPort)", name, "A", "+root=ed.sec.test"], executable: "/usr/bin/delv")
                let output = delv.stdout + delv.stderr
                let peer =
                    output.contains("fully validated")
                    ? "secure" : output.contains("broken trust chain") || output.contains("resolution failed") ? "bogus" : "not validated"
                let agree =
                    (status == "secure" && peer == "secure") || (status == "bogus" && peer == "bogus")
                    || (status == "indeterminate" && peer == "not validated")
                if !agree { disagreements += 1 }
                table.append("\(server) \(name): ours \(status), delv \(peer)\(agree ? "" : "  <- differ")")
            }
        }
        let report = table.joined(separator: "\n")
        #expect(disagreements == 0, "\n\(report)")
        #expect(
            table.filter { $0.contains("ours secure") }.count == 2 && table.filter { $0.contains("ours bogus") }.count == 2,
            "\n\(report)")
    }

    static let dohV = ["--doh", TestEnvironment.validatorDoH, "--bootstrap", "doh-v.test=127.0.0.1", "--ca-file", TestEnvironment.caFile]

    /// Unbound, validating with the same anchor, agrees with `resolve lookup --dnssec report` on
    /// every name of the signed tree: unbound's AD bit is our secure, its SERVFAIL our bogus, an
    /// answer without AD our insecure or indeterminate. Names whose answer crosses zones are asked
    /// through unbound (which follows the chain), the others through BIND directly, so that bogus
    /// data reaches our validator instead of unbound's SERVFAIL.
    @Test func unboundAgreesNameByNameOnTheSignedTree() async throws {
        try TestEnvironment.requireRunning()
        let names: [(String, crossesZones: Bool)] = [
            ("www.sig.test", false), ("x.wild.sig.test", false), ("nx.sig.test", false), ("www.rsa.sig.test", false),
            ("www.n3.sig.test", false), ("x.wild.n3.sig.test", false), ("nx.n3.sig.test", false), ("www.unsigned.n3.sig.test", false),
            ("www.insecure.sig.test", false), ("www.badsig.sig.test", false), ("www.expired.sig.test", false),
            ("www.nokey.sig.test", false), ("alias.sig.test", true), ("back.rsa.sig.test", true), ("www.dn.sig.test", true), ("out.sig.test", true),
            ("www.hd.test", false),
        ]
        var table: [String] = []
        var disagreements = 0
        for (name, crossesZones) in names {
            let upstream = crossesZones ? Self.dohV : CLI.dohA
            let ours = try await CLI.run(
                upstream + [
                    "--allow-private", "--trust-anchors", TestEnvironment.sigTreeAnchors, "--json", "--dnssec", "report", "--type", "a", name,
                ])
            let status = try ours.jsonLines().first?["dnssec"] as? String ?? "none"
            let dig = try await CLI.run(
                ["@127.0.0.1", "-p", "\(TestEnvironment.validatorDNSPort)", "+dnssec", "+tries=1", "+time=5", name, "A"], executable: "/usr/bin/dig")
            let flags = dig.stdout.split(separator: "\n").first { $0.hasPrefix(";; flags:") } ?? ""
            let peer =
                dig.stdout.contains("status: SERVFAIL")
                ? "bogus" : flags.split(separator: ";").first?.split(separator: " ").contains("ad") == true ? "secure" : "not validated"
            let agree = status == peer || (peer == "not validated" && ["insecure", "indeterminate"].contains(status))
            if !agree { disagreements += 1 }
            table.append("\(name): ours \(status), unbound \(peer)\(agree ? "" : "  <- differ")")
        }
        let report = table.joined(separator: "\n")
        #expect(disagreements == 0, "\n\(report)")
        // The table covers every state.
        for state in ["secure", "insecure", "bogus", "indeterminate"] {
            #expect(table.contains { $0.contains("ours \(state),") }, "no \(state) name:\n\(report)")
        }
    }

    /// The config keys: `dnssec: require`, `trust_anchors:` and `negative_trust_anchors:`; the
    /// flags override the file.
    @Test func configKeysValidateAndNegativeAnchorsExempt() async throws {
        try TestEnvironment.requireRunning()
        let (directory, file) = try CLI.writeConfig(
            CLI.dohAConfig + "allow_private: true\ndnssec: require\ntrust_anchors: \(TestEnvironment.sigTreeAnchors)\n"
                + "negative_trust_anchors: [badsig.sig.test]\n")
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = try await CLI.run(
            ["--config", file.path, "--json", "--type", "a", "www.sig.test", "www.badsig.sig.test", "www.nokey.sig.test", "nx.sig.test"])
        #expect(output.status == 1, "\(output.stderr)")
        let lines = try output.jsonLines()
        #expect(lines[0]["dnssec"] as? String == "secure", "\(lines[0])")
        #expect(lines[1]["dnssec"] as? String == "indeterminate", "\(lines[1])")
        #expect((lines[1]["dnssec_reason"] as? String)?.contains("negative trust anchor") == true, "\(lines[1])")
        #expect((lines[2]["error"] as? [String: Any])?["code"] as? String == "dnssec_bogus", "\(lines[2])")
        #expect((lines[3]["error"] as? [String: Any])?["code"] as? String == "nxdomain", "\(lines[3])")
        #expect(lines[3]["dnssec"] as? String == "secure", "a proven NXDOMAIN: \(lines[3])")
        // --dnssec off on the command line wins over the file.
        let off = try await CLI.run(["--config", file.path, "--json", "--dnssec", "off", "--type", "a", "www.nokey.sig.test"])
        #expect(off.status == 0, "\(off.stdout)")
        #expect(try off.jsonLines().first?["dnssec"] == nil)
        // A bad value names the key.
        let (badDirectory, badFile) = try CLI.writeConfig(CLI.dohAConfig + "dnssec: sometimes\n")
        defer { try? FileManager.default.removeItem(at: badDirectory) }
        let bad = try await CLI.run(["--config", badFile.path, "www.sig.test"])
        #expect(bad.status == 2 && bad.stderr.contains("dnssec"), "\(bad.stderr)")
    }
}
