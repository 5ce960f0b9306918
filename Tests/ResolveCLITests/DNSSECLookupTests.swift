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
}
