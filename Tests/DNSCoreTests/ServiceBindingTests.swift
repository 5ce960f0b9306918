import TestSupport
import Testing

@testable import DNSCore

/// SVCB/HTTPS RDATA (RFC 9460), against the wire forms of its Appendix D examples and its failure cases.
@Suite struct ServiceBindingTests {
    static func name(_ labels: String...) -> [UInt8] {
        labels.flatMap { [UInt8($0.utf8.count)] + Array($0.utf8) } + [0]
    }

    @Test func aliasModeIgnoresParameters() throws {
        let alias = try ServiceBinding(rdata: [0, 0] + Self.name("foo", "example", "com"))
        let foo = try DomainName("foo.example.com")
        #expect(alias.isAlias && alias.target == foo && alias.parameters.isEmpty)
        let withParams = try ServiceBinding(rdata: [0, 0] + Self.name("foo", "example", "com") + [0, 3, 0, 2, 0, 53])
        #expect(withParams.parameters.isEmpty, "RFC 9460 §2.4.2: ignored in AliasMode")
    }

    @Test func serviceModeExamples() throws {
        let dot = try ServiceBinding(rdata: [0, 1, 0])
        #expect(dot.priority == 1 && dot.target == .root && dot.parameters.isEmpty)

        let port = try ServiceBinding(rdata: [0, 16] + Self.name("foo", "example", "com") + [0, 3, 0, 2, 0, 0x35])
        #expect(port.priority == 16 && port.port == 53)

        let unknown = try ServiceBinding(rdata: [0, 1] + Self.name("foo", "example", "com") + [0x02, 0x9b, 0, 5] + Array("hello".utf8))
        #expect(unknown.parameters == [.unknown(key: 667, value: Array("hello".utf8))])
        #expect(ServiceBinding.Parameter.name(of: 667) == "key667")

        let v6: [UInt8] =
            [0x20, 0x01, 0x0d, 0xb8] + Array(repeating: 0, count: 11) + [1]
            + [0x20, 0x01, 0x0d, 0xb8] + Array(repeating: 0, count: 8) + [0, 0x53, 0, 1]
        let hints = try ServiceBinding(rdata: [0, 1] + Self.name("foo", "example", "com") + [0, 6, 0, 32] + v6)
        #expect(hints.ipv6Hints.map(\.description) == ["2001:db8::1", "2001:db8::53:1"])

        // 16 foo.example.org. alpn=h2,h3-19 mandatory=ipv4hint,alpn ipv4hint=192.0.2.1
        let full = try ServiceBinding(
            rdata: [0, 16] + Self.name("foo", "example", "org") + [0, 0, 0, 4, 0, 1, 0, 4] + [0, 1, 0, 9, 2] + Array("h2".utf8) + [5]
                + Array("h3-19".utf8) + [0, 4, 0, 4, 192, 0, 2, 1])
        #expect(full.alpn == ["h2", "h3-19"])
        #expect(full.ipv4Hints.map(\.description) == ["192.0.2.1"])
        #expect(full.parameters.first == .mandatory([1, 4]))
        #expect(full.hintsOutside([IPAddress("192.0.2.1")!]).isEmpty)
        #expect(full.hintsOutside([IPAddress("198.18.0.10")!]).map(\.description) == ["192.0.2.1"], "a hint the trusted answer lacks")
        let noDefault = try ServiceBinding(rdata: [0, 1, 0, 0, 2, 0, 0])
        #expect(noDefault.parameters == [.noDefaultALPN])
        let ech = try ServiceBinding(rdata: [0, 1, 0, 0, 5, 0, 3, 1, 2, 3])
        #expect(ech.parameters == [.ech([1, 2, 3])])
    }

    @Test func failureCasesAreSpecificErrors() {
        let target = Self.name("foo", "example", "com")
        let cases: [([UInt8], String)] = [
            ([0, 1], "too short"),
            ([0, 1, 3, 0x66, 0x6f], "runs past"),
            ([0, 1, 0xc0, 0x0c], "compressed"),
            ([0, 1] + target + [0, 3, 0, 2, 0, 53, 0, 3, 0, 2, 0, 54], "strictly increasing"),  // duplicate key
            ([0, 1] + target + [0, 4, 0, 4, 192, 0, 2, 1, 0, 3, 0, 2, 0, 53], "strictly increasing"),  // out of order
            ([0, 1] + target + [0, 0, 0, 2, 0, 0], "lists itself"),
            ([0, 1] + target + [0, 0, 0, 2, 0, 3], "absent"),  // mandatory=port without port
            ([0, 1] + target + [0, 0, 0, 4, 0, 4, 0, 3, 0, 3, 0, 2, 0, 53, 0, 4, 0, 4, 1, 2, 3, 4], "strictly increasing"),
            ([0, 1] + target + [0, 1, 0, 0], "alpn is empty"),
            ([0, 1] + target + [0, 1, 0, 3, 5, 0x68, 0x32], "runs past"),
            ([0, 1] + target + [0, 2, 0, 1, 0], "has a value"),
            ([0, 1] + target + [0, 3, 0, 1, 53], "not 2"),
            ([0, 1] + target + [0, 4, 0, 3, 1, 2, 3], "4-byte"),
            ([0, 1] + target + [0, 6, 0, 4, 1, 2, 3, 4], "16-byte"),
            ([0, 1] + target + [0, 3, 0, 9, 0, 53], "runs past"),
            ([0, 1] + target + [0xff, 0xff, 0, 0], "reserved"),
        ]
        for (rdata, expected) in cases {
            do {
                _ = try ServiceBinding(rdata: rdata)
                Issue.record("accepted \(rdata)")
            } catch {
                #expect(error.code == .malformedResponse && error.message.contains(expected), "\(error.message)")
            }
        }
    }

    @Test func randomRDATANeverTraps() {
        var rng = SplitMix64(state: 9460)
        for _ in 0..<20_000 {
            let rdata = (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if let binding = try? ServiceBinding(rdata: rdata), !binding.isAlias {
                #expect(zip(binding.parameters, binding.parameters.dropFirst()).allSatisfy { $0.key < $1.key })
            }
        }
    }
}
