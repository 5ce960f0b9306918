import Foundation
import TestSupport
import Testing

/// DNS stamps from the command line and the config file: a DoH stamp for the loopback BIND
/// (doh-a.test at 127.0.0.1) resolves as `--doh` with `--bootstrap` does; a plain stamp names a
/// forward zone's server; a DNSCrypt stamp is refused with its protocol's name.
@Suite struct StampTests {
    /// A DoH stamp: protocol 2, no properties, the address, no hashes, the host, the path.
    static func doh(address: String, host: String, path: String) -> String {
        func lp(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }
        let bytes: [UInt8] = [2, 0, 0, 0, 0, 0, 0, 0, 0] + lp(address) + [0] + lp(host) + lp(path)
        return "sdns://"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    @Test func aStampResolvesFromTheCommandLineAndTheFile() async throws {
        try TestEnvironment.requireRunning()
        let stamp = Self.doh(address: "127.0.0.1:\(TestEnvironment.dohPort)", host: "doh-a.test", path: "/dns-query")
        let lookup = try await CLI.run([
            "lookup", "--stamp", stamp, "--ca-file", TestEnvironment.caFile, "--allow-private", "--json", "--type", "a", "www.hd.test",
        ])
        #expect(lookup.status == 0, "\(lookup.stderr)")
        let object = try #require(try lookup.jsonLines().first)
        #expect(object["upstream"] as? String == "https://doh-a.test:\(TestEnvironment.dohPort)/dns-query", "\(lookup.stdout)")
        #expect((object["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "198.18.0.10")

        // In a file: a DoH stamp as a trusted upstream, a plain stamp as a forward zone's server
        // (dnsmasq, the test environment's "system" DNS, answers system-only.hd.test itself).
        func plain(_ address: String) -> String {
            let bytes: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(address.utf8.count)] + Array(address.utf8)
            return "sdns://"
                + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        }
        let (directory, file) = try CLI.writeConfig(
            """
            upstreams:
              - stamp: "\(stamp)"
            ca_file: \(TestEnvironment.caFile)
            allow_private: true
            forward:
              - zones: [system-only.hd.test]
                upstreams: [{stamp: "\(plain("127.0.0.1:\(TestEnvironment.systemDNSPort)"))"}]
            """)
        defer { try? FileManager.default.removeItem(at: directory) }
        let fromFile = try await CLI.run(["lookup", "--config", file.path, "--json", "--type", "a", "www.hd.test", "system-only.hd.test"])
        let lines = try fromFile.jsonLines()
        #expect((lines.first?["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "198.18.0.10", "\(fromFile.stdout)\(fromFile.stderr)")
        #expect(lines.last?["upstream"] as? String == "dns://127.0.0.1:\(TestEnvironment.systemDNSPort)", "\(fromFile.stdout)")
        #expect((lines.last?["addresses"] as? [[String: Any]])?.first?["ip"] as? String == "198.18.77.77", "\(fromFile.stdout)")

        let dnscrypt = try await CLI.run([
            "lookup", "--stamp",
            "sdns://AQIAAAAAAAAAFDE3Ni4xMDMuMTMwLjEzMDo1NDQzINErR_JS3PLCu_iZEIbq95zkSV2LFsigxDIuUso_OQhzIjIuZG5zY3J5cHQuZGVmYXVsdC5uczEuYWRndWFyZC5jb20",
            "www.hd.test",
        ])
        #expect(dnscrypt.status != 0)
        #expect(dnscrypt.stderr.contains("DNSCrypt"), "\(dnscrypt.stderr)")
    }
}
