import TestSupport
import Testing

@testable import DNSCore

/// DDR (RFC 9462): the SVCB records a resolver advertises, their wire form read back, and what a
/// client makes of hostile or unusable ones.
@Suite struct ResolverDiscoveryTests {
    let name = try! DomainName("dns.example.test")

    @Test func theSpecialUseZoneCoversItsNamesOnly() throws {
        #expect(ResolverDiscovery.name.description == "_dns.resolver.arpa")
        #expect(ResolverDiscovery.isSpecialUse(ResolverDiscovery.name))
        #expect(ResolverDiscovery.isSpecialUse(try DomainName("resolver.arpa")))
        #expect(ResolverDiscovery.isSpecialUse(try DomainName("x._dns.RESOLVER.arpa")))
        #expect(!ResolverDiscovery.isSpecialUse(try DomainName("myresolver.arpa")))
        #expect(!ResolverDiscovery.isSpecialUse(try DomainName("arpa")))
        #expect(!ResolverDiscovery.isSpecialUse(try DomainName("resolver.arpa.test")))
    }

    @Test func theAdvertisementEncodesAndDecodesBack() throws {
        let records = ResolverDiscovery.advertisement(
            name: name, doh: .init(port: 8443, address: IPAddress("192.0.2.53")), dot: .init(port: 853, address: IPAddress("2001:db8::53")))
        #expect(records.count == 2)
        let decoded = try records.map { try ServiceBinding(rdata: $0.rdata) }
        #expect(decoded == records)
        #expect(decoded[0].priority == 1 && decoded[0].target == name)
        #expect(decoded[0].alpn == ["h2", "http/1.1"] && decoded[0].port == 8443 && decoded[0].dohPath == "/dns-query{?dns}")
        #expect(decoded[0].ipv4Hints == [IPAddress("192.0.2.53")!] && decoded[0].ipv6Hints.isEmpty)
        #expect(decoded[1].priority == 2 && decoded[1].alpn == ["dot"] && decoded[1].port == 853 && decoded[1].dohPath == nil)
        #expect(decoded[1].ipv6Hints == [IPAddress("2001:db8::53")!])
        // What dig prints for it: 1 dns.example.test. alpn="h2,http/1.1" port=8443 ipv4hint=192.0.2.53 dohpath=/dns-query{?dns}
        #expect(ServiceBinding.Parameter.name(of: 7) == "dohpath")
        // Only the DoT listener, on every address: no hint.
        let dotOnly = ResolverDiscovery.advertisement(name: name, doh: nil, dot: .init(port: 853))
        #expect(dotOnly.count == 1 && dotOnly[0].ipv4Hints.isEmpty && dotOnly[0].ipv6Hints.isEmpty && dotOnly[0].priority == 2)
        #expect(ResolverDiscovery.advertisement(name: name, doh: nil, dot: nil).isEmpty)
    }

    @Test func theEncoderWritesParametersInKeyOrderAndLeavesOutWhatCannotBeSaid() throws {
        let record = ServiceBinding(
            priority: 3, target: name,
            parameters: [
                .port(53), .ipv4Hint([IPAddress("192.0.2.1")!, IPAddress("2001:db8::1")!]), .alpn(["dot", "", String(repeating: "x", count: 256)]),
            ])
        #expect(record.parameters.map(\.key) == [1, 3, 4])
        let decoded = try ServiceBinding(rdata: record.rdata)
        #expect(decoded.alpn == ["dot"])
        #expect(decoded.ipv4Hints == [IPAddress("192.0.2.1")!])
        #expect(decoded.port == 53)
    }

    /// Property: any ServiceMode record the encoder is given decodes back to itself (5,000 random
    /// records of every parameter kind, unknown keys included).
    @Test func everyEncodedRecordDecodesBackToItself() throws {
        var rng = SplitMix64(state: 9462)
        let targets = [DomainName.root, name, try DomainName("a.b.c.d.example.test")]
        for _ in 0..<5_000 {
            var parameters: [ServiceBinding.Parameter] = []
            func maybe() -> Bool { Bool.random(using: &rng) }
            func bytes(_ range: ClosedRange<Int>) -> [UInt8] {
                (0..<Int.random(in: range, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            }
            if maybe() {
                parameters.append(
                    .alpn(
                        (0..<Int.random(in: 1...4, using: &rng)).map { _ in
                            String(
                                (0..<Int.random(in: 1...12, using: &rng)).map { _ in
                                    Character(Unicode.Scalar(UInt8.random(in: 0x21...0x7e, using: &rng)))
                                })
                        }))
            }
            if maybe() { parameters.append(.noDefaultALPN) }
            if maybe() { parameters.append(.port(UInt16.random(in: 0...65535, using: &rng))) }
            if maybe() {
                parameters.append(
                    .ipv4Hint((0..<Int.random(in: 1...3, using: &rng)).map { _ in .v4(UInt32.random(in: 0...UInt32.max, using: &rng)) }))
            }
            if maybe() { parameters.append(.ech(bytes(1...40))) }
            if maybe() {
                parameters.append(
                    .ipv6Hint((0..<Int.random(in: 1...2, using: &rng)).map { _ in .v6(UInt64.random(in: 0...UInt64.max, using: &rng), 1) }))
            }
            if maybe() { parameters.append(ServiceBinding.dohPath("/p\(UInt16.random(in: 0...999, using: &rng)){?dns}")) }
            if maybe() { parameters.append(.unknown(key: UInt16.random(in: 8...65534, using: &rng), value: bytes(0...30))) }
            if maybe(), !parameters.isEmpty {
                let keys = Set(parameters.map(\.key)).filter { $0 != 0 }.sorted()
                if !keys.isEmpty { parameters.append(.mandatory(keys)) }
            }
            let record = ServiceBinding(
                priority: UInt16.random(in: 1...65535, using: &rng), target: targets[Int.random(in: 0..<targets.count, using: &rng)],
                parameters: parameters)
            let decoded = try ServiceBinding(rdata: record.rdata)
            #expect(decoded == record, "\(record)")
        }
    }

    @Test func aClientTakesDoHAndDoTInPriorityOrder() throws {
        let records = ResolverDiscovery.advertisement(name: name, doh: .init(port: 443), dot: .init(port: 8853)).reversed()
        let (designations, skipped) = ResolverDiscovery.designations(Array(records))
        #expect(skipped.isEmpty)
        #expect(designations.map(\.transport) == [.doh(path: "/dns-query"), .dot])
        #expect(designations.map(\.port) == [443, 8853])
        #expect(designations.allSatisfy { $0.target == name && $0.hints.isEmpty })
        // One record offering both: two designations at its priority; defaults 443 and 853.
        let both = ServiceBinding(priority: 5, target: name, parameters: [.alpn(["h2", "dot"]), ServiceBinding.dohPath("/q{?dns}")])
        let (two, none) = ResolverDiscovery.designations([both])
        #expect(none.isEmpty)
        #expect(two.map(\.transport) == [.doh(path: "/q"), .dot] && two.map(\.port) == [443, 853] && two.allSatisfy { $0.priority == 5 })
    }

    @Test func unusableRecordsAreSkippedWithTheirReason() throws {
        let alias = ServiceBinding(priority: 0, target: name, parameters: [])
        let owner = ServiceBinding(priority: 1, target: .root, parameters: [.alpn(["dot"])])
        let noALPN = ServiceBinding(priority: 1, target: name, parameters: [.port(853)])
        let noPath = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["h2"])])
        let relative = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["h2"]), ServiceBinding.dohPath("dns-query{?dns}")])
        let noVariable = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["h2"]), ServiceBinding.dohPath("/dns-query")])
        let quic = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["doq"])])
        let notUTF8 = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["h2"]), .unknown(key: 7, value: [0x2f, 0xff, 0xfe])])
        let (designations, skipped) = ResolverDiscovery.designations([alias, owner, noALPN, noPath, relative, noVariable, quic, notUTF8])
        #expect(designations.isEmpty)
        #expect(skipped.count == 8)
        #expect(skipped[0].reason.contains("AliasMode"))
        #expect(skipped[1].reason.contains("'.'"))
        #expect(skipped.contains { $0.reason.contains("no alpn") })
        #expect(skipped.filter { $0.reason.contains("dohpath") }.count == 4)
        #expect(skipped.contains { $0.reason.contains("doq") })
        // A record with a bad dohpath but also dot: the DoT designation stands, the DoH one is skipped.
        let mixed = ServiceBinding(priority: 2, target: name, parameters: [.alpn(["h2", "dot"])])
        let (one, why) = ResolverDiscovery.designations([mixed])
        #expect(one.map(\.transport) == [.dot] && why.count == 1)
    }

    @Test func theTemplatesPathIsWhatComesBeforeItsVariable() {
        #expect(ResolverDiscovery.path(ofTemplate: "/dns-query{?dns}") == "/dns-query")
        #expect(ResolverDiscovery.path(ofTemplate: "/{?dns}") == "/")
        #expect(ResolverDiscovery.path(ofTemplate: "/p%20q:@!{?dns}") == "/p%20q:@!")
        // Only /PATH{?dns}, and nothing in PATH that would change the URL it becomes (F62-2, F62-4).
        for template in [
            "/a{?dns}b", "/a{?dn", "", "{?dns}", "dns-query{?dns}", "/a?b{?dns}", "/a#b{?dns}", "/a b{?dns}", "/a\r\n{?dns}", "/\u{1b}[2K{?dns}",
            "/a{?dns}{&x}",
        ] {
            #expect(ResolverDiscovery.path(ofTemplate: template) == nil, "\(template)")
        }
    }

    @Test func whatCameOverPlainDNSIsPrintedEscaped() {
        let record = ServiceBinding(priority: 1, target: name, parameters: [.alpn(["\u{1b}[2K\r verified"])])
        let reason = ResolverDiscovery.designations([record]).skipped.first?.reason ?? ""
        #expect(reason.contains("\\x1b[2K\\x0d verified") && !reason.contains("\u{1b}") && !reason.contains("\r"), "\(reason)")
    }

    /// A target becomes a URL's host and the TLS name: host names only (F62-2).
    @Test func targetsThatAreNoHostNameAreSkipped() throws {
        var wire: [UInt8] = []
        for label in ["evil", "test:1@127", "0", "0", "1"] { wire += [UInt8(label.utf8.count)] + Array(label.utf8) }
        let tricky = DomainName(uncheckedWire: wire + [0])
        let targets = [tricky, try DomainName("127.0.0.1"), try DomainName("1.2.3.4.5"), try DomainName("_dns.resolver.arpa")]
        let records = targets.map { ServiceBinding(priority: 1, target: $0, parameters: [.alpn(["dot"])]) }
        let (designations, skipped) = ResolverDiscovery.designations(records)
        #expect(designations.isEmpty)
        #expect(
            skipped.map(\.reason) == [
                "the target is not a host name", "the target is an IP address, not a name", "the target is an IP address, not a name",
                "the target is not a host name",
            ])
    }
}
