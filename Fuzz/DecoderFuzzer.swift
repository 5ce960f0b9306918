// libFuzzer entry point for the DNS message decoder. Built apart from the package by
// Scripts/fuzz.sh together with DNSCore's sources (-sanitize=fuzzer,address).
//
// Properties checked on every input:
//  - decoding never traps: it returns a message or throws a WireError;
//  - a decoded message re-encodes (without compression) to bytes that decode to the same message;
//  - answer extraction for the message's own question never traps;
//  - the same bytes read as SVCB/HTTPS RDATA decode or throw, and a decoded one keeps its keys in order;
//  - EDNS padding and its removal never trap; padding reaches the block, is idempotent and changes no
//    record of a message; removal leaves no Padding option and never grows a message.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let binding = try? ServiceBinding(rdata: bytes), zip(binding.parameters, binding.parameters.dropFirst()).contains(where: { $0.key >= $1.key })
    {
        fatalError("SVCB parameters out of order")
    }
    // Padding (RFC 7830/8467) of any bytes never traps; what it changes is a multiple of the block,
    // carries the option and pads again to itself.
    let padded = EDNSPadding.padded(bytes, toMultipleOf: EDNSPadding.queryBlock)
    if padded != bytes {
        precondition(padded.count % EDNSPadding.queryBlock == 0 && EDNSPadding.hasPadding(padded), "padded off the block")
        precondition(EDNSPadding.padded(padded, toMultipleOf: EDNSPadding.queryBlock) == padded, "padding again changed it")
        precondition(!EDNSPadding.hasPadding(EDNSPadding.unpadded(padded)), "unpadding left a Padding option")
    }
    let unpadded = EDNSPadding.unpadded(bytes)
    precondition(unpadded == bytes || (unpadded.count < bytes.count && !EDNSPadding.hasPadding(unpadded)), "unpadding grew or kept padding")
    guard let message = try? DNSMessage(decoding: bytes) else { return 0 }
    // Every record but the OPT record comes through padding and its removal unchanged (F51-P1:
    // a record after the OPT whose compression pointer moved became another name's).
    func sameRecords(_ other: [UInt8]) -> Bool {
        guard let again = try? DNSMessage(decoding: other) else { return false }
        return again.questions == message.questions && again.answers == message.answers && again.authorities == message.authorities
            && again.additionals.filter { $0.type != .opt } == message.additionals.filter { $0.type != .opt }
    }
    if padded != bytes, !sameRecords(padded) { fatalError("padding changed a message's records") }
    if unpadded != bytes, !sameRecords(unpadded) { fatalError("unpadding changed a message's records") }
    let reencoded = message.encode()
    guard let again = try? DNSMessage(decoding: reencoded), again == message else {
        fatalError("re-encoding changed the message")
    }
    if let question = message.questions.first {
        if let answer = try? message.addressAnswer(for: question, id: message.id),
            let authority = message.negativeAuthority(for: question, answer: answer), !question.name.isWithin(authority.zone)
        {
            fatalError("an SOA kept for a zone the question is not in")
        }
    }
    return 0
}
