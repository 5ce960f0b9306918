import Testing

@testable import DNSCore

@Suite struct DomainNameTests {
    @Test func foldsCaseAndDropsTheTrailingDot() throws {
        let name = try DomainName("API.Example.TEST.")
        #expect(name.description == "api.example.test")
        #expect(name == (try DomainName("api.example.test")))
        #expect(name.wire == [3] + Array("api".utf8) + [7] + Array("example".utf8) + [4] + Array("test".utf8) + [0])
        #expect(name.labelCount == 3)
    }

    @Test(arguments: [
        "", ".", "..", "a..test", ".a.test", "bad name.test", "-lead.test", "trail-.test", "a/b.test",
        "émoji.test", String(repeating: "a", count: 64) + ".test",
        (0..<50).map { _ in "abcd" }.joined(separator: "."),  // 249 characters, 254 wire octets: fine
        (0..<51).map { _ in "abcd" }.joined(separator: "."),  // 254 characters: too long
    ])
    func validatesNames(text: String) {
        let valid = text == "." || text == (0..<50).map { _ in "abcd" }.joined(separator: ".")
        if valid {
            #expect(throws: Never.self) { try DomainName(text) }
        } else {
            #expect { try DomainName(text) } throws: { ($0 as? DNSError)?.code == .invalidName }
        }
    }

    @Test func acceptsUnderscoresAndPunycode() throws {
        #expect(try DomainName("_dmarc.xn--bcher-kva.test").description == "_dmarc.xn--bcher-kva.test")
    }

    @Test func escapesUnprintableBytesFromTheWire() {
        let name = DomainName(uncheckedWire: [3, 0x61, 0x2e, 0x01, 4] + Array("test".utf8) + [0])
        #expect(name.description == "a\\046\\001.test")
    }
}

@Suite struct IPAddressTests {
    @Test(arguments: [
        ("192.0.2.1", "192.0.2.1"), ("0.0.0.0", "0.0.0.0"), ("255.255.255.255", "255.255.255.255"),
        ("2001:db8::1", "2001:db8::1"), ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"), ("::", "::"), ("::1", "::1"),
        ("[2001:db8::53]", "2001:db8::53"), ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
        ("2001:0:0:1:0:0:0:1", "2001:0:0:1::1"), ("::ffff:192.0.2.1", "::ffff:192.0.2.1"), ("::ffff:c000:201", "::ffff:192.0.2.1"),
        ("fe80::", "fe80::"),
    ])
    func parsesAndPrintsCanonically(input: String, canonical: String) throws {
        let address = try #require(IPAddress(input))
        #expect(address.description == canonical)
        #expect(IPAddress(address.description) == address)
        #expect(IPAddress(bytes: address.bytes) == address)
    }

    @Test(arguments: [
        "", "1.2.3", "1.2.3.4.5", "256.1.1.1", "01.2.3.4", "1.2.3.-4", "a.b.c.d", ":::", "1:2:3:4:5:6:7:8:9",
        "1::2::3", "12345::", "::g", "1:2:3:4:5:6:7:", "[::1", "www.hd.test", "1.2.3.4 ",
    ])
    func rejectsMalformedAddresses(input: String) {
        #expect(IPAddress(input) == nil)
    }

    @Test(arguments: [
        ("10.1.2.3", "private"), ("172.31.255.255", "private"), ("192.168.0.1", "private"), ("127.0.0.1", "loopback"),
        ("169.254.1.1", "link-local"), ("100.64.0.1", "CGNAT"), ("0.0.0.0", "unspecified"), ("224.0.0.1", "multicast"),
        ("192.0.2.5", "documentation"), ("198.51.100.5", "documentation"), ("203.0.113.5", "documentation"),
        ("255.255.255.255", "reserved"), ("::1", "loopback"), ("::", "unspecified"), ("fd00::1", "unique-local"),
        ("fe80::1", "link-local"), ("ff02::1", "multicast"), ("2001:db8::1", "documentation"), ("3fff::1", "documentation"),
        ("::ffff:10.0.0.1", "IPv4-mapped private"), ("64:ff9b::7f00:1", "NAT64 loopback"),
        // docs/threat-model.md F17: dialled over IPv6, they reach an IPv4 address behind a gateway.
        ("::7f00:1", "IPv4-compatible"), ("::10.0.0.1", "IPv4-compatible"), ("::8.8.8.8", "IPv4-compatible"),
        ("::ffff:0:7f00:1", "IPv4-translated loopback"), ("64:ff9b:1::7f00:1", "NAT64 local-use"), ("64:ff9b:1:ffff::1", "NAT64 local-use"),
        ("2002:7f00:1::1", "6to4 loopback"), ("2002:c0a8:101::1", "6to4 private"), ("2002:a9fe:0101::", "6to4 link-local"),
    ])
    func classifiesSpecialRanges(input: String, range: String) {
        #expect(IPAddress(input)?.specialPurposeRange == range)
    }

    @Test(arguments: [
        "8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "198.18.0.10", "2001:2::10", "2606:4700::1111", "::ffff:8.8.8.8",
        "2002:808:808::1", "::ffff:0:808:808", "64:ff9b:2::1",
    ])
    func globalAddressesAreNotSpecial(input: String) {
        #expect(IPAddress(input)?.specialPurposeRange == nil)
    }
}

struct EndpointParsingTests {
    @Test func spellingsOfServersAndListeners() {
        #expect(IPAddress.endpoint("127.0.0.1").map { "\($0.address) \($0.port.map(String.init) ?? "-")" } == "127.0.0.1 -")
        #expect(IPAddress.endpoint("::1").map { "\($0.address) \($0.port.map(String.init) ?? "-")" } == "::1 -")
        #expect(IPAddress.endpoint("127.0.0.1:8053").map { "\($0.address) \($0.port ?? 0)" } == "127.0.0.1 8053")
        // A bracketed IPv6 without a port is the address (IPAddress accepts the brackets).
        #expect(IPAddress.endpoint("[::1]").map { "\($0.address) \($0.port.map(String.init) ?? "-")" } == "::1 -")
        #expect(IPAddress.endpoint("[::1]:5353").map { "\($0.address) \($0.port ?? 0)" } == "::1 5353")
        for bad in ["", "host:53", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:", "[::1]x53", "[127.0.0.1]:53", "1.2.3.4:5:6", "[::1]:port"] {
            #expect(IPAddress.endpoint(bad) == nil, "\(bad)")
        }
    }
}

/// Names in presentation form as DNS writes them (F26 of redteam-4: a canonical name with `*` or an
/// escaped byte is still a name a block list must see).
@Suite struct PresentationNameTests {
    @Test func everyNameDescriptionWritesReadsBack() throws {
        let names: [[UInt8]] = [
            [3, 0x61, 0x2a, 0x62, 7] + Array("tracker".utf8) + [4] + Array("test".utf8) + [0],
            [3, 0x01, 0x2e, 0x5c, 4] + Array("test".utf8) + [0],
            [1, 0x20, 0],
            [63] + Array(repeating: 0xff, count: 63) + [0],
            [0],
        ]
        for wire in names {
            let name = DomainName(uncheckedWire: wire)
            #expect(try DomainName(presentation: name.description).wire == wire, "\(name)")
        }
        #expect(try DomainName(presentation: "A*B.Tracker.TEST.").description == "a*b.tracker.test")
        #expect(try DomainName(presentation: "www.hd.test") == DomainName("www.hd.test"))
    }

    @Test func malformedPresentationIsRefused() {
        for text in [
            "a..b", ".a", "a\\", "a\\25", "a\\256.test", String(repeating: "a", count: 64) + ".test",
            Array(repeating: String(repeating: "a", count: 63), count: 5).joined(separator: "."),
        ] {
            #expect(throws: DNSError.self, "\(text)") { try DomainName(presentation: text) }
        }
    }
}
