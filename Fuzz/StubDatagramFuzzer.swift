// libFuzzer entry point: one datagram to the daemon's DNS stub (parsing, error replies, answers,
// UDP truncation). See DaemonFuzzCheck.swift for the properties checked.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let wire = Array(UnsafeBufferPointer(start: data, count: size))
    let (reply, _) = StubDatagram.reply(to: wire) { query in (wire.count & 1 == 0) ? syntheticAnswer(for: query, seed: wire) : nil }
    switch reply {
    case .none:
        precondition(wire.count < 12 || wire[2] & 0x80 != 0, "only non-queries go unanswered")
    case .now(let bytes):
        checkErrorReply(wire, bytes)
    case .answer(let answer, let query):
        checkAnswered(query, StubDatagram.fitted(answer.bytes, to: query), udp: true)
        checkAnswered(query, answer.bytes, udp: false)
    case .lookup(let query):
        let answer = syntheticAnswer(for: query, seed: wire)
        checkAnswered(query, StubDatagram.fitted(answer.bytes, to: query), udp: true)
        let failure = DNSAnswers.response(to: query, .nxdomain, negativeTTL: 30)
        checkAnswered(query, failure.bytes, udp: true)
    }
    return 0
}
