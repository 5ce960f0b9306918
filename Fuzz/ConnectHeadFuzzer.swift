// libFuzzer entry point: a proxy connection's first bytes through the relay's CONNECT scan
// (Sources/ForwardProxy/ConnectHead.swift). Properties: no crash; a head it accepts ends
// in CRLF CRLF within the input, names a non-empty authority without spaces, and stays the same
// decision whatever follows it; no prefix of an accepted head is accepted.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // Half of the inputs start as a CONNECT, so the fuzzer spends its time past the method.
    let input = bytes.first.map { $0 & 1 == 0 } == true ? Array("CONNECT ".utf8) + bytes.dropFirst() : bytes
    let decision = ConnectHead.scan(input)
    guard case let .connect(authority, _, length) = decision else { return 0 }
    precondition(length <= input.count && input[(length - 4)..<length].elementsEqual([13, 10, 13, 10]), "the head ends in CRLF CRLF")
    precondition(!authority.isEmpty && !authority.contains(" "), "authority '\(authority)'")
    precondition(ConnectHead.scan(input + [71, 69, 84, 32, 13, 10, 13, 10]) == decision, "what follows the head changes nothing")
    for cut in stride(from: 0, to: length, by: max(1, length / 16)) {
        if case .connect = ConnectHead.scan(Array(input[..<cut])) { preconditionFailure("a prefix (\(cut) of \(length)) was accepted") }
    }
    return 0
}
