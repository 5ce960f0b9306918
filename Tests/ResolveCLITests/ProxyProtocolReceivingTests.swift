import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// PROXY protocol v2 on every listener (`trusted_proxies:`): a trusted proxy's header names the
    /// client that the query log (and the rate limit, and access rules) sees, over UDP, TCP, DoT
    /// and DoH; the same header from anyone else is never read (the query fails as the garbage it
    /// is, and no log line names the claimed client); a trusted proxy's connection without a whole
    /// header, or with a malformed one, is refused and counted. The client is Tests/Fakes/proxy_client.py.
    @Suite(.serialized) struct ProxyProtocolReceivingTests {
        static let port = 18571
        static let dotPort = 18572
        static let dnsPort = 18573

        static func ask(_ transport: String, from source: String, header: String) async throws -> [String: Any] {
            let port = transport == "doh" ? Self.port : transport == "dot" ? Self.dotPort : Self.dnsPort
            let output = try await CLI.run(
                [
                    "\(TestEnvironment.root)/Tests/Fakes/proxy_client.py", transport, source, "\(port)", header, "www.hd.test",
                    TestEnvironment.caFile, "localhost",
                ], executable: "/usr/bin/python3")
            let object = try JSONSerialization.jsonObject(with: Data(output.stdout.utf8)) as? [String: Any]
            return try #require(object, "\(output.stdout)\(output.stderr)")
        }

        @Test func theClientATrustedProxyNamesIsTheOneLoggedOnEveryTransport() async throws {
            try TestEnvironment.requireRunning()
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-v2-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let log = directory.appendingPathComponent("queries.jsonl").path
            let daemon = try await DaemonProcess(
                config: """
                    upstreams:
                      - {doh: "\(TestEnvironment.dohA)", bootstrap: [127.0.0.1]}
                    ca_file: \(TestEnvironment.caFile)
                    allow_private: true
                    system_dns: ["127.0.0.1:\(TestEnvironment.systemDNSPort)"]
                    listen: "127.0.0.1:\(Self.port)"
                    \(DaemonProcess.tlsConfig)
                    dot_listen: "127.0.0.1:\(Self.dotPort)"
                    dns_listen: "127.0.0.1:\(Self.dnsPort)"
                    trusted_proxies: [127.0.0.5/32, "::1"]
                    query_log: {file: \(log)}
                    """, port: Self.port, https: true)
            defer { daemon.stop() }

            let transports = ["udp", "tcp", "dot", "doh"]
            // A trusted proxy (127.0.0.5; 127.0.0.1, where the test asks /healthz and /metrics, is not
            // one) relaying 198.51.100.7 and 2001:db8::7: answered, logged as them.
            for transport in transports {
                for client in ["198.51.100.7:4242", "[2001:db8::7]:53"] {
                    let header = client.hasPrefix("[") ? "2001:db8::7:53" : client
                    let reply = try await Self.ask(transport, from: "127.0.0.5", header: header)
                    #expect(reply["rcode"] as? String == "NOERROR", "\(transport) \(client): \(reply)")
                    #expect(reply["answers"] as? [String] == ["198.18.0.10"], "\(transport) \(client): \(reply)")
                }
            }
            // The same header from 127.0.0.2, which is not trusted: never read, so no answer (UDP
            // reads it as a malformed query; TCP as a length; TLS as no handshake).
            for transport in transports {
                let reply = try await Self.ask(transport, from: "127.0.0.2", header: "198.51.100.8:4242")
                #expect(reply["rcode"] as? String != "NOERROR", "\(transport): \(reply)")
                #expect(reply["answers"] as? [String] != ["198.18.0.10"], "\(transport): \(reply)")
            }
            // 127.0.0.2 without a header: an ordinary client.
            let plain = try await Self.ask("udp", from: "127.0.0.2", header: "none")
            #expect(plain["rcode"] as? String == "NOERROR", "\(plain)")
            // A trusted proxy without a header, with version 1's text one, or with a broken v2 one:
            // refused on every transport and counted.
            for transport in transports {
                for header in ["none", "v1", "bad"] {
                    let reply = try await Self.ask(transport, from: "127.0.0.5", header: header)
                    #expect(reply["rcode"] == nil && reply["error"] != nil, "\(transport) \(header): \(reply)")
                }
            }
            let metrics = daemon.text(try await daemon.get("/metrics"))
            let rejected = metrics.split(separator: "\n").first { $0.hasPrefix("httpdns_proxy_protocol_rejected_total ") }
            #expect(rejected.flatMap { Double($0.split(separator: " ").last ?? "") } == 12, "\(rejected ?? "none")")

            // What the query log saw: the named clients, each on its transport, and 127.0.0.2 plain.
            var lines: [[String: Any]] = []
            for _ in 0..<30 {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                lines = text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                if lines.count >= 9 { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            let seen = lines.map { "\($0["client"] as? String ?? "-") \($0["transport"] as? String ?? "-")" }
            for transport in transports {
                #expect(seen.contains("198.51.100.7 \(transport)") && seen.contains("2001:db8::7 \(transport)"), "\(transport): \(seen)")
            }
            #expect(seen.contains("127.0.0.2 udp"), "\(seen)")
            #expect(!seen.contains { $0.hasPrefix("198.51.100.8") || $0.hasPrefix("198.51.100.9") }, "an untrusted header named the client: \(seen)")
            #expect(!seen.contains { $0.hasPrefix("127.0.0.5 ") }, "a trusted proxy's query was logged as the proxy: \(seen)")
            // The refusals are logged with the peer (at most every 10 s: the first one).
            #expect(daemon.logText.contains("from 127.0.0.5"), "\(daemon.logText.suffix(2000))")

            // trusted_proxies takes effect at a restart: every reload that changes it says so, the
            // second one too (F63-1), and the listeners keep the list they started with.
            let original = try String(contentsOf: daemon.configFile, encoding: .utf8)
            for (round, list) in ["[127.0.0.6/32]", "[127.0.0.7/32]"].enumerated() {
                try original.replacingOccurrences(of: "[127.0.0.5/32, \"::1\"]", with: list)
                    .write(to: daemon.configFile, atomically: true, encoding: .utf8)
                kill(daemon.process.processIdentifier, SIGHUP)
                for _ in 0..<50
                where daemon.logText.components(separatedBy: "trusted_proxies changed: takes effect after a restart").count < round + 2 {
                    try await Task.sleep(for: .milliseconds(100))
                }
                #expect(
                    daemon.logText.components(separatedBy: "trusted_proxies changed: takes effect after a restart").count == round + 2,
                    "reload \(round + 1)")
            }
            let still = try await Self.ask("udp", from: "127.0.0.5", header: "198.51.100.7:4242")
            #expect(still["rcode"] as? String == "NOERROR", "\(still)")
        }
    }
}
