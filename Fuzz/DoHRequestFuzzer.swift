// libFuzzer entry point: a DoH request (a GET's request target, or a POST's media type and body)
// through to the answer. The first byte picks the method; for a POST the bytes up to the first
// newline are the Content-Type. See DaemonFuzzCheck.swift for the properties checked.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let selector = bytes.first else { return 0 }
    let rest = Array(bytes.dropFirst())
    let result: Result<[UInt8], DoHRequest.Refusal>
    if selector & 1 == 0 {
        let target = "/dns-query?" + String(decoding: rest, as: UTF8.self)
        result = DoHRequest.query(method: "GET", target: target, contentType: nil, body: [])
    } else {
        let newline = rest.firstIndex(of: 0x0a) ?? rest.count
        let contentType = String(decoding: rest[..<newline], as: UTF8.self)
        let body = newline < rest.count ? Array(rest[(newline + 1)...]) : []
        result = DoHRequest.query(method: "POST", target: "/dns-query", contentType: contentType, body: body)
    }
    switch result {
    case .failure(let refusal):
        precondition(refusal.status == 400 || refusal.status == 415, "a refused request is 400 or 415, not \(refusal.status)")
    case .success(let wire):
        do {
            let query = try DNSQuery(wire)
            checkAnswered(query, syntheticAnswer(for: query, seed: bytes).bytes, udp: false)
        } catch {
            if let reply = DNSAnswers.reply(to: error) { checkErrorReply(wire, reply) }
        }
    }
    return 0
}
