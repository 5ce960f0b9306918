import Foundation
import TestSupport
import Testing

/// `resolve lookup --type https|svcb` against BIND's signed-off test zone (Scripts/env/testenv.sh):
/// every SvcParam decoded, alias mode, CNAMEs, SVCB, and the errors.
@Suite struct ServiceBindingLookupTests {
    @Test func httpsRecordsAreDecodedInJSON() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(
            CLI.dohA + ["--type", "https", "--json", "www.hd.test", "svc.hd.test", "svcalias.hd.test", "v4only.hd.test", "nope.hd.test"])
        #expect(output.status == 1, "two hosts have no HTTPS records: \(output.stdout) \(output.stderr)")
        let lines = try output.jsonLines()
        try #require(lines.count == 5)
        #expect(lines.map { $0["host"] as? String } == ["www.hd.test", "svc.hd.test", "svcalias.hd.test", "v4only.hd.test", "nope.hd.test"])

        let www = lines[0]
        #expect(www["type"] as? String == "HTTPS")
        #expect(www["ttl"] as? Int == 300)
        let record = try #require((www["records"] as? [[String: Any]])?.first)
        #expect(record["priority"] as? Int == 1)
        #expect(record["target"] as? String == ".")
        #expect(record["mode"] as? String == "service")
        #expect(record["alpn"] as? [String] == ["h2", "http/1.1"])
        #expect(record["port"] as? Int == 8443)
        #expect(record["ipv4hint"] as? [String] == ["198.18.0.10"])
        #expect(record["ipv6hint"] as? [String] == ["2001:2::10"])
        #expect(
            record["ech"] as? String
                == "AEj+DQBEAQAgACAdd+scUi0IYFsXnUIU7ko2Nd9+F8M26pAGZVpz/KrWPgAEAAEAAWQVZWNoLXNpdGVzLmV4YW1wbGUubmV0AAA=")

        let alias = try #require((lines[1]["records"] as? [[String: Any]])?.first)
        #expect(alias["mode"] as? String == "alias")
        #expect(alias["priority"] as? Int == 0)
        #expect(alias["target"] as? String == "www.hd.test")

        #expect(lines[2]["canonical_name"] as? String == "www.hd.test")
        #expect(lines[2]["ttl"] as? Int == 120, "the CNAME's smaller TTL")
        #expect((lines[2]["records"] as? [[String: Any]])?.first?["port"] as? Int == 8443)

        #expect((lines[3]["error"] as? [String: Any])?["code"] as? String == "nodata")
        #expect((lines[4]["error"] as? [String: Any])?["code"] as? String == "nxdomain")
    }

    @Test func svcbAndMandatoryKeysInHumanOutput() async throws {
        try TestEnvironment.requireRunning()
        let svcb = try await CLI.run(CLI.dohA + ["--type", "svcb", "_8443._foo.api.hd.test"])
        #expect(svcb.status == 0, "\(svcb.stdout) \(svcb.stderr)")
        #expect(svcb.lines.first == "_8443._foo.api.hd.test  SVCB")
        #expect(svcb.lines.dropFirst().first == "  2 api.hd.test  service  alpn=h3 no-default-alpn port=8443  ttl 300")

        let hinted = try await CLI.run(CLI.dohA + ["--type", "HTTPS", "hinted.hd.test"])
        #expect(hinted.status == 0)
        #expect(hinted.lines.dropFirst().first == "  1 .  service  mandatory=alpn alpn=h2 ipv4hint=203.0.113.9,127.0.0.4  ttl 300")
    }

    @Test func otherCommandsAndLiteralsRefuseServiceBindingTypes() async throws {
        for (command, target) in [("fetch", "https://www.hd.test/"), ("compare", "www.hd.test")] {
            let output = try await CLI.run([command] + CLI.dohA + ["--type", "https", target])
            #expect(output.status == 2, "\(command): \(output.stderr)")
            #expect(output.stderr.contains("--type must be a, aaaa or both"))
        }
        try TestEnvironment.requireRunning()
        let literal = try await CLI.run(CLI.dohA + ["--type", "https", "--json", "198.18.0.1"])
        #expect(literal.status == 1)
        #expect(((try literal.jsonLines().first?["error"]) as? [String: Any])?["code"] as? String == "invalid_name")
    }

    @Test func compareNamesSystemHintsOutsideTheTrustedAddresses() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(ResolveCompareTests.base + ["--https-records", "--json", "forged.hd.test", "www.hd.test"])
        #expect(output.status == 0, "\(output.stdout) \(output.stderr)")
        let lines = try output.jsonLines()
        try #require(lines.count == 2)

        // The A answers agree; the system's HTTPS record hints an address the trusted side never gave.
        let forged = lines[0]
        #expect(forged["verdict"] as? String == "suspicious")
        #expect((forged["reason"] as? String)?.contains("the system's HTTPS record hints 203.0.113.66") == true, "\(forged)")
        let https = try #require(forged["https"] as? [String: Any])
        #expect((https["trusted"] as? [String: Any])?["error"] as? String == "nodata")
        #expect(((https["system"] as? [[String: Any]])?.first)?["ipv4hint"] as? [String] == ["203.0.113.66"])
        #expect(https["foreign_hints"] as? [String] == ["203.0.113.66"])
        #expect(https["agree"] as? Bool == false)

        // Honest records on both sides: the same, hints inside the trusted addresses.
        let www = lines[1]
        #expect(www["verdict"] as? String == "consistent")
        let wwwHTTPS = try #require(www["https"] as? [String: Any])
        #expect(wwwHTTPS["agree"] as? Bool == true)
        #expect(wwwHTTPS["foreign_hints"] as? [String] == [])

        // Without the flag, the contract's line is as before.
        let plain = try await CLI.run(ResolveCompareTests.base + ["--json", "forged.hd.test"])
        let line = try #require(try plain.jsonLines().first)
        #expect(line["verdict"] as? String == "consistent")
        #expect(line["https"] == nil)
    }
}
