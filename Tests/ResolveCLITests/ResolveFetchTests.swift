import DNSCore
import Foundation
import TestSupport
import Testing

/// `resolve fetch` against the nginx origins, per the contract's flags and exit codes.
@Suite struct ResolveFetchTests {
    init() throws { try TestEnvironment.requireRunning() }

    static let base = ["fetch"] + CLI.dohA + ["--allow-private"]

    @Test func fetchesThroughTheResolvedAddressWithTheNameInSNIAndHost() async throws {
        let output = try await CLI.run(Self.base + ["-v", TestEnvironment.origin("/echo")])
        #expect(output.status == 0)
        #expect(output.stdout == "sni=origin.hd.test host=origin.hd.test method=GET proto=HTTP/2.0 cookie=\n")
        #expect(output.stderr.contains("* resolved origin.hd.test via doh (\(TestEnvironment.dohA)): 127.0.0.4"))
        #expect(output.stderr.contains("* connected to 127.0.0.4"))
    }

    @Test func includeHeadersPostDataAndCustomHeaders() async throws {
        let output = try await CLI.run(Self.base + ["-i", "-X", "PUT", "-H", "X-Test: 1", "-d", "k=v", TestEnvironment.origin("/upload")])
        #expect(output.status == 0)
        #expect(output.stdout.hasPrefix("HTTP/2 200\r\n"))
        #expect(output.stdout.contains("X-Request-Method: PUT") || output.stdout.contains("x-request-method: PUT"))
        #expect(output.stdout.lowercased().contains("x-request-body: k=v"))
        #expect(output.stdout.hasSuffix("\r\n\r\nok\n"))
    }

    @Test func dataFileAndOutputFile() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-fetch-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("in.txt")
        try Data("from a file".utf8).write(to: input)
        let posted = try await CLI.run(Self.base + ["-i", "--data-file", input.path, TestEnvironment.origin("/upload")])
        #expect(posted.stdout.lowercased().contains("x-request-body: from a file"))
        #expect(posted.stdout.lowercased().contains("x-request-method: post"))

        // --data-file - streams standard input (length unknown up front).
        let piped = try await CLI.run(
            Self.base + ["-i", "-X", "PUT", "--data-file", "-", TestEnvironment.origin("/upload")],
            stdin: Data("from stdin".utf8))
        #expect(piped.stdout.lowercased().contains("x-request-body: from stdin"))
        #expect(piped.stdout.lowercased().contains("x-request-method: put"))

        // (The 64 MiB constant-memory download is HTTPDNSClientTests'; -o shares its code path.)
        let output = directory.appendingPathComponent("echo.txt")
        let downloaded = try await CLI.run(Self.base + ["-o", output.path, TestEnvironment.origin("/echo")])
        #expect(downloaded.status == 0)
        #expect(downloaded.stdout.isEmpty)
        #expect(try String(contentsOf: output, encoding: .utf8).hasPrefix("sni=origin.hd.test host=origin.hd.test"))
    }

    @Test(arguments: [
        ("/", "mismatch.hd.test", Int32(5), "the certificate is not valid for mismatch.hd.test"),
        ("/", "untrusted.hd.test", Int32(5), "untrusted.hd.test: certificate not trusted"),
        ("/", "absent.hd.test", Int32(6), "cannot resolve absent.hd.test"),
        ("/", "dead.hd.test", Int32(7), "dead.hd.test: cannot connect"),
        ("/close", "origin.hd.test", Int32(7), "origin.hd.test"),
    ])
    func failuresHaveTheContractsExitCodes(path: String, host: String, status: Int32, message: String) async throws {
        let output = try await CLI.run(Self.base + [TestEnvironment.origin(path, host: host)])
        #expect(output.status == status, "\(output.stderr)")
        #expect(output.stderr.contains(message))
        #expect(!output.stdout.contains("secret body"), "no byte of the body reaches the caller")
    }

    @Test func failFlagTurnsErrorStatusesIntoExit22() async throws {
        let plain = try await CLI.run(Self.base + [TestEnvironment.origin("/not-found")])
        #expect(plain.status == 0)
        #expect(plain.stdout == "no such page\n")
        let failing = try await CLI.run(Self.base + ["--fail", TestEnvironment.origin("/not-found")])
        #expect(failing.status == 22)
    }

    @Test(arguments: [
        ["ftp://origin.hd.test/"], ["-d", "a", "--data-file", "/dev/null", "https://origin.hd.test/"],
        ["-H", "no-colon", "https://origin.hd.test/"], ["-H", ": value", "https://origin.hd.test/"],
        ["-H", "X-A: 1\r\nX-Injected: 2", "https://origin.hd.test/"], ["--max-redirs", "-1", "https://origin.hd.test/"],
    ])
    func usageErrorsExit2(arguments: [String]) async throws {
        let output = try await CLI.run(Self.base + arguments)
        #expect(output.status == 2)
        #expect(!output.stderr.isEmpty)
    }

    @Test func credentialsFollowARedirectOnlyWithinTheSameOrigin() async throws {
        let credentials = ["-H", "Authorization: Bearer s3cret", "-H", "Cookie: session=abc"]
        let same = try await CLI.run(Self.base + credentials + [TestEnvironment.origin("/redirect-same-origin")])
        #expect(same.stdout == "authorization=Bearer s3cret cookie=session=abc\n", "\(same.stdout)\(same.stderr)")
        // The same host on another port is another origin (RFC 6454), and https to http would send
        // them in clear: neither gets them.
        for path in ["/redirect-other-port", "/redirect-to-plain"] {
            let other = try await CLI.run(Self.base + credentials + [TestEnvironment.origin(path)])
            #expect(other.status == 0, "\(path): \(other.stderr)")
            #expect(other.stdout == "authorization= cookie=\n", "\(path): \(other.stdout)")
        }
    }

    @Test func typeChoosesTheAddressFamilyLikeCurlsDash4AndDash6() async throws {
        // failover.hd.test: AAAA ::1 (nothing listens there), A 127.0.0.4 (the origin).
        let v4 = try await CLI.run(Self.base + ["--type", "a", "-v", TestEnvironment.origin("/echo", host: "failover.hd.test")])
        #expect(v4.status == 0, "\(v4.stderr)")
        #expect(v4.stderr.contains("connected to 127.0.0.4"))
        let v6 = try await CLI.run(Self.base + ["--type", "aaaa", TestEnvironment.origin("/echo", host: "failover.hd.test")])
        #expect(v6.status == 7, "IPv6 only: ::1 refuses. \(v6.stderr)")
        let literal = try await CLI.run(Self.base + ["--type", "aaaa", "https://127.0.0.4:\(TestEnvironment.originPort)/echo"])
        #expect(literal.status == 6, "an IPv4 literal with IPv6 only: \(literal.stderr)")
    }

    @Test func jsonDescribesTheExchangeAndItsFailure() async throws {
        let ok = try await CLI.run(Self.base + ["--json", TestEnvironment.origin("/echo")])
        #expect(ok.status == 0)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(ok.stdout.utf8)) as? [String: Any], "\(ok.stdout)")
        #expect(object["status"] as? Int == 200)
        #expect(object["http_version"] as? String == "2")
        #expect(object["remote_ip"] as? String == "127.0.0.4")
        #expect(object["body_bytes"] as? Int == 73)
        #expect((object["resolution"] as? [String: Any])?["source"] as? String == "doh")
        #expect((object["headers"] as? [String: Any])?["content-type"] as? String == "text/plain")
        #expect(!ok.stdout.contains("sni="), "the body is not mixed into the JSON")

        let failed = try await CLI.run(Self.base + ["--json", TestEnvironment.origin("/", host: "absent.hd.test")])
        #expect(failed.status == 6)
        let error = try #require(try JSONSerialization.jsonObject(with: Data(failed.stdout.utf8)) as? [String: Any], "\(failed.stdout)")
        #expect((error["error"] as? [String: Any])?["code"] as? String == "resolution")
        #expect((error["error"] as? [String: Any])?["dns_code"] as? String == "nxdomain")
    }

    @Test func anExplicitCookieHeaderIsSent() async throws {
        let output = try await CLI.run(Self.base + ["-H", "Cookie: a=b", TestEnvironment.origin("/echo")])
        #expect(output.stdout.hasSuffix("cookie=a=b\n"), "\(output.stdout)")
    }

    @Test(arguments: [
        ["-X", "GET /x HTTP/1.1\r\nHost: a\r\n\r\nGET"], ["-X", "GE T"], ["https://origin.hd.test:99999/"],
        ["--type", "mx", "https://origin.hd.test/"],
    ])
    func requestLinesAndPortsAreCheckedBeforeAnythingIsSent(arguments: [String]) async throws {
        let output = try await CLI.run(Self.base + arguments + (arguments.last!.hasPrefix("https") ? [] : [TestEnvironment.origin("/echo")]))
        #expect(output.status == 2, "\(output.stderr)")
    }
}
