// libFuzzer entry point: the DNSSEC record decoders (DNSKEY, RRSIG, DS, NSEC, NSEC3 with its
// base32hex owner and type bitmaps) on arbitrary RDATA, the key tag, and the canonical-order
// coverage checks of what decodes. The first byte picks the decoder. Properties: no trap; what
// decodes re-reads its own fields consistently.

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let selector = bytes.first else { return 0 }
    let rdata = Array(bytes.dropFirst())
    switch selector % 5 {
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
    case 2:
        guard let ds = try? DSRecord(rdata: rdata) else { return 0 }
        precondition(ds.digest.count == rdata.count - 4, "DS fields")
    case 3:
        let owner = DomainName(uncheckedWire: [3, 0x77, 0x77, 0x77, 3, 0x73, 0x69, 0x67, 4, 0x74, 0x65, 0x73, 0x74, 0])
        guard let nsec = try? NSECRecord(owner: owner, rdata: rdata) else { return 0 }
        precondition(nsec.next.wire.last == 0 && nsec.next.wire.count <= 255, "a whole, bounded next name")
        precondition(nsec.types.allSatisfy { $0 <= UInt16.max }, "types")
        _ = nsec.covers(owner)
        _ = nsec.covers(nsec.next)
        _ = CanonicalOrder.less(nsec.next, owner)
    default:
        // The owner's first label from the input: a length byte, then that many bytes, then RDATA.
        let length = Int(rdata.first ?? 0) % 64
        guard rdata.count > length else { return 0 }
        let label = Array(rdata[1..<(1 + length)])
        guard length > 0 else { return 0 }
        let owner = DomainName(uncheckedWire: [UInt8(length)] + label + [3, 0x73, 0x69, 0x67, 4, 0x74, 0x65, 0x73, 0x74, 0])
        guard let nsec3 = try? NSEC3Record(owner: owner, rdata: Array(rdata[(1 + length)...])) else { return 0 }
        precondition(nsec3.ownerHash.count == nsec3.nextHash.count && !nsec3.nextHash.isEmpty, "hash lengths")
        precondition(nsec3.zone.wire == [3, 0x73, 0x69, 0x67, 4, 0x74, 0x65, 0x73, 0x74, 0], "the zone is the owner's parent")
        _ = nsec3.covers(nsec3.nextHash)
        _ = nsec3.covers(nsec3.ownerHash)
    }
    return 0
}
