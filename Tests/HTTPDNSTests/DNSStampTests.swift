import DNSCore
import Foundation
import TestSupport
import Testing

@testable import HTTPDNS

/// DNS stamps: published stamps (Cloudflare's, Google's plain DNS, AdGuard's DNSCrypt, a DNSCrypt
/// relay, as public resolver lists carry them) decoded offline, stamps built here for the other
/// cases, and random bytes that must be refused without a crash.
@Suite struct DNSStampTests {
    /// `sdns://` + base64url of `bytes`.
    static func stamp(_ bytes: [UInt8]) -> String {
        "sdns://"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func lp(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }

    /// A DoH (0x02) or DoT (0x03) stamp.
    static func build(_ kind: UInt8, address: String, hashes: [[UInt8]] = [], host: String, path: String? = nil, bootstrap: [String] = []) -> String {
        var bytes: [UInt8] = [kind, 1, 0, 0, 0, 0, 0, 0, 0] + lp(address)
        if hashes.isEmpty {
            bytes.append(0)
        } else {
            for (index, hash) in hashes.enumerated() { bytes += [UInt8(hash.count) | (index < hashes.count - 1 ? 0x80 : 0)] + hash }
        }
        bytes += lp(host)
        if let path { bytes += lp(path) }
        for (index, ip) in bootstrap.enumerated() {
            bytes += [UInt8(ip.utf8.count) | (index < bootstrap.count - 1 ? 0x80 : 0)] + Array(ip.utf8)
        }
        return stamp(bytes)
    }

    @Test func publishedDoHStampsBecomeUpstreams() throws {
        let cloudflare = try DNSStamp("sdns://AgcAAAAAAAAABzEuMC4wLjEAEmRucy5jbG91ZGZsYXJlLmNvbQovZG5zLXF1ZXJ5")
        #expect(cloudflare.kind == .doh)
        #expect(cloudflare.properties == [.dnssec, .noLogs, .noFilter])
        #expect(cloudflare.address == IPAddress("1.0.0.1"))
        #expect(cloudflare.host == "dns.cloudflare.com")
        #expect(cloudflare.path == "/dns-query")
        #expect(cloudflare.port == 443)
        #expect(cloudflare.certificateHashes.isEmpty)
        let upstream = try UpstreamEndpoint(stamp: cloudflare)
        #expect(upstream.url == "https://dns.cloudflare.com/dns-query")
        #expect(upstream.bootstrap == [IPAddress("1.0.0.1")!])

        let v6 = try DNSStamp(
            "sdns://AgcAAAAAAAAAFlsyNjA2OjQ3MDA6NDcwMDo6MTExMV0AIDFkb3QxZG90MWRvdDEuY2xvdWRmbGFyZS1kbnMuY29tCi9kbnMtcXVlcnk")
        #expect(v6.address == IPAddress("2606:4700:4700::1111"))
        #expect(v6.host == "1dot1dot1dot1.cloudflare-dns.com")
        let security = try DNSStamp("sdns://AgMAAAAAAAAABzEuMC4wLjIAG3NlY3VyaXR5LmNsb3VkZmxhcmUtZG5zLmNvbQovZG5zLXF1ZXJ5")
        #expect(security.properties == [.dnssec, .noLogs])
        #expect(try UpstreamEndpoint(stamp: security).url == "https://security.cloudflare-dns.com/dns-query")
    }

    @Test func plainStampsAreReadButAreNotTrustedUpstreams() throws {
        let google = try DNSStamp("sdns://AAEAAAAAAAAABzguOC44Ljg")
        #expect(google.kind == .plain)
        #expect(google.address == IPAddress("8.8.8.8"))
        #expect(google.port == 53)
        #expect(google.properties == [.dnssec])
        #expect(try DNSStamp("sdns://AAcAAAAAAAAACTEyNy4wLjAuMQ").properties == [.dnssec, .noLogs, .noFilter])
        #expect(throws: DNSError.self) { try UpstreamEndpoint(stamp: google) }
    }

    @Test func otherProtocolsAreRefusedWithTheirName() throws {
        let cases = [
            (
                "sdns://AQIAAAAAAAAAFDE3Ni4xMDMuMTMwLjEzMDo1NDQzINErR_JS3PLCu_iZEIbq95zkSV2LFsigxDIuUso_OQhzIjIuZG5zY3J5cHQuZGVmYXVsdC5uczEuYWRndWFyZC5jb20",
                "DNSCrypt"
            ),
            ("sdns://gR9bMjYwNDo5YTAwOjIwMTA6YTBiYjo2Ojo1M106NDQz", "relay"),
            (Self.stamp([0x05, 0, 0, 0, 0, 0, 0, 0, 0] + Self.lp("odoh.test") + Self.lp("/dns-query")), "Oblivious"),
            (Self.stamp([0x04, 0, 0, 0, 0, 0, 0, 0, 0] + Self.lp("192.0.2.1") + [0] + Self.lp("doq.test")), "QUIC"),
        ]
        for (text, word) in cases {
            do {
                _ = try DNSStamp(text)
                Issue.record("\(word) stamp accepted")
            } catch {
                #expect(error.message.contains(word), "\(error.message)")
            }
        }
    }

    @Test func hashesPortsAndBootstrapAreRead() throws {
        let hash = [UInt8](repeating: 0xab, count: 32)
        let withHash = try DNSStamp(Self.build(2, address: "192.0.2.1:8443", hashes: [hash, hash], host: "doh.test", path: "/q"))
        #expect(withHash.certificateHashes == [hash, hash])
        #expect(withHash.port == 8443)
        // The hashes go with the endpoint (checked on each DoH or DoT connection, ResolveCLITests)...
        let hashed = try UpstreamEndpoint(stamp: withHash)
        #expect(hashed.certificateHashes == [hash, hash])
        #expect(hashed.url == "https://doh.test:8443/q")
        // ...and an endpoint whose transfers could not check them is refused, not taken unchecked.
        var json = try UpstreamEndpoint.json("https://json.test/resolve", bootstrap: ["192.0.2.1"])
        json.certificateHashes = [hash]
        do {
            try HTTPDNSConfiguration(upstreams: [json]).validate()
            Issue.record("a JSON upstream with certificate hashes was accepted")
        } catch {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains("DoH and DoT connections only"))
        }
        let noAddress = try DNSStamp(Self.build(2, address: "", host: "doh.test:444", path: "/dns-query", bootstrap: ["192.0.2.7", "2001:db8::7"]))
        #expect(noAddress.address == nil)
        #expect(noAddress.port == 444)
        let endpoint = try UpstreamEndpoint(stamp: noAddress)
        #expect(endpoint.url == "https://doh.test:444/dns-query")
        #expect(endpoint.bootstrap == [IPAddress("192.0.2.7")!, IPAddress("2001:db8::7")!])
        let dot = try DNSStamp(Self.build(3, address: "192.0.2.2", host: "dot.test"))
        #expect(dot.kind == .dot)
        #expect(dot.port == 853)
        let dotEndpoint = try UpstreamEndpoint(stamp: dot)
        #expect(dotEndpoint.kind == .dot)
        #expect(dotEndpoint.url == "tls://dot.test:853")
        #expect(dotEndpoint.bootstrap == [IPAddress("192.0.2.2")!])
        let hashes = [[UInt8](repeating: 7, count: 32), [UInt8](repeating: 9, count: 32)]
        let pinned = try UpstreamEndpoint(stamp: try DNSStamp(Self.build(3, address: "192.0.2.2:8853", hashes: hashes, host: "dot.test")))
        #expect(pinned.url == "tls://dot.test:8853")
        #expect(pinned.certificateHashes == hashes)
    }

    @Test func dotServersParse() throws {
        let cases: [(String, String?, String, Int)] = [
            ("dns.test", nil, "tls://dns.test:853", 853),
            ("tls://dns.test:8853", nil, "tls://dns.test:8853", 8853),
            ("127.0.0.1:18853", "doh-a.test", "tls://127.0.0.1:18853", 18853),
            ("::1", nil, "tls://[::1]:853", 853),
            ("[2001:db8::1]:5353", "dns.test", "tls://[2001:db8::1]:5353", 5353),
        ]
        for (text, tlsName, url, port) in cases {
            let endpoint = try UpstreamEndpoint.dot(text, bootstrap: ["192.0.2.1"], tlsName: tlsName)
            #expect(endpoint.kind == .dot)
            #expect(endpoint.url == url, "\(text)")
            #expect(endpoint.port == port, "\(text)")
            #expect(endpoint.tlsName == tlsName)
        }
        for text in ["", "tls://", "dns.test/path", "dns.test:0", "dns.test:99999", "https://dns.test", "bad..name"] {
            #expect(throws: DNSError.self, "\(text)") { try UpstreamEndpoint.dot(text) }
        }
        #expect(throws: DNSError.self) { try UpstreamEndpoint.dot("dns.test", tlsName: "bad..name") }
    }

    @Test func brokenStampsAreRefusedWithoutACrash() throws {
        for text in [
            "", "sdns://", "https://x", "sdns://!!!", Self.stamp([0x02]), Self.stamp([0x02, 0, 0, 0, 0, 0, 0, 0, 0, 40, 1]),
            Self.build(2, address: "192.0.2.1", host: "doh.test", path: "no-slash"),
            Self.build(2, address: "192.0.2.1", hashes: [[1, 2, 3]], host: "doh.test", path: "/"),
            Self.stamp([0x00, 0, 0, 0, 0, 0, 0, 0, 0] + Self.lp("192.0.2.1") + [9, 9]),
        ] {
            #expect(throws: DNSError.self, "\(text)") { try DNSStamp(text) }
        }
        var random = SplitMix64(state: 8)
        for _ in 0..<2_000 {
            let bytes = (0..<Int(random.next() % 80)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            _ = try? DNSStamp(Self.stamp(bytes))
        }
    }
}
