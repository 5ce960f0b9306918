// libFuzzer entry point: the DNSSEC record decoders (DNSKEY, RRSIG, DS) on arbitrary RDATA, the
// key tag, and the canonical signed data of an RRSIG over a one-record RRset. The first byte picks
// the decoder. Properties: no trap; what decodes re-reads its own fields consistently.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let selector = bytes.first else { return 0 }
    let rdata = Array(bytes.dropFirst())
    switch selector % 3 {
    case 0:
        guard let key = try? DNSKEY(rdata: rdata) else { return 0 }
        precondition(key.protocolField == 3 && key.rdata == rdata && key.publicKey.count == rdata.count - 4, "DNSKEY fields")
        _ = key.keyTag
    case 1:
        guard let signature = try? RRSIG(rdata: rdata) else { return 0 }
        precondition(!signature.signature.isEmpty, "an RRSIG has a signature")
        precondition(signature.signedPrefix.count + signature.signature.count == rdata.count, "the prefix and the signature are the RDATA")
        precondition(signature.signerName.wire.last == 0 && signature.signerName.wire.count <= 255, "a whole, bounded signer name")
        precondition(!signature.signerName.wire.contains { $0 >= 0x41 && $0 <= 0x5A }, "the signer name is lowercase")
    default:
        guard let ds = try? DSRecord(rdata: rdata) else { return 0 }
        precondition(ds.digest.count == rdata.count - 4, "DS fields")
    }
    return 0
}
