// libFuzzer entry point for the vendor HTTPDNS answer decoders (Alibaba legacy and v2, Tencent text
// and DES, Baidu). Built apart from the package by Scripts/fuzz.sh with DNSCore's codec, the vendor
// wire files and Fuzz/VendorCryptoStub.swift.
//
// The first byte picks the decoder, the asked families and the HTTP status; the rest is the body.
// Properties checked on every input:
//  - decoding never traps: it returns answers or throws a VendorFault with a message;
//  - every answer is for a name that was asked, and speaks only of the families asked;
//  - an answer's addresses are all of the family of the record type they answer.
import Foundation

let fuzzNames = [try! DomainName("a.test"), try! DomainName("b.test")]
let decoders: [any VendorWireFormat] = [
    AlibabaLegacyWire(accountID: "1", secret: nil),
    AlibabaV2Wire(accountID: "1", secret: nil, mode: .plain),
    AlibabaV2Wire(accountID: "1", secret: nil, mode: .cbc(key: Array(repeating: 1, count: 16))),
    TencentWire(mode: .token([0x74])),
    TencentWire(mode: .des(accountID: "1", key: Array("dnspodpass".utf8))),
    BaiduWire(accountID: "1", secret: [0x73]),
]

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let selector = Int(data[0])
    let body = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    let decoder = decoders[selector % decoders.count]
    let families = [VendorFamilies.ipv4, .ipv6, .both][(selector / decoders.count) % 3]
    let status = selector >= 128 ? [403, 429, 500, 400][selector % 4] : 200
    do {
        for answer in try decoder.decode(status: status, body: body, names: fuzzNames, families: families) {
            guard fuzzNames.contains(answer.name) else { fatalError("an answer for \(answer.name), which was not asked") }
            if !families.includesIPv4, answer.ipv4 != nil { fatalError("IPv4 answered, not asked") }
            if !families.includesIPv6, answer.ipv6 != nil { fatalError("IPv6 answered, not asked") }
            for type in [RecordType.a, .aaaa] {
                if case let .addresses(list, _)? = answer.answer(for: type), list.contains(where: { ($0.ip.family == .ipv6) != (type == .aaaa) }) {
                    fatalError("\(type) answered with an address of the other family")
                }
            }
        }
    } catch {
        if error.error.message.isEmpty { fatalError("a fault without a message") }
    }
    return 0
}
