import DNSCore
import Foundation
import TestSupport
import Testing

@testable import HTTPDNS

/// Mutation fuzzing of every vendor answer decoder, in process and deterministic (a fixed seed, so a
/// failure reproduces): valid bodies are bit-flipped, cut, spliced and salted with the formats'
/// delimiters, then decoded. Properties: no trap, no hang; an answer is only ever for a name that
/// was asked, in the family asked; and every failure is a ``VendorFault`` with a specific code.
@Suite struct VendorFuzzTests {
    typealias Generator = SplitMix64

    static let tokens: [[UInt8]] = [
        "\"", "{", "}", "[", "]", ":", ",", "\n", "|", "-", ";", ".:", "0", "-1", "1e999", "null", "true", "\"ips\"",
        "\"v4\"", "\"dns\"", "\"host\"", "\"data\"", "\"mode\":1", "\"mode\":2", "99999999999999999999", "::", "1.2.3.4", "a.test",
        "\\u0000", "%00",
    ].map { Array($0.utf8) }

    static func mutate(_ seed: [UInt8], _ random: inout Generator) -> [UInt8] {
        var bytes = seed
        for _ in 0..<Int.random(in: 1...4, using: &random) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &random)
            switch Int.random(in: 0..<6, using: &random) {
            case 0 where !bytes.isEmpty: bytes[position] ^= UInt8(1 << Int.random(in: 0..<8, using: &random))
            case 1 where !bytes.isEmpty: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...16, using: &random)))
            case 2: bytes.insert(contentsOf: tokens.randomElement(using: &random)!, at: position)
            case 3:
                bytes.insert(
                    contentsOf: (0..<Int.random(in: 1...8, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }, at: position)
            case 4 where !bytes.isEmpty:
                let end = min(bytes.count, position + Int.random(in: 1...32, using: &random))
                bytes.insert(contentsOf: bytes[position..<end], at: Int.random(in: 0...bytes.count, using: &random))
            default: bytes = Array(bytes.prefix(position))
            }
        }
        return bytes
    }

    static let names = [try! DomainName("a.test"), try! DomainName("b.test")]

    /// Decodes `runs` mutations of each seed with `decode` and checks the properties.
    func fuzz(_ label: String, seeds: [String], runs: Int, seed: UInt64, decode: ([UInt8], VendorFamilies) throws(VendorFault) -> [VendorAnswer]) {
        var random = Generator(state: seed)
        var answered = 0, refused = 0
        for run in 0..<runs {
            let body = Self.mutate(Array(seeds[run % seeds.count].utf8), &random)
            let families = [VendorFamilies.ipv4, .ipv6, .both][run % 3]
            do {
                let answers = try decode(body, families)
                answered += 1
                for answer in answers {
                    #expect(Self.names.contains(answer.name), "\(label): answer for \(answer.name), not asked")
                    if !families.includesIPv4 { #expect(answer.ipv4 == nil, "\(label): IPv4 not asked") }
                    if !families.includesIPv6 { #expect(answer.ipv6 == nil, "\(label): IPv6 not asked") }
                    for type in [RecordType.a, .aaaa] {
                        if case let .addresses(list, _)? = answer.answer(for: type) {
                            #expect(list.allSatisfy { ($0.ip.family == .ipv6) == (type == .aaaa) }, "\(label): family mixed")
                        }
                    }
                }
            } catch {
                refused += 1
                #expect(!error.error.message.isEmpty)
                #expect(error.error.code != .internalError)
            }
        }
        // Both outcomes are reached, or the mutations are not exercising the decoder.
        #expect(answered > 0 && refused > 0, "\(label): \(answered) decoded, \(refused) refused")
    }

    @Test func alibabaLegacyDecoder() {
        let wire = AlibabaLegacyWire(accountID: "1", secret: nil)
        fuzz(
            "alibaba legacy",
            seeds: [
                #"{"host":"a.test","ips":["192.0.2.1"],"ipsv6":["2001:db8::1"],"ttl":57,"origin_ttl":120}"#,
                #"{"dns":[{"host":"a.test","ips":["192.0.2.1"],"ttl":1},{"host":"b.test","ips":["2001:db8::2"],"type":28,"ttl":46}]}"#,
                #"{"code":"InvalidSignature"}"#,
            ], runs: 6000, seed: 1
        ) { body, families throws(VendorFault) in
            try wire.decode(status: 200, body: body, names: Self.names, families: families)
        }
    }

    @Test func alibabaV2Decoder() throws {
        let key = Hex.decode("00112233445566778899aabbccddeeff")!
        let sealed = try VendorCrypto.aesCBCSeal(
            Array(#"{"answers":[{"dn":"a.test","v4":{"ips":["1.1.1.1"],"ttl":60}}]}"#.utf8), key: key, iv: Array(repeating: 7, count: 16))
        let wire = AlibabaV2Wire(accountID: "1", secret: nil, mode: .cbc(key: key))
        fuzz(
            "alibaba v2",
            seeds: [
                #"{"code":"success","mode":0,"data":{"cip":"1.2.3.4","answers":[{"dn":"a.test","v4":{"ips":["192.0.2.10"],"ttl":60},"v6":{"ips":[],"ttl":60,"no_ip_code":"RRNotExist"}}]}}"#,
                #"{"code":"success","mode":1,"data":"\#(Data(sealed).base64EncodedString())"}"#,
                #"{"code":"ServiceLevelDeny"}"#,
            ], runs: 6000, seed: 2
        ) { body, families throws(VendorFault) in
            try wire.decode(status: 200, body: body, names: Self.names, families: families)
        }
    }

    @Test func tencentDecoders() throws {
        let token = TencentWire(mode: .token(Array("t".utf8)))
        fuzz(
            "tencent text",
            seeds: [
                "a.test.:1.1.1.1;2.2.2.2,60-2001:db8::1,30|9.9.9.9", "a.test.:1.1.1.1,60\nb.test.:0|9.9.9.9", "1.2.3.4,120|1.1.1.1",
                "a.test|1.2.3.4",
            ], runs: 6000, seed: 3
        ) { body, families throws(VendorFault) in
            try token.decode(status: 200, body: body, names: Self.names, families: families)
        }
        let des = TencentWire(mode: .des(accountID: "1", key: Array("dnspodpass".utf8)))
        let sealed = try des.seal("a.test.:1.1.1.1,60|9.9.9.9")
        fuzz("tencent des", seeds: [sealed, "00", ""], runs: 3000, seed: 4) { body, families throws(VendorFault) in
            try des.decode(status: 200, body: body, names: Self.names, families: families)
        }
    }

    @Test func baiduDecoder() {
        let wire = BaiduWire(accountID: "1", secret: Array("s".utf8))
        fuzz(
            "baidu",
            seeds: [
                #"{"msg":"ok","data":{"a.test":{"ipv4":{"ip":["1.2.3.4"],"ttl":300},"ipv6":{"ip":["2001:db8::1"],"ttl":300}},"b.test":{"ip":["1.2.3.5"],"ttl":5}}}"#,
                #"{"msg":"sign invalid","data":{}}"#,
            ], runs: 6000, seed: 5
        ) { body, families throws(VendorFault) in
            try wire.decode(status: 200, body: body, names: Self.names, families: families)
        }
    }

    /// Fuzz/corpus-vendor and any crasher of `Scripts/fuzz.sh vendor`, replayed with the harness's
    /// selector: the first byte picks the decoder and families, the rest is the body.
    @Test func replaysTheLibFuzzerCorpusAndCrashers() throws {
        let decoders: [any VendorWireFormat] = [
            AlibabaLegacyWire(accountID: "1", secret: nil), AlibabaV2Wire(accountID: "1", secret: nil, mode: .plain),
            AlibabaV2Wire(accountID: "1", secret: nil, mode: .cbc(key: Array(repeating: 1, count: 16))), TencentWire(mode: .token([0x74])),
            TencentWire(mode: .des(accountID: "1", key: Array("dnspodpass".utf8))), BaiduWire(accountID: "1", secret: [0x73]),
        ]
        var replayed = 0
        for folder in ["Fuzz/corpus-vendor", "Fuzz/crashers/vendor"] {
            let path = TestEnvironment.root + "/" + folder
            for file in (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] {
                let bytes = try Array(Data(contentsOf: URL(fileURLWithPath: path + "/" + file)))
                guard let selector = bytes.first.map(Int.init) else { continue }
                let families = [VendorFamilies.ipv4, .ipv6, .both][(selector / decoders.count) % 3]
                let status = selector >= 128 ? [403, 429, 500, 400][selector % 4] : 200
                if let answers = try? decoders[selector % decoders.count].decode(
                    status: status, body: Array(bytes.dropFirst()), names: Self.names, families: families)
                {
                    #expect(answers.allSatisfy { Self.names.contains($0.name) }, "\(file)")
                }
                replayed += 1
            }
        }
        #expect(replayed >= 8, "the committed seeds are replayed")
    }

    @Test func cipherOpenersRefuseRandomData() {
        var random = Generator(state: 6)
        let key = Array(repeating: UInt8(9), count: 16)
        for _ in 0..<3000 {
            let data = (0..<Int.random(in: 0...80, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            _ = try? VendorCrypto.aesCBCOpen(data, key: key)
            #expect((try? VendorCrypto.aesGCMOpen(data, key: key)) == nil, "random data never authenticates")
            _ = try? VendorCrypto.desECBOpen(data, key: Array(key.prefix(8)))
            _ = Hex.decode(String(decoding: data, as: UTF8.self))
        }
    }
}
