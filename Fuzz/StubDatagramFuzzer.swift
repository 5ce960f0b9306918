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
        // A negative answer with the zone's SOA (the name itself or the root: both above it), its
        // owner a pointer into the question as the client wrote it.
        let zone = wire.count & 2 == 0 ? query.question.name : DomainName.root
        var denied = DNSError(wire.count & 4 == 0 ? .nxdomain : .nodata, "fuzz")
        denied.authority = NegativeAuthority(
            zone: zone, soa: DNSMessage.SOA(primary: zone, mailbox: query.question.name, serial: 1, refresh: 2, retry: 3, expire: 4, minimum: 5),
            ttl: UInt32(wire.count))
        let negative = DNSAnswers.response(to: query, denied, negativeTTL: 30).bytes
        checkAnswered(query, negative, udp: false)
        guard let message = try? DNSMessage(decoding: negative), message.authorities.count == 1, message.authorities[0].name == zone,
            message.authorities[0].ttl == min(UInt32(wire.count), 30)  // never past negative_ttl
        else { fatalError("the negative answer's SOA did not come out as written") }
    }
    return 0
}
