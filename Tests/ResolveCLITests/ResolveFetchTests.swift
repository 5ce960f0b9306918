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
        let piped = try await CLI.run(Self.base + ["-i", "-X", "PUT", "--data-file", "-", TestEnvironment.origin("/upload")],
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

    @Test(arguments: [["ftp://origin.hd.test/"], ["-d", "a", "--data-file", "/dev/null", "https://origin.hd.test/"],
                      ["-H", "no-colon", "https://origin.hd.test/"], ["-H", ": value", "https://origin.hd.test/"],
                      ["-H", "X-A: 1\r\nX-Injected: 2", "https://origin.hd.test/"], ["--max-redirs", "-1", "https://origin.hd.test/"]])
    func usageErrorsExit2(arguments: [String]) async throws {
        let output = try await CLI.run(Self.base + arguments)
        #expect(output.status == 2)
        #expect(!output.stderr.isEmpty)
    }
}
