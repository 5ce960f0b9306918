import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The DoH upstream's own HTTP/2 connection meets a server without HTTP/2: Tests/Adversarial/fake_doh.py
/// speaks HTTP/1.1 over TLS and takes no ALPN, so the client's preface gets an HTTP/1.1 error back.
/// The lookup that found it out, and every one after it, goes over libcurl's HTTP/1.1 instead, GET
/// and POST alike. (BIND, unbound, nginx and the daemon, which speak HTTP/2, are every other DoH test.)
@Suite(.serialized) struct DoHUpstreamTests {
    func fakeServer() async throws -> (port: Int, pid: Int32, log: String) {
        let port = unusedLoopbackPort()
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("fake-doh-\(UUID().uuidString).log").path
        let ca = "\(TestEnvironment.root)/.testenv/ca"
        let pid = try #require(
            try await CLI.startDetached(
                [
                    "/usr/bin/python3", "\(TestEnvironment.root)/Tests/Adversarial/fake_doh.py", "--port", "\(port)", "--cert",
                    "\(ca)/doh-a.test.pem", "--key", "\(ca)/doh-a.test.key", "--mode", "ok",
                ], log: log))
        for _ in 0..<50 {
            let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(probe, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            close(probe)
            if connected == 0 { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        return (port, pid, log)
    }

    @Test func aServerWithoutHTTP2IsAskedOverHTTP1() async throws {
        try TestEnvironment.requireRunning()
        let server = try await fakeServer()
        defer {
            kill(server.pid, SIGKILL)
            try? FileManager.default.removeItem(atPath: server.log)
        }
        for method in ["get", "post"] {
            let output = try await CLI.run([
                "lookup", "--ca-file", TestEnvironment.caFile, "--json", "--doh", "https://doh-a.test:\(server.port)/dns-query",
                "--bootstrap", "doh-a.test=127.0.0.1", "--doh-method", method, "--timeout", "4", "a.hd.test", "b.hd.test",
            ])
            let lines = try output.jsonLines()
            #expect(output.status == 0, "\(method): \(output.stdout)\(output.stderr)")
            #expect(lines.count == 2)
            for line in lines {
                let addresses = ((line["addresses"] as? [[String: Any]]) ?? []).compactMap { $0["ip"] as? String }
                #expect(Set(addresses) == ["198.18.9.1", "2001:2::9:1"], "\(method): \(line)")
                #expect(line["source"] as? String == "doh")
            }
        }
    }
}
