import DNSCore
import Foundation
import TestSupport
import Testing

/// Runs the built `resolve` binary and captures what it prints.
struct CLI {
    struct Output {
        var status: Int32
        var stdout: String
        var stderr: String
        var lines: [String] { stdout.split(separator: "\n").map(String.init) }

        /// Each stdout line parsed as a JSON object.
        func jsonLines() throws -> [[String: Any]] {
            try lines.map { line in
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8))
                return try #require(object as? [String: Any], "not an object: \(line)")
            }
        }
    }

    static var binary: String {
        let besideTests = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("resolve").path
        if FileManager.default.isExecutableFile(atPath: besideTests) { return besideTests }
        return TestEnvironment.root + "/.build/debug/resolve"
    }

    /// Runs the binary on a thread of its own: waiting for a process must not block the
    /// cooperative pool, which has only as many threads as cores and runs every other test.
    /// Runs the binary; `stdin`, when given, is what it reads from standard input.
    /// `executable` runs another program the same way (a real client: dig, kdig, curl).
    static func run(_ arguments: [String], stdin: Data? = nil, executable: String? = nil) async throws -> Output {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try runBlocking(arguments, stdin: stdin, executable: executable ?? binary) })
            }
            thread.start()
        }
    }

    private static func runBlocking(_ arguments: [String], stdin: Data?, executable: String) throws -> Output {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe(), input = Pipe()
        process.standardOutput = out
        process.standardError = err
        if stdin != nil { process.standardInput = input }
        try process.run()
        if let stdin {
            try input.fileHandleForWriting.write(contentsOf: stdin)
            try input.fileHandleForWriting.close()
        }
        // Read stderr on another thread so neither pipe can fill up and stall the child.
        let stderrBox = DataBox()
        let done = DispatchSemaphore(value: 0)
        Thread {
            stderrBox.data = err.fileHandleForReading.readDataToEndOfFile()
            done.signal()
        }.start()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        done.wait()
        let stderr = stderrBox.data
        process.waitUntilExit()
        return Output(
            status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
            stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// Starts a server that outlives the call and is not this process's child: Python's `Popen`
    /// with every inherited descriptor closed and a session of its own, so that neither a pipe of
    /// a later `run` (whose reader would wait for its end forever) nor this process's child
    /// reaping is involved. Returns its PID, for `kill`.
    static func startDetached(_ arguments: [String], log: String) async throws -> Int32? {
        let script = """
            import subprocess, sys
            log = open(sys.argv[1], "ab")
            child = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, start_new_session=True)
            print(child.pid)
            """
        let output = try await run(["-c", script, log] + arguments, executable: "/usr/bin/python3")
        return Int32(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Carries stderr from its reader thread; the semaphore orders the write before the read.
    private final class DataBox: @unchecked Sendable {
        var data = Data()
    }

    /// Writes `yaml` as resolve.yaml in a new temporary directory; the caller removes the directory.
    static func writeConfig(_ yaml: String) throws -> (directory: URL, file: URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("httpdns-\(UInt64.random(in: 0...UInt64.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("resolve.yaml")
        try yaml.write(to: file, atomically: true, encoding: .utf8)
        return (directory, file)
    }

    /// A config file's start that points `resolve` at doh-a with the test CA; keys may follow.
    static var dohAConfig: String {
        "upstreams:\n  - doh: \(TestEnvironment.dohA)\n    bootstrap: [127.0.0.1]\nca_file: \(TestEnvironment.caFile)\n"
    }

    /// Arguments that point `resolve` at the loopback DoH servers with the test CA.
    static let dohA = ["--doh", TestEnvironment.dohA, "--bootstrap", "doh-a.test=127.0.0.1", "--ca-file", TestEnvironment.caFile]
    static let dohB = ["--doh", TestEnvironment.dohB, "--bootstrap", "doh-b.test=127.0.0.1", "--ca-file", TestEnvironment.caFile]
}

@Suite struct ResolveLookupTests {
    @Test func jsonLinesFollowTheContractInArgumentOrder() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(CLI.dohA + ["--json", "www.hd.test", "does-not-exist.hd.test", "v6only.hd.test", "198.18.7.7"])
        #expect(output.status == 1, "one host failed")
        let lines = try output.jsonLines()
        #expect(lines.map { $0["host"] as? String } == ["www.hd.test", "does-not-exist.hd.test", "v6only.hd.test", "198.18.7.7"])

        let www = lines[0]
        #expect(www["source"] as? String == "doh")
        #expect(www["upstream"] as? String == TestEnvironment.dohA)
        #expect(www["stale"] as? Bool == false)
        #expect((www["elapsed_ms"] as? Double).map { $0 > 0 && $0 < 3000 } == true)
        let addresses = try #require(www["addresses"] as? [[String: Any]])
        #expect(addresses.map { $0["ip"] as? String } == ["2001:2::10", "198.18.0.10"])
        #expect(addresses.map { $0["family"] as? String } == ["ipv6", "ipv4"])
        #expect(addresses.map { $0["ttl"] as? Int } == [300, 300])
        // Keys appear in the documented order.
        #expect(output.lines[0].hasPrefix(#"{"host":"www.hd.test","addresses":[{"ip":"2001:2::10","family":"ipv6","ttl":300}"#))

        let missing = try #require(lines[1]["error"] as? [String: Any])
        #expect(missing["code"] as? String == "nxdomain")
        #expect((missing["message"] as? String)?.isEmpty == false)
        #expect(lines[3]["source"] as? String == "literal")
    }

    @Test func exitsZeroWhenEveryHostResolves() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(CLI.dohA + ["--type", "a", "www.hd.test", "alias.hd.test"])
        #expect(output.status == 0)
        #expect(output.stdout.contains("198.18.0.10"))
        #expect(!output.stdout.contains("2001:2::10"), "--type a asks for A only")
        #expect(output.stdout.contains("canonical name www.hd.test"))
    }

    @Test func failsOverToTheSecondResolver() async throws {
        try TestEnvironment.requireRunning()
        let blackhole = try BlackholeListener()
        let output = try await CLI.run(
            ["--doh", "https://doh-a.test:\(blackhole.port)/dns-query", "--bootstrap", "doh-a.test=127.0.0.1"]
                + CLI.dohB + ["--json", "--timeout", "2", "www.hd.test"])
        #expect(output.status == 0, "\(output.stdout) \(output.stderr)")
        let line = try #require(try output.jsonLines().first)
        #expect(line["upstream"] as? String == TestEnvironment.dohB)
        let failed = try #require(line["failed_attempts"] as? [[String: Any]])
        #expect(failed.first?["code"] as? String == "timeout")
    }

    @Test(arguments: [
        ("html", "bad_content_type"), ("status500", "http_status"), ("oversized", "response_too_large"),
        ("truncated", "malformed_response"), ("mismatched", "mismatched_response"),
    ])
    func brokenResolverErrorsCarryTheirCode(path: String, code: String) async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run([
            "--doh", TestEnvironment.hostile(path), "--bootstrap", "hostile.test=127.0.0.3",
            "--ca-file", TestEnvironment.caFile, "--json", "--type", "a", "www.hd.test",
        ])
        #expect(output.status == 1)
        let error = try #require(try output.jsonLines().first?["error"] as? [String: Any])
        #expect(error["code"] as? String == code)
    }

    @Test func humanOutputShowsAnswersAndErrors() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(CLI.dohA + ["www.hd.test", "private.hd.test"])
        #expect(output.status == 1)
        #expect(output.stdout.contains("198.18.0.10  ipv4  ttl 300"))
        #expect(output.stdout.contains("error rejected_private"))
        let allowed = try await CLI.run(CLI.dohA + ["--allow-private", "private.hd.test"])
        #expect(allowed.status == 0)
        #expect(allowed.stdout.contains("10.0.0.1"))
    }

    @Test func invalidHostNameIsAFailureNotACrash() async throws {
        try TestEnvironment.requireRunning()
        let output = try await CLI.run(CLI.dohA + ["--json", "bad name!", String(repeating: "a", count: 300)])
        #expect(output.status == 1)
        let codes = try output.jsonLines().map { ($0["error"] as? [String: Any])?["code"] as? String }
        #expect(codes == ["invalid_name", "invalid_name"])
    }

    @Test(arguments: [
        ["www.hd.test", "--type", "mx"],
        ["www.hd.test", "--timeout", "0"],
        ["www.hd.test", "--timeout", "abc"],
        ["www.hd.test", "--doh", "http://doh-a.test/dns-query"],
        ["www.hd.test", "--doh", "https://doh-a.test/dns-query"],  // no bootstrap
        ["www.hd.test", "--doh", "https://doh-a.test/q", "--bootstrap", "doh-a.test=not-an-ip"],
        ["www.hd.test", "--doh", "https://doh-a.test/q", "--bootstrap", "other.test=127.0.0.1"],
        ["www.hd.test", "--doh", "https://127.0.0.1/q", "--ca-file", "/nonexistent.pem"],
        ["www.hd.test", "--preset", "nosuch"],
        ["--no-such-flag", "www.hd.test"],
        [],
    ])
    func usageAndConfigurationErrorsExitTwo(arguments: [String]) async throws {
        let output = try await CLI.run(arguments)
        #expect(output.status == 2, "\(arguments): \(output.stderr)")
        #expect(!output.stderr.isEmpty)
        #expect(output.stdout.isEmpty)
    }

    @Test func helpExitsZero() async throws {
        let root = try await CLI.run(["--help"])
        #expect(root.status == 0)
        #expect(root.stdout.contains("lookup (default)"))
        let lookup = try await CLI.run(["lookup", "--help"])
        #expect(lookup.status == 0)
        #expect(lookup.stdout.contains("--doh") && lookup.stdout.contains("--bootstrap"))
    }
}

@Suite struct ResolveConfigAndFallbackTests {
    @Test func systemFallbackIsMarkedSystem() async throws {
        try TestEnvironment.requireRunning()
        let dead = "https://doh-a.test:\(unusedLoopbackPort())/dns-query"
        let output = try await CLI.run([
            "--doh", dead, "--bootstrap", "doh-a.test=127.0.0.1", "--fallback", "system",
            "--system-dns", "127.0.0.1:\(TestEnvironment.systemDNSPort)", "--json", "--type", "a",
            "system-only.hd.test",
        ])
        #expect(output.status == 0, "\(output.stdout)\(output.stderr)")
        let line = try #require(try output.jsonLines().first)
        #expect(line["source"] as? String == "system")
        #expect((line["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "198.18.77.77")

        let strict = try await CLI.run([
            "--doh", dead, "--bootstrap", "doh-a.test=127.0.0.1",
            "--system-dns", "127.0.0.1:\(TestEnvironment.systemDNSPort)", "--json", "system-only.hd.test",
        ])
        #expect(strict.status == 1)
        #expect(try ((strict.jsonLines().first?["error"] as? [String: Any])?["code"] as? String) == "connect_failed")
    }

    @Test func configFileSuppliesUpstreamsAndFlagsWin() async throws {
        try TestEnvironment.requireRunning()
        let (directory, file) = try CLI.writeConfig(CLI.dohAConfig + "allow_private: false\n")
        defer { try? FileManager.default.removeItem(at: directory) }
        let output = try await CLI.run(["--config", file.path, "--json", "www.hd.test", "private.hd.test"])
        #expect(output.status == 1)
        let lines = try output.jsonLines()
        #expect(lines.first?["upstream"] as? String == TestEnvironment.dohA)
        #expect((lines.last?["error"] as? [String: Any])?["code"] as? String == "rejected_private")
        let allowed = try await CLI.run(["--config", file.path, "--allow-private", "--json", "private.hd.test"])
        #expect(allowed.status == 0, "the flag wins over the file")

        try "upstreams:\n  - doh: https://127.0.0.1/q\ncache:\n  min_ttl: soon\n".write(to: file, atomically: true, encoding: .utf8)
        let bad = try await CLI.run(["--config", file.path, "www.hd.test"])
        #expect(bad.status == 2)
        #expect(bad.stderr.contains("resolve.yaml:4: cache.min_ttl"), "\(bad.stderr)")
    }
}

@Suite struct ResolvePersistenceTests {
    @Test func persistedCacheAnswersTheNextRun() async throws {
        try TestEnvironment.requireRunning()
        let (directory, file) = try CLI.writeConfig(CLI.dohAConfig + "cache: {persist: cache.bin}\n")
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try await CLI.run(["--config", file.path, "--json", "www.hd.test"])
        #expect(first.status == 0)
        #expect(try first.jsonLines().first?["source"] as? String == "doh")
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("cache.bin").path))
        let second = try await CLI.run(["--config", file.path, "--json", "www.hd.test"])
        #expect(try second.jsonLines().first?["source"] as? String == "cache")

        try Data("not a cache".utf8).write(to: directory.appendingPathComponent("cache.bin"))
        let third = try await CLI.run(["--config", file.path, "--json", "www.hd.test"])
        #expect(third.status == 0, "a corrupt cache file is reported and ignored")
        #expect(third.stderr.contains("ignoring the cache file"))
    }
}
