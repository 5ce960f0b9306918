// What the daemon fuzzers check on every input (built by Scripts/fuzz.sh together with DNSCore's
// wire codec and the daemon's DNS files; never part of the package build).

/// A made-up answer for `query`, shaped by the input: 0-49 addresses, a CNAME or not.
func syntheticAnswer(for query: DNSQuery, seed: [UInt8]) -> DNSAnswers.Answer {
    let count = (seed.last.map(Int.init) ?? 0) % 50
    var addresses: [ResolvedAddress] = []
    for index in 0..<count {
        let ip =
            query.question.type == .aaaa
            ? IPAddress(bytes: [0x20, 0x01, 0, 2] + Array(repeating: 0, count: 11) + [UInt8(index)])!
            : IPAddress(bytes: [198, 18, 3, UInt8(index)])!
        addresses.append(ResolvedAddress(ip: ip, ttl: UInt32(seed.count)))
    }
    let canonical = (seed.first ?? 0) & 1 == 1 ? "target.hd.test" : nil
    let now = ResolverInstant(offset: .seconds(1_000))
    let resolution = Resolution(
        host: query.question.name.description, addresses: addresses, canonicalName: canonical, source: .cache,
        upstream: nil, elapsed: .zero, expiresAt: now + .seconds(300))
    return DNSAnswers.response(to: query, resolution, now: now)
}

/// Every reply is a well-formed response to what was asked: QR set, the query's ID, its question
/// with the client's letter case, and over UDP never more than the client takes.
func checkAnswered(_ query: DNSQuery, _ bytes: [UInt8], udp: Bool) {
    guard let message = try? DNSMessage(decoding: bytes) else { fatalError("a reply that does not decode: \(bytes)") }
    precondition(message.isResponse, "QR must be set")
    precondition(message.id == query.id, "the ID must be echoed")
    precondition(message.questions == [query.question], "the question must be echoed")
    precondition(Array(bytes[12..<query.questionEnd]) == Array(query.wire[12..<query.questionEnd]), "the question's case must be kept")
    precondition((message.additionals.first { $0.type == .opt } != nil) == (query.edns != nil), "OPT exactly when the query had EDNS")
    if udp { precondition(bytes.count <= DNSAnswers.udpLimit(of: query), "larger than the client takes over UDP") }
    if !udp, query.edns?.padded == true { checkPadded(bytes, message) }
}

/// A reply padded as DoT and DoH send it (RFC 8467's 468-byte blocks): a multiple of the block
/// with a Padding option, the same message otherwise.
func checkPadded(_ bytes: [UInt8], _ message: DNSMessage) {
    let padded = EDNSPadding.padded(bytes, toMultipleOf: EDNSPadding.responseBlock)
    precondition(padded.count % EDNSPadding.responseBlock == 0 && EDNSPadding.hasPadding(padded), "a reply not padded to the block")
    guard let again = try? DNSMessage(decoding: padded) else { fatalError("a padded reply that does not decode") }
    precondition(again.questions == message.questions && again.answers == message.answers, "padding changed the records")
}

/// An error reply (FORMERR, NOTIMP, BADVERS): a response with the query's ID.
func checkErrorReply(_ wire: [UInt8], _ bytes: [UInt8]) {
    guard let message = try? DNSMessage(decoding: bytes) else { fatalError("an error reply that does not decode: \(bytes)") }
    precondition(message.isResponse)
    precondition(wire.count >= 2 && message.id == UInt16(wire[0]) << 8 | UInt16(wire[1]), "the ID must be echoed")
    precondition(message.responseCode != .noError || message.additionals.contains { $0.type == .opt }, "an error RCODE")
}
