import DNSCore
import Foundation
import Testing

@testable import HTTPDNS

/// What an on-path forger without the account's keys can send in place of a vendor's answer, over
/// http:// where nothing else authenticates the server: each is refused with a specific code, never
/// an answer (docs/threat-model.md F6, F16).
@Suite struct VendorForgeryTests {
    static let key = Hex.decode("00112233445566778899aabbccddeeff")!
    static let forgedIP = "44.55.66.77"

    func name(_ text: String) throws -> DomainName { try DomainName(text) }

    /// The `data` an answer carries for www.hd.test with the forged address, as each mode writes it.
    func body(mode: Int, sealedWith key: [UInt8] = Self.key) throws -> [UInt8] {
        let plain = #"{"answers":[{"dn":"www.hd.test","v4":{"ips":["\#(Self.forgedIP)"],"ttl":60}}]}"#
        let data: String
        switch mode {
        case 0: data = plain
        case 1:
            data =
                "\"" + Data(try VendorCrypto.aesCBCSeal(Array(plain.utf8), key: key, iv: Array(repeating: 7, count: 16))).base64EncodedString() + "\""
        default:
            data =
                "\"" + Data(try VendorCrypto.aesGCMSeal(Array(plain.utf8), key: key, nonce: Array(repeating: 7, count: 12))).base64EncodedString()
                + "\""
        }
        return Array(#"{"code":"success","mode":\#(mode),"data":\#(data)}"#.utf8)
    }

    /// The configured mode is the only acceptable one: a plaintext (mode 0) answer to an encrypting
    /// client, or CBC (unauthenticated) to a GCM one, is `malformed_response`. Each pair is decoded
    /// with the same key on both sides, so only the mode decides.
    @Test func anAlibabaAnswerInAnotherModeThanConfiguredIsRefused() throws {
        let modes: [(String, AlibabaV2Wire.Mode, Int)] = [("plain", .plain, 0), ("cbc", .cbc(key: Self.key), 1), ("gcm", .gcm(key: Self.key), 2)]
        var table: [String] = []
        let names = [try name("www.hd.test")]
        for (configured, mode, number) in modes {
            let wire = AlibabaV2Wire(accountID: "100000", secret: nil, mode: mode)
            for answered in 0...2 {
                let outcome: String
                let forged = try body(mode: answered)
                do throws(VendorFault) {
                    let answers = try wire.decode(status: 200, body: forged, names: names, families: .ipv4)
                    outcome = "answer " + (answers.first?.ipv4?.addresses.map(\.description).joined(separator: ",") ?? "-")
                } catch {
                    outcome = error.error.code.rawValue
                }
                table.append("\(configured) ← mode \(answered): \(outcome)")
                if answered == number {
                    #expect(outcome == "answer \(Self.forgedIP)", "the configured mode itself decodes: \(configured)")
                } else {
                    #expect(outcome == "malformed_response", "\(configured) took a mode-\(answered) answer")
                }
            }
        }
        // A mode missing or written as a string is mode 0 or no mode: refused by an encrypting client.
        let gcm = AlibabaV2Wire(accountID: "100000", secret: nil, mode: .gcm(key: Self.key))
        for forged in [#"{"code":"success","data":{"answers":[]}}"#, #"{"code":"success","mode":"2","data":{"answers":[]}}"#] {
            #expect(throws: VendorFault.self, "\(forged)") {
                try gcm.decode(status: 200, body: Array(forged.utf8), names: [try name("a.test")], families: .ipv4)
            }
        }
        #expect(table.count == 9)
    }

    /// Over http:// Tencent's empty "no record" body is sealed by nothing: a failed attempt
    /// (`unauthenticated_answer`, next service IP), not a NODATA that would be cached. Over HTTPS the
    /// same body is the server's, and it is NODATA.
    @Test func tencentsEmptyBodyOverPlainHTTPIsNotANoRecord() throws {
        let names = [try name("www.hd.test")]
        for mode in [TencentWire.Mode.des(accountID: "1", key: Array("dnspodpass".utf8)), .aes(accountID: "1", key: Array("0123456789abcdef".utf8))] {
            let overHTTP = TencentWire(mode: mode, serverAuthenticated: false)
            for body in ["", "  \n"] {
                do throws(VendorFault) {
                    _ = try overHTTP.decode(status: 200, body: Array(body.utf8), names: names, families: .both)
                    Issue.record("an empty body over http:// was taken as an answer")
                } catch {
                    #expect(error.error.code == .unauthenticatedAnswer && error.retry == .nextAddress)
                }
            }
            // A sealed answer still decodes over http://.
            let sealed = try overHTTP.seal("www.hd.test.:198.18.0.10,60")
            let answers = try overHTTP.decode(status: 200, body: Array(sealed.utf8), names: names, families: .ipv4)
            #expect(answers.first?.ipv4?.addresses.map(\.description) == ["198.18.0.10"])
            let overHTTPS = TencentWire(mode: mode, serverAuthenticated: true)
            let nodata = try overHTTPS.decode(status: 200, body: [], names: names, families: .ipv4)
            #expect(nodata.first?.ipv4?.addresses == [], "over HTTPS the empty body is NODATA")
        }
        // The upstream decides from the endpoint's scheme.
        let plain = try UpstreamEndpoint.vendor(
            .tencent(accountID: "1", cipher: .des(key: try VendorSecret("dnspodpass"))), endpoint: "http://192.0.2.1")
        guard case let .vendor(api) = plain.kind else { throw DNSError(.internalError, "not a vendor endpoint") }
        let format = VendorUpstream.format(for: api, serverAuthenticated: !plain.isPlainHTTP)
        #expect((format as? TencentWire)?.serverAuthenticated == false)
    }

    /// Thousands of addresses for one name (`::;::;…`) is no vendor's answer; the upstream refuses
    /// more than 256 per family before they reach the cache or a DNS response.
    @Test func aVendorAnswerHoldsAtMost256AddressesPerFamily() throws {
        let many = (0..<300).map { IPAddress("198.18.1.\($0 % 250)")! }
        var answer = VendorAnswer(name: try name("www.hd.test"), ipv4: .init(addresses: Array(many.prefix(256)), ttl: 60))
        #expect(answer.isWithinBounds)
        answer.ipv4 = .init(addresses: many, ttl: 60)
        #expect(!answer.isWithinBounds)
        answer.ipv4 = nil
        answer.ipv6 = .init(addresses: (0..<257).map { _ in IPAddress("::")! }, ttl: nil)
        #expect(!answer.isWithinBounds)
    }
}
