import CurlSupport
import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// The daemon over HTTPS with HTTP/2, with a bearer token, limits and the plain-DNS stub, queried
    /// by real clients: kdig and dig over DoH, curl's `--doh-url`, `resolve lookup` (our own library)
    /// with the daemon as its DoH upstream, and dig against the stub. Everything goes to 127.0.0.1.
    @Suite(.serialized) struct DaemonServingTests {
        static let port = 18493
        static let dnsPort = 18494
        static let token = "test-token-0123456789abcdef"
        let daemon: DaemonProcess

        static func config(protectDNSQuery: Bool = false) -> String {
            DaemonProcess.config(
                port: port, watch: ["origin.hd.test"],
                extra: """
                    \(DaemonProcess.tlsConfig)
                    dns_listen: "127.0.0.1:\(dnsPort)"
                    auth_token: \(token)
                    protect_dns_query: \(protectDNSQuery)
                    limits: {max_url_length: 256, max_body_bytes: 600}
                    """)
        }

        init() async throws {
            daemon = try await DaemonProcess(config: Self.config(), port: Self.port, https: true)
        }

        var dohURL: String { "https://127.0.0.1:\(Self.port)/dns-query" }
        var authorized: [String] { ["Authorization: Bearer \(Self.token)"] }

        func run(_ program: String, _ arguments: [String]) async throws -> CLI.Output {
            try await CLI.run(arguments, executable: program)
        }

        /// dig against the stub: one try, 3 s, never the system's resolver (the server is explicit).
        func dig(_ arguments: [String]) async throws -> CLI.Output {
            try await run("/usr/bin/dig", ["@127.0.0.1", "-p", "\(Self.dnsPort)", "+tries=1", "+time=3"] + arguments)
        }

        func metric(_ line: String) async throws -> Double? {
            let text = daemon.text(try await daemon.get("/metrics", headers: authorized))
            guard let found = text.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else { return nil }
            return Double(found.split(separator: " ").last ?? "")
        }

        @Test func dohClientsGetAnswersOverHTTP2() async throws {
            defer { daemon.stop() }
            // The listener negotiates HTTP/2 by ALPN.
            let version = try await run(
                "/usr/bin/curl",
                [
                    "-sS", "--http2", "--cacert", TestEnvironment.caFile, "-o", "/dev/null",
                    "-w", "%{http_version}", "https://127.0.0.1:\(Self.port)/healthz",
                ])
            #expect(version.stdout == "2", "\(version.stderr)")

            // kdig over DoH (HTTP/2, certificate verified against the test CA): an address from the
            // engine, and a TXT record forwarded to the trusted upstream.
            let kdigBase = [
                "@127.0.0.1", "-p", "\(Self.port)", "+https=/dns-query", "+tls-ca=\(TestEnvironment.caFile)",
                "+tls-hostname=localhost", "+timeout=5", "+retry=0",
            ]
            let address = try await run("/usr/bin/kdig", kdigBase + ["www.hd.test", "A"])
            #expect(address.status == 0, "\(address.stderr)")
            #expect(address.stdout.contains("NOERROR"), "\(address.stdout)")
            #expect(address.stdout.contains("198.18.0.10"), "\(address.stdout)")
            let txt = try await run("/usr/bin/kdig", kdigBase + ["www.hd.test", "TXT"])
            #expect(txt.stdout.contains("\"hd-test-txt\""), "\(txt.stdout)\(txt.stderr)")

            // dig over DoH: MX forwarded, the answer unchanged.
            let mx = try await run(
                "/usr/bin/dig",
                [
                    "@127.0.0.1", "-p", "\(Self.port)", "+https", "+tls-ca=\(TestEnvironment.caFile)",
                    "+tls-hostname=localhost", "+tries=1", "+time=5", "+short", "hd.test", "MX",
                ])
            #expect(mx.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "10 mx.hd.test.", "\(mx.stdout)\(mx.stderr)")

            // curl resolves the origin through the daemon (--doh-url) and fetches it over TLS.
            let fetched = try await run(
                "/usr/bin/curl",
                [
                    "-sS", "--max-time", "10", "--cacert", TestEnvironment.caFile, "--doh-url", dohURL,
                    "https://origin.hd.test:\(TestEnvironment.originPort)/echo",
                ])
            #expect(fetched.stdout.hasPrefix("sni=origin.hd.test host=origin.hd.test"), "\(fetched.stdout)\(fetched.stderr)")

            // Our own library with the daemon as its DoH upstream: the CNAME chain and the address.
            let lookup = try await CLI.run([
                "lookup", "--doh", dohURL, "--ca-file", TestEnvironment.caFile, "--allow-private",
                "--json", "alias.hd.test",
            ])
            #expect(lookup.status == 0, "\(lookup.stderr)")
            let object = try #require(try lookup.jsonLines().first)
            #expect(object["canonical_name"] as? String == "www.hd.test", "\(lookup.stdout)")
            #expect(Set((object["addresses"] as? [[String: Any]] ?? []).compactMap { $0["ip"] as? String }) == ["198.18.0.10", "2001:2::10"])

            // The traffic shows in the metrics, with the upstream's circuit breaker closed.
            let queries = try await metric("hb_requests{http_route=\"/dns-query\",http_request_method=\"POST\",http_response_status_code=\"200\"}")
            #expect(queries ?? 0 >= 2)
            #expect(try await metric("httpdns_upstream_circuit_open{upstream=\"\(TestEnvironment.dohA)\"}") == 0)
        }

        /// base64url without padding (RFC 8484 §4.1) of a query for `name`.
        static func dnsParameter(_ name: String, _ type: RecordType, id: UInt16) throws -> String {
            let wire = DNSMessage(id: id, flags: 0x0100, questions: [.init(name: try DomainName(name), type: type)]).encode()
            return Data(wire).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }

        /// HTTP/2 is served at the frame level: many streams at once on one connection, answers from
        /// the cache and from lookups mixed, each with its own ID, and the other routes beside them.
        @Test func manyStreamsOnOneHTTP2ConnectionEachGetTheirOwnAnswer() async throws {
            defer { daemon.stop() }
            let names: [(String, RecordType, String)] = [
                ("www.hd.test", .a, "198.18.0.10"), ("v6only.hd.test", .aaaa, "2001:2::30"), ("alias.hd.test", .a, "198.18.0.10"),
                ("v4only.hd.test", .a, "198.18.0.40"), ("www.hd.test", .aaaa, "2001:2::10"),
            ]
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("h2-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            // 40 DoH GETs (each name 8 times: the first a lookup, the rest from the cache, all in
            // flight together), then the other routes.
            var arguments = [
                "-sS", "--http2", "--parallel", "--parallel-max", "50", "--cacert", TestEnvironment.caFile,
                "-H", "Authorization: Bearer \(Self.token)", "-w", "%{http_code} %{http_version} %{num_connects} %{size_download} %{url}\\n",
            ]
            var expected: [(file: String, id: UInt16, answer: String)] = []
            for round in 0..<8 {
                for (index, (name, type, answer)) in names.enumerated() {
                    let id = UInt16(round * 100 + index + 1)
                    let file = directory.appendingPathComponent("query-\(id)").path
                    arguments += ["-o", file, "\(dohURL)?dns=\(try Self.dnsParameter(name, type, id: id))"]
                    expected.append((file, id, answer))
                }
            }
            for path in ["/healthz", "/v1/resolve?host=www.hd.test&type=a", "/no-such-path"] {
                arguments += [
                    "-o", directory.appendingPathComponent(path.count == 8 ? "healthz" : path.hasPrefix("/v1") ? "resolve" : "404").path,
                    "https://127.0.0.1:\(Self.port)\(path)",
                ]
            }
            let result = try await run("/usr/bin/curl", arguments)
            let lines = result.stdout.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
            #expect(lines.count == 43, "\(result.stdout)\(result.stderr)")
            #expect(lines.allSatisfy { $0.count == 5 && $0[1] == "2" }, "every transfer over HTTP/2: \(result.stdout)")
            #expect(lines.compactMap { $0.count == 5 ? Int($0[2]) : nil }.reduce(0, +) <= 2, "the streams share the connection: \(result.stdout)")
            #expect(lines.map(\.first).filter { $0 == "200" }.count == 42, "\(result.stdout)")
            #expect(lines.map(\.first).filter { $0 == "404" }.count == 1, "\(result.stdout)")
            for (file, id, answer) in expected {
                let bytes = Array((try? Data(contentsOf: URL(fileURLWithPath: file))) ?? Data())
                guard let message = try? DNSMessage(decoding: bytes) else {
                    Issue.record("query \(id): \(bytes.count) bytes, not a DNS message: \(result.stdout)")
                    continue
                }
                #expect(message.id == id)
                #expect(message.answers.contains { $0.data == .address(IPAddress(answer)!) }, "query \(id): \(message.answers)")
            }
            #expect(try String(contentsOf: directory.appendingPathComponent("healthz"), encoding: .utf8) == "ok\n")
            #expect(try String(contentsOf: directory.appendingPathComponent("resolve"), encoding: .utf8).contains("198.18.0.10"))

            // A cached answer's headers: the media type, max-age from the TTL, a Date.
            let head = try await run(
                "/usr/bin/curl",
                [
                    "-sS", "--http2", "--cacert", TestEnvironment.caFile, "-D", "-", "-o", "/dev/null",
                    "\(dohURL)?dns=\(try Self.dnsParameter("www.hd.test", .a, id: 1))",
                ])
            let headers = head.stdout.lowercased()
            #expect(headers.hasPrefix("http/2 200"), "\(head.stdout)\(head.stderr)")
            #expect(headers.contains("content-type: application/dns-message"))
            #expect(headers.contains("cache-control: max-age="))
            #expect(headers.contains("date: "))
            // The fast path counts in the same metric series as the router.
            let gets = try await metric("hb_requests{http_route=\"/dns-query\",http_request_method=\"GET\",http_response_status_code=\"200\"}")
            #expect(gets == 41)
        }

        @Test func theBearerTokenAndTheLimitsAreEnforced() async throws {
            defer { daemon.stop() }
            #expect(try await daemon.get("/healthz").status == 200)
            let missing = try await daemon.get("/v1/status")
            #expect(missing.status == 401)
            #expect(missing.header("www-authenticate") == "Bearer realm=\"resolve-daemon\"")
            #expect(try await daemon.get("/metrics").status == 401)
            #expect(try await daemon.get("/v1/status", headers: ["Authorization: Bearer wrong-token-0123456789abc"]).status == 401)
            #expect(try await daemon.get("/v1/status", headers: ["Authorization: Basic \(Self.token)"]).status == 401)
            #expect(try await daemon.get("/v1/status", headers: authorized).status == 200)
            #expect(try await daemon.get("/v1/resolve?host=www.hd.test", headers: ["Authorization: bearer \(Self.token)"]).status == 200)
            let https = try await daemon.get("/v1/resolve?host=svcalias.hd.test&type=https", headers: authorized)
            #expect(https.status == 200)
            #expect(daemon.text(https).contains(#""alpn":["h2","http/1.1"],"port":8443"#), "\(daemon.text(https))")
            #expect(try await daemon.get("/v1/resolve?host=v4only.hd.test&type=https", headers: authorized).status == 404)
            #expect(try await daemon.get("/v1/resolve?host=www.hd.test&type=mx", headers: authorized).status == 400)
            // /dns-query is open unless protect_dns_query.
            let query = DNSMessage(id: 1, flags: 0x0100, questions: [.init(name: try DomainName("www.hd.test"), type: .a)]).encode()
            #expect(try await daemon.post("/dns-query", query).status == 200)

            // limits: the URL length (414) and the body size (413).
            let long = String(repeating: "a", count: 300)
            #expect(try await daemon.get("/v1/resolve?host=\(long)", headers: authorized).status == 414)
            // libcurl (7.88, HTTP/2) reads the 413 whether the body fits the stream's window (the
            // daemon lets it finish: 1 in 4 failed as "stream error" when a reset came with the
            // answer) or not (reset in a TLS record of its own after the answer: every one failed
            // when both were in one record).
            for _ in 0..<5 {
                #expect(try await daemon.post("/dns-query", [UInt8](repeating: 0, count: 700)).status == 413)
                #expect(try await daemon.post("/dns-query", [UInt8](repeating: 0, count: 3_000_000)).status == 413)
            }

            // A reload that protects /dns-query takes effect at once.
            try Self.config(protectDNSQuery: true).write(to: daemon.configFile, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try await daemon.waitForLog("configuration reloaded"), "\(daemon.logText)")
            #expect(try await daemon.post("/dns-query", query).status == 401)
            #expect(try await daemon.post("/dns-query", query, headers: authorized).status == 200)
            #expect(!daemon.logText.contains(Self.token), "the token must not be logged")
        }

        @Test func theStubAnswersOverUDPAndTCPAndTruncatesLargeAnswers() async throws {
            defer { daemon.stop() }
            let udp = try await dig(["+short", "www.hd.test", "A"])
            #expect(udp.stdout == "198.18.0.10\n", "\(udp.stdout)\(udp.stderr)")
            let tcp = try await dig(["+tcp", "+short", "v6only.hd.test", "AAAA"])
            #expect(tcp.stdout == "2001:2::30\n", "\(tcp.stdout)\(tcp.stderr)")
            let txt = try await dig(["+short", "www.hd.test", "TXT"])
            #expect(txt.stdout == "\"hd-test-txt\"\n", "\(txt.stdout)\(txt.stderr)")
            let absent = try await dig(["nope.hd.test", "A"])
            #expect(absent.stdout.contains("status: NXDOMAIN"), "\(absent.stdout)")
            // docs/threat-model.md F18: every UDP query over 64 bytes came out cut and was answered FORMERR.
            // dig's default query (EDNS, a cookie) for a long name, and one padded to 468 bytes.
            let long = try await dig(["a-thirty-character-label-here.and-another-long-label.www.hd.test", "A"])
            #expect(long.stdout.contains("status: NXDOMAIN"), "\(long.stdout)")
            let padded = try await dig(["+padding=468", "+short", "www.hd.test", "A"])
            #expect(padded.stdout == "198.18.0.10\n", "\(padded.stdout)\(padded.stderr)")

            // 40 addresses do not fit in 512 bytes: TC over UDP, the whole answer over TCP.
            let truncated = try await dig(["+noedns", "+ignore", "big.hd.test", "A"])
            #expect(truncated.stdout.contains(" tc"), "\(truncated.stdout)")
            #expect(truncated.stdout.contains("ANSWER: 0"), "\(truncated.stdout)")
            let retried = try await dig(["+noedns", "+short", "big.hd.test", "A"])
            #expect(retried.stdout.split(separator: "\n").count == 40, "\(retried.stdout)\(retried.stderr)")
            // With EDNS (dig offers 1232 bytes) it fits over UDP.
            let edns = try await dig(["+ignore", "big.hd.test", "A"])
            #expect(edns.stdout.contains("ANSWER: 40"), "\(edns.stdout)")
            // Now from the cache (answered on the event loop): truncated all the same without EDNS.
            let cachedTruncated = try await dig(["+noedns", "+ignore", "big.hd.test", "A"])
            #expect(cachedTruncated.stdout.contains(" tc"), "\(cachedTruncated.stdout)")
            #expect(cachedTruncated.stdout.contains("ANSWER: 0"), "\(cachedTruncated.stdout)")

            // Garbage is dropped and counted; the stub keeps serving.
            let before = try await metric("httpdns_dns_stub_malformed_total{transport=\"udp\"}") ?? 0
            let sent = try await run(
                "/usr/bin/python3",
                [
                    "-c",
                    """
                    import socket
                    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                    s.settimeout(1)
                    s.sendto(b"\\x12\\x34garbage", ("127.0.0.1", \(Self.dnsPort)))
                    try:
                        s.recvfrom(512)
                        print("answered")
                    except socket.timeout:
                        print("dropped")
                    """,
                ])
            #expect(sent.stdout == "dropped\n", "\(sent.stdout)\(sent.stderr)")
            #expect(try await metric("httpdns_dns_stub_malformed_total{transport=\"udp\"}") == before + 1)
            #expect(try await dig(["+short", "www.hd.test", "A"]).stdout == "198.18.0.10\n")
            #expect(try await metric("httpdns_dns_stub_queries_total{transport=\"tcp\"}") ?? 0 >= 2)
        }
    }
}

extension DaemonSuites {
    /// Requests in flight: the concurrency limit answers 503 at once, and SIGTERM lets a slow request
    /// finish before the daemon exits 0. The first upstream is a blackhole, so every uncached lookup
    /// takes the blackhole's share of the budget before the real one answers.
    @Suite(.serialized) struct DaemonDrainTests {
        static let port = 18495

        /// Over HTTP/1.1, and over HTTPS with HTTP/2 (the frame-level server: the slow request is a
        /// DoH query that needs a lookup, and SIGTERM sends GOAWAY while it is in flight).
        @Test(arguments: [false, true])
        func aSlowRequestFinishesAcrossSIGTERMAndTheLimitRejectsTheExcess(https: Bool) async throws {
            let blackhole = try BlackholeListener()
            let config = DaemonProcess.config(
                port: Self.port, upstreams: ["https://doh-a.test:\(blackhole.port)/dns-query", TestEnvironment.dohA],
                // Without hedging the blackholed first upstream holds the request for half the budget.
                extra: "timeout: 4\nhedging: false\nlimits: {max_concurrent_requests: 1}\n" + (https ? DaemonProcess.tlsConfig : ""))
            let daemon = try await DaemonProcess(config: config, port: Self.port, https: https)
            defer { daemon.stop() }

            let clock = ContinuousClock()
            let started = clock.now
            let slowPath =
                https ? "/dns-query?dns=\(try DaemonServingTests.dnsParameter("www.hd.test", .a, id: 5))" : "/v1/resolve?host=www.hd.test&type=a"
            async let slow = daemon.get(slowPath)
            try await Task.sleep(for: .milliseconds(500))
            // Over the limit: 503 at once, with Retry-After.
            let excess = try await daemon.get("/v1/resolve?host=v4only.hd.test&type=a")
            #expect(excess.status == 503)
            #expect(excess.header("retry-after") == "1")
            // SIGTERM while the slow one is still waiting on the blackhole.
            kill(daemon.process.processIdentifier, SIGTERM)
            let answer = try await slow
            #expect(answer.status == 200, "\(daemon.text(answer))")
            if https {
                #expect(answer.httpVersion == 20)
                let message = try DNSMessage(decoding: answer.body)
                #expect(message.id == 5 && message.answers.first?.data == .address(IPAddress("198.18.0.10")!), "\(message)")
            } else {
                #expect(daemon.text(answer).contains("198.18.0.10"))
            }
            #expect(clock.now - started > .milliseconds(900), "the request was meant to be slow")
            for _ in 0..<100 where daemon.process.isRunning { try await Task.sleep(for: .milliseconds(100)) }
            #expect(!daemon.process.isRunning)
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
        }

        @Test func theCacheIsSnapshottedWhileRunningAndRestoredAfterARestart() async throws {
            let cacheFile = FileManager.default.temporaryDirectory.appendingPathComponent("daemon-cache-\(UUID().uuidString).bin").path
            defer { try? FileManager.default.removeItem(atPath: cacheFile) }
            let config = DaemonProcess.config(port: Self.port, extra: "cache: {persist: \(cacheFile), persist_interval: 1}")
            let first = try await DaemonProcess(config: config, port: Self.port)
            defer { first.stop() }
            #expect(try await first.get("/v1/resolve?host=www.hd.test").status == 200)
            // Written by the interval, before any shutdown: a crash now would not lose it.
            var written = false
            for _ in 0..<40 where !written {
                try await Task.sleep(for: .milliseconds(100))
                written = (try? FileManager.default.attributesOfItem(atPath: cacheFile)[.size] as? Int).map { $0 > 0 } == true
            }
            #expect(written)
            kill(first.process.processIdentifier, SIGKILL)
            first.process.waitUntilExit()
            // A new daemon starts with it: the answer comes from the cache.
            let second = try await DaemonProcess(config: config, port: Self.port)
            defer { second.stop() }
            let lookup = second.text(try await second.get("/v1/resolve?host=www.hd.test"))
            #expect(lookup.contains("\"source\":\"cache\""), "\(lookup)")
        }

        @Test func unusableTLSFilesAreAConfigErrorAtStart() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("daemon-tls-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let ca = TestEnvironment.root + "/.testenv/ca/"
            for (files, expected) in [
                ("{cert: /etc/hostname, key: \(ca)daemon.test.key}", "tls.cert: '/etc/hostname' is not a PEM certificate chain"),
                ("{cert: \(ca)daemon.test.pem, key: \(ca)origin.hd.test.key}", "is the key the certificate's?"),
            ] {
                let file = directory.appendingPathComponent("c.yaml")
                try DaemonProcess.config(port: Self.port, extra: "tls: \(files)").write(to: file, atomically: true, encoding: .utf8)
                let output = try await CLI.run(["daemon", "--config", file.path])
                #expect(output.status == 2)
                #expect(output.stderr.contains(expected), "\(output.stderr)")
            }
        }
    }
}
