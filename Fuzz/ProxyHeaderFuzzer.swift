// libFuzzer entry point: the first bytes of a trusted proxy's connection or datagram through the
// PROXY protocol v2 parser (Sources/DaemonListening/ProxyHeaderWire.swift). Properties: no crash;
// a header it accepts is no longer than the input or the bound, names a 4- or 16-byte address,
// and stays the same decision whatever follows it; every shorter prefix of it is incomplete.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // Most inputs start with the signature and a version 2 byte, so the fuzzer spends its time past them.
    let input = bytes.first.map { $0 & 3 != 0 } == true ? ProxyHeaderWire.signature + [0x20 | (bytes[0] & 1)] + bytes.dropFirst() : bytes
    let decision = ProxyHeaderWire.parse(input)
    guard case let .header(source, length) = decision else { return 0 }
    precondition(length >= 16 && length <= input.count && length <= ProxyHeaderWire.maxLength, "length \(length) of \(input.count)")
    if let source { precondition(source.address.count == 4 || source.address.count == 16, "an address of \(source.address.count) bytes") }
    precondition(ProxyHeaderWire.parse(input + [0x16, 3, 1, 0, 0xa5]) == decision, "what follows the header changes nothing")
    for cut in stride(from: 0, to: length, by: max(1, length / 32)) where ProxyHeaderWire.parse(input[..<cut]) != .incomplete {
        preconditionFailure("a prefix (\(cut) of \(length)) was not incomplete")
    }
    return 0
}
