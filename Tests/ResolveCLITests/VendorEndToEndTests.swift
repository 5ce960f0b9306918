import DNSCore
import Foundation
import TestSupport
import Testing

/// `resolve lookup`, `compare`, `fetch` and the daemon (watch, `/dns-query`, the stub) with each
/// vendor upstream from a config file, against the fakes of Scripts/env/testenv.sh.
struct VendorEndToEndTests {
    typealias Env = TestEnvironment

    /// One `upstreams:` entry per vendor kind (the config contract's keys).
    static let upstreams: [(label: String, yaml: String)] = {
        let dir = Env.vendorSecrets
        let https = "https://127.0.0.1:\(Env.vendorPort)", http = "http://127.0.0.1:\(Env.vendorPlainPort)"
        return [
            (
                "alibaba-v2-cbc",
                "alibaba: {account_id: \"100000\", api: v2, endpoint: \"\(https)\", secret_file: \(dir)/alibaba.secret, aes_key_file: \(dir)/alibaba.aes, encryption: cbc}"
            ),
            (
                "alibaba-legacy",
                "alibaba: {account_id: \"100000\", api: legacy, endpoint: \"\(https)\", tls_name: vendor.test, secret_file: \(dir)/alibaba.secret}"
            ),
            ("tencent-des-http", "tencent: {account_id: \"12345\", endpoint: \"\(http)\", encryption: des, key_file: \(dir)/tencent.key}"),
            ("tencent-token", "tencent: {endpoint: \"\(https)\", token_file: \(dir)/tencent.token}"),
            ("baidu", "baidu: {account_id: \"123456\", endpoint: \"\(https)\", secret_file: \(dir)/baidu.secret}"),
        ]
    }()

    static let secrets = ["0123456789abcdef0123456789abcdef", "00112233445566778899aabbccddeeff", "dnspodpass", "7c1a9e5d3b", "baidu-test-secret"]

    static func config(_ upstream: String, extra: String = "") -> String {
        """
        upstreams:
          - \(upstream)
        ca_file: \(Env.caFile)
        allow_private: true
        system_dns: ["127.0.0.1:\(Env.systemDNSPort)"]
        \(extra)
        """
    }

    func withConfig<T>(_ text: String, _ body: (String) async throws -> T) async throws -> T {
        try Env.requireRunning()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vendor-\(UUID().uuidString).yaml").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try await body(path)
    }

    func expectNoSecret(_ output: CLI.Output, _ label: String) {
        for secret in Self.secrets {
            #expect(!output.stdout.contains(secret) && !output.stderr.contains(secret), "\(label) printed a secret")
        }
    }

    @Test(arguments: upstreams.map(\.label))
    func lookupCompareAndFetchThroughEachVendor(label: String) async throws {
        let upstream = try #require(Self.upstreams.first { $0.label == label }).yaml
        try await withConfig(Self.config(upstream)) { path in
            let lookup = try await CLI.run(["lookup", "--config", path, "--json", "www.hd.test", "v4only.hd.test"])
            #expect(lookup.status == 0, "\(lookup.stderr)")
            let lines = try lookup.jsonLines()
            #expect(lines.map { $0["source"] as? String } == ["httpdns", "httpdns"])
            let addresses = (lines[0]["addresses"] as? [[String: Any]])?.compactMap { $0["ip"] as? String }
            #expect(Set(addresses ?? []) == ["198.18.0.10", "2001:2::10"])
            let upstreamURL = try #require(lines[0]["upstream"] as? String)
            #expect(upstreamURL.hasPrefix("http") && !upstreamURL.contains("?"))
            let plain = label.hasSuffix("-http")
            #expect((lines[0]["transport"] as? String) == (plain ? "http" : nil))
            #expect(lookup.stderr.contains("is plain HTTP") == plain, "\(lookup.stderr)")
            expectNoSecret(lookup, label)

            let compare = try await CLI.run(
                ["compare", "--config", path, "--json", "--probe-port", "\(Env.originPort)", "origin.hd.test", "bank.hd.test"])
            let verdicts = try compare.jsonLines().map { $0["verdict"] as? String }
            #expect(verdicts == ["consistent", "hijacked"], "\(compare.stdout)\(compare.stderr)")
            expectNoSecret(compare, label)

            let fetch = try await CLI.run(["fetch", "--config", path, "-v", Env.origin("/echo")])
            #expect(fetch.stdout == "sni=origin.hd.test host=origin.hd.test method=GET proto=HTTP/2.0 cookie=\n", "\(fetch.stderr)")
            #expect(fetch.stderr.contains("via httpdns"), "\(fetch.stderr)")
            expectNoSecret(fetch, label)
        }
    }

    @Test func vendorPresetsNeedTheAccountFromTheConfig() async throws {
        // Offline: these fail before any request (the presets are public service IPs, never contacted here).
        let bare = try await CLI.run(["lookup", "--preset", "alibaba-cn", "www.hd.test"])
        #expect(bare.status == 2 && bare.stderr.contains("needs an entry alibaba: with the account's keys"), "\(bare.stderr)")
        let region = try await CLI.run(["lookup", "--preset", "tencent-mars", "www.hd.test"])
        #expect(region.status == 2 && region.stderr.contains("tencent regions: cn, intl"), "\(region.stderr)")
    }

    @Test func refusedCredentialsAreUnauthorizedInTheJSON() async throws {
        let upstream =
            "baidu: {account_id: \"123456\", endpoint: \"https://127.0.0.1:\(Env.vendorPort)\", secret_file: \(Env.vendorSecrets)/wrong.secret}"
        try await withConfig(Self.config(upstream)) { path in
            let output = try await CLI.run(["lookup", "--config", path, "--json", "www.hd.test"])
            #expect(output.status == 1)
            let error = try #require(try output.jsonLines().first?["error"] as? [String: Any])
            #expect(error["code"] as? String == "unauthorized", "\(output.stdout)")
            #expect(!output.stdout.contains("wrong-secret"))
        }
    }
}

extension DaemonSuites {
    /// The daemon with a vendor upstream: watched names get verdicts, `/dns-query` and the stub answer
    /// from it, and the metrics name the endpoint, never a secret.
    @Suite(.serialized) struct VendorDaemonTests {
        static let port = 18640
        static let dnsPort = 18641

        @Test func theDaemonServesFromAVendorUpstream() async throws {
            let dir = TestEnvironment.vendorSecrets
            let config = """
                upstreams:
                  - alibaba: {account_id: "100000", api: v2, endpoint: "https://127.0.0.1:\(TestEnvironment.vendorPort)", secret_file: \(dir)/alibaba.secret, aes_key_file: \(dir)/alibaba.aes, encryption: gcm}
                ca_file: \(TestEnvironment.caFile)
                allow_private: true
                system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
                listen: "127.0.0.1:\(Self.port)"
                dns_listen: "127.0.0.1:\(Self.dnsPort)"
                watch: [{host: origin.hd.test, port: \(TestEnvironment.originPort), interval: 1}, {host: bank.hd.test, port: \(TestEnvironment.originPort), interval: 1}]
                """
            let daemon = try await DaemonProcess(config: config, port: Self.port)
            defer { daemon.stop() }
            var status = ""
            for _ in 0..<100 {
                status = daemon.text(try await daemon.get("/v1/status"))
                if status.contains("\"hijacked\""), status.contains("\"consistent\"") { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(status.contains("\"hijacked\"") && status.contains("\"consistent\""), "\(status)")

            let lookup = try await daemon.get("/v1/resolve?host=www.hd.test&type=a")
            #expect(
                daemon.text(lookup).contains("\"source\":\"httpdns\"") || daemon.text(lookup).contains("\"source\":\"cache\""),
                "\(daemon.text(lookup))")
            let query = DNSMessage(id: 7, flags: 0x0100, questions: [DNSMessage.Question(name: try DomainName("v4only.hd.test"), type: .a)]).encode()
            let doh = try await daemon.post("/dns-query", query)
            #expect(doh.status == 200)
            let answer = try DNSMessage(decoding: doh.body)
            #expect(answer.answers.count == 1)

            let dig = try await CLI.run(
                ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=3", "+short", "www.hd.test", "A"], executable: "/usr/bin/dig")
            #expect(dig.stdout == "198.18.0.10\n", "\(dig.stdout)\(dig.stderr)")

            let metrics = daemon.text(try await daemon.get("/metrics"))
            #expect(metrics.contains("https://127.0.0.1:\(TestEnvironment.vendorPort)/v2/d"))
            for secret in VendorEndToEndTests.secrets { #expect(!metrics.contains(secret) && !daemon.logText.contains(secret)) }
        }
    }
}
