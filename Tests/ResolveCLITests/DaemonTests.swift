import AddressProbing
import CurlSupport
import DNSCore
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `resolve daemon` as a real process against the loopback DoH server, dnsmasq and nginx, queried
    /// over HTTP by libcurl (to 127.0.0.1: no name is resolved by anyone but the daemon).
    @Suite(.serialized) struct DaemonTests {
        static let port = 18491
        let daemon: DaemonProcess
        var process: Process { daemon.process }
        var configFile: URL { daemon.configFile }
        var logText: String { daemon.logText }

        static func config(watch: [String], extra: String = "") -> String {
            DaemonProcess.config(port: port, watch: watch, extra: extra)
        }

        init() async throws {
            daemon = try await DaemonProcess(config: Self.config(watch: ["origin.hd.test", "bank.hd.test"]), port: Self.port)
        }

        @discardableResult
        func stop() -> Int32? { daemon.stop() }

        func get(_ path: String) async throws -> CurlResponse { try await daemon.get(path) }

        func post(_ path: String, _ body: [UInt8], type: String = "application/dns-message") async throws -> CurlResponse {
            try await daemon.post(path, body, type: type)
        }

        func text(_ response: CurlResponse) -> String { String(decoding: response.body, as: UTF8.self) }

        func query(_ name: String, _ type: RecordType, id: UInt16) throws -> [UInt8] {
            DNSMessage(id: id, flags: 0x0100, questions: [DNSMessage.Question(name: try DomainName(name), type: type)]).encode()
        }

        /// Waits until `condition` holds on /v1/status (watch checks run every second).
        func waitForStatus(_ condition: (String) -> Bool) async throws -> String {
            var last = ""
            for _ in 0..<100 {
                last = text(try await get("/v1/status"))
                if condition(last) { return last }
                try await Task.sleep(for: .milliseconds(100))
            }
            return last
        }

        @Test func theHTTPAPIAndTheDoHEndpointAnswerFromTheEngine() async throws {
            defer { stop() }
            #expect(text(try await get("/healthz")) == "ok\n")

            let lookup = try await get("/v1/resolve?host=www.hd.test&type=a")
            #expect(lookup.status == 200)
            let object = try #require(try JSONSerialization.jsonObject(with: Data(lookup.body)) as? [String: Any])
            #expect(object["host"] as? String == "www.hd.test")
            #expect((object["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "198.18.0.10")
            #expect(try await get("/v1/resolve?host=nope.hd.test").status == 404)
            #expect(try await get("/v1/resolve?host=bad..name").status == 400)
            #expect(try await get("/v1/resolve").status == 400)
            #expect(try await get("/v1/resolve?host=www.hd.test&type=mx").status == 400)

            // RFC 8484 POST: the ID echoed, the address with its TTL, max-age = the smallest TTL.
            let posted = try await post("/dns-query", try query("alias.hd.test", .a, id: 0x4242))
            #expect(posted.status == 200)
            #expect(posted.header("content-type") == "application/dns-message")
            let message = try DNSMessage(decoding: posted.body)
            #expect(message.id == 0x4242)
            #expect(message.isResponse && message.responseCode == .noError)
            #expect(message.answers.contains { $0.type == .cname })
            let address = try #require(message.answers.first { $0.type == .a })
            #expect(address.data == .address(IPAddress("198.18.0.10")!))
            #expect(address.ttl <= 300 && address.ttl > 0)
            let maxAge = try #require(posted.header("cache-control"))
            #expect(maxAge == "max-age=\(message.answers.map(\.ttl).min()!)")

            // GET with base64url (no padding).
            let wire = try query("v6only.hd.test", .aaaa, id: 7)
            let encoded = Data(wire).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let got = try await get("/dns-query?dns=\(encoded)")
            let answer = try DNSMessage(decoding: got.body)
            #expect(answer.id == 7)
            #expect(answer.answers.first?.data == .address(IPAddress("2001:2::30")!))
            // NXDOMAIN as such.
            let absent = try DNSMessage(decoding: try await post("/dns-query", try query("nope.hd.test", .a, id: 9)).body)
            #expect(absent.responseCode == .nameError)

            // Bad requests get their status codes, and the daemon keeps serving.
            #expect(try await post("/dns-query", [1, 2, 3]).status == 400)
            #expect(try await post("/dns-query", Array("x".utf8), type: "text/plain").status == 415)
            #expect(try await post("/dns-query", [UInt8](repeating: 0, count: 70_000)).status == 413)
            #expect(try await get("/dns-query?dns=***").status == 400)
            #expect(try await get("/dns-query").status == 400)
            #expect(try await get("/no-such-path").status == 404)
            let put = try await CurlEngine.shared.perform(
                CurlRequest(
                    url: "http://127.0.0.1:\(Self.port)/dns-query", method: "PUT",
                    body: [1], protocols: "http"))
            #expect(put.status == 405)
            #expect(put.header("allow") == "GET, POST")
            #expect(text(try await get("/healthz")) == "ok\n")
        }

        @Test func watchedHostsGetVerdictsRankedAddressesAndMetrics() async throws {
            defer { stop() }
            let status = try await waitForStatus { $0.contains("\"hijacked\"") && $0.contains("\"consistent\"") }
            let object = try #require(try JSONSerialization.jsonObject(with: Data(status.utf8)) as? [String: Any])
            #expect(object["ready"] as? Bool == true)
            let hosts = try #require(object["hosts"] as? [[String: Any]])
            #expect(hosts.map { $0["host"] as? String } == ["origin.hd.test", "bank.hd.test"])
            #expect(hosts[0]["verdict"] as? String == "consistent")
            #expect(hosts[1]["verdict"] as? String == "hijacked")
            #expect((hosts[1]["reason"] as? String)?.contains("untrusted_certificate") == true)
            let ranked = try #require(hosts[1]["addresses"] as? [[String: Any]])
            #expect(ranked.first?["ip"] as? String == "127.0.0.4")
            #expect(ranked.first?["healthy"] as? Bool == true)
            #expect((ranked.first?["rtt_ms"] as? Double ?? 0) > 0)
            #expect(try await get("/readyz").status == 200)

            let metrics = text(try await get("/metrics"))
            #expect(metrics.contains("httpdns_watch_verdict{host=\"bank.hd.test\",verdict=\"hijacked\"} 1"), "\(metrics.prefix(2000))")
            #expect(metrics.contains("httpdns_watch_verdict{host=\"origin.hd.test\",verdict=\"consistent\"} 1"))
            #expect(metrics.contains("httpdns_probes_total{result=\"untrusted_certificate\"}"))
            #expect(logText.contains("verdict changed") && logText.contains("bank.hd.test"))
        }

        @Test func sighupReloadsAValidFileAndKeepsTheOldOneOnAnInvalidOne() async throws {
            defer { stop() }
            _ = try await waitForStatus { $0.contains("\"bank.hd.test\"") }
            // Invalid: logged with the line and key, the old configuration keeps serving.
            try (Self.config(watch: ["origin.hd.test"]) + "\nbogus_key: 1\n").write(to: configFile, atomically: true, encoding: .utf8)
            kill(process.processIdentifier, SIGHUP)
            var logged = false
            for _ in 0..<50 where !logged {
                logged = logText.contains("NOT reloaded")
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(logged, "\(logText)")
            #expect(logText.contains("bogus_key"))
            #expect(text(try await get("/v1/status")).contains("bank.hd.test"))
            // Valid: the new watch list replaces the old one.
            try Self.config(watch: ["cdn.hd.test"]).write(to: configFile, atomically: true, encoding: .utf8)
            kill(process.processIdentifier, SIGHUP)
            let status = try await waitForStatus { $0.contains("cdn.hd.test") && !$0.contains("bank.hd.test") && $0.contains("\"consistent\"") }
            #expect(status.contains("\"host\":\"cdn.hd.test\""), "\(status)")
            #expect(!status.contains("bank.hd.test"))
            // SIGTERM: drained, exit 0.
            let exit = stop()
            #expect(exit == 0, "\(logText)")
        }
    }
}
