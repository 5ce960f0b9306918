import DNSCore
import Foundation
import Testing

@testable import HTTPDNS

/// The vendor APIs' signing, encryption and answer formats, pinned to every vector of
/// docs/commercial-apis.md ("Wire notes": published ones and our own, marked there).
@Suite struct VendorWireTests {
    static let iv16: @Sendable (Int) -> [UInt8] = { count in (0..<count).map { UInt8($0) } }

    func name(_ text: String) throws -> DomainName { try DomainName(text) }

    // MARK: Published vectors

    @Test func alibabaLegacySignatureVectors() {
        let secret = Array("IAmASecret".utf8)
        #expect(AlibabaLegacyWire.signature(host: "www.aliyun.com", secret: secret, expiry: 1_534_316_400) == "60c71e98b6d7fcbb366243e224eab457")
        #expect(
            AlibabaLegacyWire.signature(host: "www.aliyun.com,www.taobao.com", secret: secret, expiry: 1_534_316_400)
                == "12a3f6b1b14a46ca813ca6439beb59a4")
    }

    @Test func alibabaLegacySignedRequestMatchesTheDocument() throws {
        let wire = AlibabaLegacyWire(accountID: "100000", secret: Array("IAmASecret".utf8))
        let path = wire.request(names: [try name("www.aliyun.com")], families: .ipv4, clientIP: nil, wallSeconds: 1_534_316_400 - 600)
        #expect(path == "/100000/sign_d?host=www.aliyun.com&t=1534316400&s=60c71e98b6d7fcbb366243e224eab457&query=4")
        let batch = wire.request(
            names: [try name("www.aliyun.com"), try name("www.taobao.com")], families: .both, clientIP: IPAddress("192.0.2.1"),
            wallSeconds: 1_534_316_400 - 600)
        #expect(
            batch == "/100000/sign_resolve?host=www.aliyun.com,www.taobao.com&t=1534316400&s=12a3f6b1b14a46ca813ca6439beb59a4&ip=192.0.2.1&query=4,6")
        let unsigned = AlibabaLegacyWire(accountID: "100000", secret: nil)
        #expect(unsigned.request(names: [try name("a.test")], families: .ipv6, clientIP: nil, wallSeconds: 0) == "/100000/d?host=a.test&query=6")
    }

    @Test func tencentDESVector() throws {
        let sealed = try VendorCrypto.desECBSeal(Array("www.dnspod.cn".utf8), key: Array("dnspodpass".utf8))
        #expect(Hex.encode(sealed) == "87ae992c1321f299da3c0210a9900ae7")
        #expect(try VendorCrypto.desECBOpen(sealed, key: Array("dnspodpass".utf8)) == Array("www.dnspod.cn".utf8))
    }

    @Test func desMatchesFIPSVector() {
        // The classic worked example: key 133457799BBCDFF1, plaintext 0123456789ABCDEF.
        let des = DES(key: Hex.decode("133457799bbcdff1")!)
        #expect(Hex.encode(des.encrypt(Hex.decode("0123456789abcdef")!)) == "85e813540f0ab405")
        #expect(Hex.encode(des.decrypt(Hex.decode("85e813540f0ab405")!)) == "0123456789abcdef")
    }

    @Test func baiduSignatureVector() {
        #expect(
            BaiduWire.signature(dn: "www.baidu.com", secret: Array("1234567890".utf8), expiry: 1_513_602_734) == "9d4eac35c33b8fa1610476ff1532643d")
    }

    // MARK: Our own vectors (docs/commercial-apis.md, "Wire notes")

    @Test func alibabaV2PlainSignature() throws {
        let wire = AlibabaV2Wire(accountID: "100000", secret: Hex.decode("0123456789abcdef0123456789abcdef"), mode: .plain)
        let path = try wire.request(names: [try name("www.aliyun.com")], families: .ipv4, clientIP: nil, wallSeconds: 1_755_525_850 - 600)
        #expect(
            path
                == "/v2/d?dn=www.aliyun.com&exp=1755525850&id=100000&m=0&q=4&v=1.0&s=41e4736a847cdc7607a80698658e66814f7ad6e49824d35721ea211c4514a155"
        )
    }

    @Test func alibabaV2CBCRequestVector() throws {
        let wire = AlibabaV2Wire(
            accountID: "100000", secret: Hex.decode("0123456789abcdef0123456789abcdef"),
            mode: .cbc(key: Hex.decode("00112233445566778899aabbccddeeff")!), randomBytes: Self.iv16)
        let enc = "000102030405060708090a0b0c0d0e0f807e7dd77e49ce4b6b52b50b55811e76af64ea19dbaa3ec1c3182dc47f8be395"
        #expect(try wire.encrypt([("dn", "www.aliyun.com"), ("q", "4")]) == enc)
        let path = try wire.request(names: [try name("www.aliyun.com")], families: .ipv4, clientIP: nil, wallSeconds: 1_755_525_850 - 600)
        #expect(path == "/v2/d?enc=\(enc)&exp=1755525850&id=100000&m=1&v=1.0&s=57aa4737d2a8a30cfd8449b83dcafea31a9be06c0f9e53ec37332e27d1176292")
    }

    @Test func alibabaV2GCMRequestVector() throws {
        let wire = AlibabaV2Wire(
            accountID: "100000", secret: nil, mode: .gcm(key: Hex.decode("00112233445566778899aabbccddeeff")!), randomBytes: Self.iv16)
        #expect(
            try wire.encrypt([("dn", "www.aliyun.com"), ("q", "4")])
                == "000102030405060708090a0b50f753aa8cadad17e84f07fe7ce438986331ee251993c2affe7ce06cd529fb4cb062147651377405847a6f6aa77702")
    }

    @Test func alibabaV2DecryptsTheCBCResponseVector() throws {
        let wire = AlibabaV2Wire(accountID: "100000", secret: nil, mode: .cbc(key: Hex.decode("00112233445566778899aabbccddeeff")!))
        let data =
            "AAECAwQFBgcICQoLDA0OD2gWnye0eP72OpJX3p2ydTEQpuimwcGP0Dm79wrbw8eqbvvx130CQBWPBklhr7g0OJ7CAehWWKBTmpMzVylWf9GvINHuQ0vbVWQpQTIZ1srC54fEcCgXjvC4AV2nh5OOTQ=="
        let body = Array(#"{"code":"success","mode":1,"data":"\#(data)"}"#.utf8)
        let answers = try wire.decode(status: 200, body: body, names: [try name("www.aliyun.com")], families: .ipv4)
        #expect(answers == [VendorAnswer(name: try name("www.aliyun.com"), ipv4: .init(addresses: [IPAddress("1.1.1.1")!], ttl: 60))])
    }

    @Test func tencentAESVectors() throws {
        let wire = TencentWire(mode: .aes(accountID: "1", key: Array("0123456789abcdef".utf8)), randomBytes: Self.iv16)
        #expect(try wire.seal("www.dnspod.cn") == "000102030405060708090a0b0c0d0e0f556fad2b1e6696ecb7b748a48d600025")
        let body = "000102030405060708090a0b0c0d0e0f6639246cf33420cbdc88a87e5457fae41c86552e636c5c8e37a1ef7e5a940d95"
        #expect(try wire.open(Array(body.utf8)) == "1.2.3.4;5.6.7.8,120|9.9.9.9")
        let des = TencentWire(mode: .des(accountID: "1", key: Array("dnspodpass".utf8)))
        #expect(try des.seal("1.2.3.4;5.6.7.8,120|9.9.9.9") == "9f10b8b430b0a10f1732ebd3f2a4fb0fc40ee0098eaee49fed42413d804acd1c")
    }

    // MARK: Answer shapes

    @Test func alibabaLegacySingleAndBatchShapes() throws {
        let wire = AlibabaLegacyWire(accountID: "1", secret: nil)
        let single = Array(#"{"host":"www.aliyun.com","ips":["192.0.2.34"],"ipsv6":["2001:db8::1"],"ttl":57,"origin_ttl":120}"#.utf8)
        let answers = try wire.decode(status: 200, body: single, names: [try name("www.aliyun.com")], families: .both)
        #expect(answers.first?.ipv4 == .init(addresses: [IPAddress("192.0.2.34")!], ttl: 57))
        #expect(answers.first?.ipv6 == .init(addresses: [IPAddress("2001:db8::1")!], ttl: 57))
        let batch = Array(
            #"{"dns":[{"host":"a.test","client_ip":"192.0.2.9","ips":["192.0.2.1"],"ttl":106,"origin_ttl":120},{"host":"b.test","ips":["2001:db8::2"],"type":28,"ttl":46},{"host":"other.test","ips":["192.0.2.66"],"ttl":5}]}"#
                .utf8)
        let names = [try name("a.test"), try name("b.test")]
        let batchAnswers = try wire.decode(status: 200, body: batch, names: names, families: .both)
        #expect(batchAnswers.map(\.name) == names, "the answer for a name not asked is dropped")
        #expect(batchAnswers[0].answer(for: .a) == .addresses([ResolvedAddress(ip: IPAddress("192.0.2.1")!, ttl: 106)], canonicalName: names[0]))
        #expect(batchAnswers[0].answer(for: .aaaa) == .nodata(negativeTTL: 106))
        #expect(batchAnswers[1].answer(for: .aaaa) == .addresses([ResolvedAddress(ip: IPAddress("2001:db8::2")!, ttl: 46)], canonicalName: names[1]))
        let noTTL = try wire.decode(status: 200, body: Array(#"{"host":"a.test","ips":[]}"#.utf8), names: [names[0]], families: .ipv4)
        #expect(noTTL.first?.answer(for: .a) == .nodata(negativeTTL: 60), "an empty list is NODATA, and a missing TTL is 60 s")
    }

    @Test func alibabaV2PlainShapeAndNoIPCode() throws {
        let wire = AlibabaV2Wire(accountID: "1", secret: nil, mode: .plain)
        let body = Array(
            #"{"code":"success","mode":0,"data":{"cip":"192.0.2.1","answers":[{"dn":"www.example.test","v4":{"ips":["192.0.2.10","192.0.2.11"],"ttl":60,"extra":"x"},"v6":{"ips":[],"ttl":30,"no_ip_code":"RRNotExist"}}]}}"#
                .utf8)
        let answers = try wire.decode(status: 200, body: body, names: [try name("www.example.test")], families: .both)
        #expect(answers.first?.ipv4?.addresses.count == 2)
        #expect(answers.first?.answer(for: .aaaa) == .nodata(negativeTTL: 30))
    }

    @Test func tencentAnswerLines() throws {
        let one = [try name("cloud.tencent.com")]
        func parse(_ line: String, _ names: [DomainName], _ families: VendorFamilies) throws -> VendorAnswer? {
            try TencentWire.parse(line: Substring(line), names: names, families: families)
        }
        #expect(
            try parse("2.3.3.4;2.3.3.5;2.3.3.6", one, .ipv4)?.ipv4
                == .init(addresses: ["2.3.3.4", "2.3.3.5", "2.3.3.6"].map { IPAddress($0)! }, ttl: nil))
        #expect(try parse("2.3.3.4,120|1.2.3.4", one, .ipv4)?.ipv4 == .init(addresses: [IPAddress("2.3.3.4")!], ttl: 120))
        #expect(try parse("cloud.tencent.com.:2.3.3.4;2.3.3.5,120|1.2.3.4", one, .ipv4)?.ipv4?.addresses.count == 2)
        let addrs = try parse("cloud.tencent.com.:2.3.3.4,120-2402:4e00::2345;2403::2346,60|1.2.3.4", one, .both)
        #expect(addrs?.ipv6 == .init(addresses: [IPAddress("2402:4e00::2345")!, IPAddress("2403::2346")!], ttl: 60))
        #expect(try parse("cloud.tencent.com.:0-0|1.2.3.4", one, .both)?.answer(for: .a) == .nodata(negativeTTL: 60))
        #expect(try parse("cloud.tencent.com|1.2.3.4", one, .ipv4)?.answer(for: .a) == .nodata(negativeTTL: 60))
        #expect(try parse("other.test.:1.2.3.4,60", one, .ipv4) == nil, "a line for a name not asked is dropped")
        #expect(throws: VendorFault.self) { try parse("cloud.tencent.com.:1.2.3.999,60", one, .ipv4) }
        #expect(throws: VendorFault.self) { try parse("cloud.tencent.com.:1.2.3.4,soon", one, .ipv4) }
    }

    @Test func tencentBatchWithAndWithoutClientIPOnEveryLine() throws {
        let wire = TencentWire(mode: .token(Array("t".utf8)))
        let names = [try name("a.test"), try name("b.test"), try name("c.test")]
        for body in [
            "a.test.:1.1.1.1,60\nb.test.:0\nc.test.:3.3.3.3,30|9.9.9.9", "a.test.:1.1.1.1,60|9.9.9.9\nb.test.:0|9.9.9.9\nc.test.:3.3.3.3,30|9.9.9.9",
        ] {
            let answers = try wire.decode(status: 200, body: Array(body.utf8), names: names, families: .ipv4)
            #expect(answers.map(\.name) == names)
            #expect(answers[1].answer(for: .a) == .nodata(negativeTTL: 60))
            #expect(answers[2].ipv4 == .init(addresses: [IPAddress("3.3.3.3")!], ttl: 30))
        }
        let empty = try wire.decode(status: 200, body: [], names: [names[0]], families: .ipv4)
        #expect(empty.first?.answer(for: .a) == .nodata(negativeTTL: 60), "an empty body is the documented no-record answer")
    }

    @Test func baiduShape() throws {
        let wire = BaiduWire(accountID: "123456", secret: Array("s".utf8))
        let body = Array(
            #"{"msg":"ok","data":{"a.baidu.test":{"ipv4":{"ip":["1.2.3.4","3.4.5.6"],"ttl":300},"ipv6":{"ip":[],"ttl":300}}},"clientip":"1.1.1.1","timestamp":1}"#
                .utf8)
        let answers = try wire.decode(status: 200, body: body, names: [try name("a.baidu.test")], families: .both)
        #expect(answers.first?.ipv4?.addresses.count == 2)
        #expect(answers.first?.answer(for: .aaaa) == .nodata(negativeTTL: 300))
        let request = wire.request(names: [try name("a.baidu.test")], families: .ipv4, clientIP: nil, wallSeconds: 1000)
        #expect(
            request
                == "/v4/resolve?account_id=123456&dn=a.baidu.test&t=1600&sign=\(BaiduWire.signature(dn: "a.baidu.test", secret: Array("s".utf8), expiry: 1600))&type=ipv4"
        )
    }

    // MARK: Bad input: each a specific error, never a wrong answer

    @Test func errorsMapToStableCodesAndRetries() {
        func fault(_ body: () throws(VendorFault) -> [VendorAnswer]) -> VendorFault? {
            do { _ = try body() } catch { return error }
            return nil
        }
        let names = [try! DomainName("a.test")]
        let legacy = AlibabaLegacyWire(accountID: "1", secret: nil)
        let expired = fault { () throws(VendorFault) in
            try legacy.decode(status: 403, body: Array(#"{"code":"SignatureExpired"}"#.utf8), names: names, families: .ipv4)
        }
        #expect(expired?.error.code == .unauthorized && expired?.retry == .afterClockSync)
        let invalid = fault { () throws(VendorFault) in
            try legacy.decode(status: 403, body: Array(#"{"code":"InvalidSignature"}"#.utf8), names: names, families: .ipv4)
        }
        #expect(invalid?.error.code == .unauthorized && invalid?.retry == .never)
        let deny = fault { () throws(VendorFault) in
            try legacy.decode(status: 403, body: Array(#"{"code":"ServiceLevelDeny"}"#.utf8), names: names, families: .ipv4)
        }
        #expect(deny?.retry == .nextAddress)
        let limited = fault { () throws(VendorFault) in try legacy.decode(status: 429, body: [], names: names, families: .ipv4) }
        #expect(limited?.error.code == .rateLimited && limited?.retry == .never)
        let html = fault { () throws(VendorFault) in
            try legacy.decode(status: 200, body: Array("<html>hi</html>".utf8), names: names, families: .ipv4)
        }
        #expect(html?.error.code == .malformedResponse && html?.error.message.contains("HTML") == true)
        let server = fault { () throws(VendorFault) in try legacy.decode(status: 502, body: Array("bad gateway".utf8), names: names, families: .ipv4)
        }
        #expect(server?.error.code == .httpStatus && server?.retry == .nextAddress)
    }

    @Test func tamperedCiphertextIsASpecificError() throws {
        let key = Array("dnspodpass".utf8)
        let wire = TencentWire(mode: .des(accountID: "1", key: key))
        let good = try wire.seal("1.2.3.4,60")
        let cases: [(String, String)] = [
            ("zz" + good.dropFirst(2), "not hex"),
            (String(good.dropLast(2)), "whole 8-byte blocks"),
            (String(good.dropLast(16)) + "0000000000000000", "bad padding"),
        ]
        for (body, why) in cases {
            #expect(throws: VendorFault.self, "\(why)") {
                try wire.decode(status: 200, body: Array(body.utf8), names: [try name("a.test")], families: .ipv4)
            }
        }
        let wrongKey = TencentWire(mode: .des(accountID: "1", key: Array("otherkey".utf8)))
        #expect(throws: VendorFault.self) { try wrongKey.decode(status: 200, body: Array(good.utf8), names: [try name("a.test")], families: .ipv4) }
        let gcm = AlibabaV2Wire(accountID: "1", secret: nil, mode: .gcm(key: Hex.decode("00112233445566778899aabbccddeeff")!))
        var sealed = try VendorCrypto.aesGCMSeal(
            Array(#"{"answers":[]}"#.utf8), key: Hex.decode("00112233445566778899aabbccddeeff")!, nonce: Array(repeating: 1, count: 12))
        sealed[14] ^= 1
        let body = Array(#"{"code":"success","mode":2,"data":"\#(Data(sealed).base64EncodedString())"}"#.utf8)
        #expect(throws: VendorFault.self) { try gcm.decode(status: 200, body: body, names: [try name("a.test")], families: .ipv4) }
    }

    @Test func aDecryptedBodyThatIsNotTheFormatIsRefused() throws {
        let key = Hex.decode("00112233445566778899aabbccddeeff")!
        let sealed = try VendorCrypto.aesCBCSeal(Array("hello, not json".utf8), key: key, iv: Array(repeating: 3, count: 16))
        let body = Array(#"{"code":"success","mode":1,"data":"\#(Data(sealed).base64EncodedString())"}"#.utf8)
        let v2 = AlibabaV2Wire(accountID: "1", secret: nil, mode: .cbc(key: key))
        #expect(throws: VendorFault.self) { try v2.decode(status: 200, body: body, names: [try name("a.test")], families: .ipv4) }
        let plainMode = AlibabaV2Wire(accountID: "1", secret: nil, mode: .plain)
        #expect(throws: VendorFault.self, "an encrypted answer with no key configured") {
            try plainMode.decode(status: 200, body: body, names: [try name("a.test")], families: .ipv4)
        }
        let des = TencentWire(mode: .des(accountID: "1", key: Array("dnspodpass".utf8)))
        for text in ["a.test.:not-an-ip,60", "a.test.:1.2.3.4,forever", "b.test.:1.2.3.4,60\nc.test:"] {
            let sealedText = try des.seal(text)
            #expect(throws: VendorFault.self, "\(text)") {
                let answers = try des.decode(status: 200, body: Array(sealedText.utf8), names: [try name("a.test")], families: .ipv4)
                if answers.isEmpty { throw VendorFault(.mismatchedResponse, "no answer for the name") }
            }
        }
        let binary = try VendorCrypto.desECBSeal([0xff, 0xfe, 0x00, 0x80], key: Array("dnspodpass".utf8))
        #expect(throws: VendorFault.self, "a decrypted answer that is not UTF-8") {
            try des.decode(status: 200, body: Array(Hex.encode(binary).utf8), names: [try name("a.test")], families: .ipv4)
        }
    }

    @Test func secretsNeverPrint() throws {
        let secret = try VendorSecret("s3cr3t-value")
        let endpoint = try UpstreamEndpoint.vendor(.baidu(accountID: "123456", secret: secret), endpoint: "https://192.0.2.1")
        for text in ["\(secret)", String(reflecting: secret), "\(endpoint)", String(reflecting: endpoint), "\(endpoint.kind)"] {
            #expect(!text.contains("s3cr3t"), "\(text)")
        }
        var dumped = ""
        dump(endpoint, to: &dumped)
        #expect(!dumped.contains("s3cr3t"))
    }

    @Test func configurationChecks() throws {
        let secret = try VendorSecret("00112233")
        #expect(throws: DNSError.self) {
            try UpstreamEndpoint.vendor(.alibabaLegacy(accountID: "1", secret: secret), endpoint: "http://192.0.2.1")
        }
        // Plain HTTP with an encrypting mode is accepted, and says so.
        let tencent = try UpstreamEndpoint.vendor(
            .tencent(accountID: "1", cipher: .des(key: try VendorSecret("dnspodpass"))), endpoint: "http://192.0.2.1")
        #expect(tencent.isPlainHTTP && tencent.port == 80)
        #expect(throws: DNSError.self) {
            try UpstreamEndpoint.vendor(.tencent(accountID: "1", cipher: .aes(key: try VendorSecret("short"))), endpoint: "http://192.0.2.1")
        }
        #expect(throws: DNSError.self) {
            try UpstreamEndpoint.vendor(
                .alibabaV2(accountID: "1", secret: try VendorSecret("not-hex"), encryption: .none), endpoint: "https://192.0.2.1")
        }
        #expect(throws: DNSError.self) {
            try UpstreamEndpoint.vendor(.baidu(accountID: "1", secret: secret), endpoint: "https://192.0.2.1", batchSize: 11)
        }
        #expect(throws: DNSError.self) {
            try UpstreamEndpoint.vendor(.baidu(accountID: "1", secret: secret), endpoint: "https://192.0.2.1/v4/resolve")
        }
    }

    @Test func httpDateParses() {
        #expect(VendorUpstream.serverTime("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(VendorUpstream.serverTime("yesterday") == nil)
    }
}
