/// The PROXY protocol v2 header's wire form, read without NIO (fuzzed on its own:
/// Fuzz/ProxyHeaderFuzzer.swift); ``ProxyProtocolV2`` gives what it reads as NIO addresses.
public enum ProxyHeaderWire {
    /// The 12-byte signature every header starts with.
    public static let signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    /// The largest header accepted: the 16 fixed bytes and 1,024 of addresses and TLVs (an IPv6
    /// address block is 36; dnsdist adds a few TLVs). A header may say up to 65,535: the rest is
    /// refused rather than buffered.
    public static let maxLength = 16 + 1_024

    /// What the bytes at the start of a stream or datagram are.
    public enum Parsed: Equatable, Sendable {
        /// A whole header of `length` bytes. `source` is the client it relays (an address of 4 or
        /// 16 bytes and a port): nil for LOCAL (the proxy speaking for itself, as in health
        /// checks) or for an address family other than IPv4 and IPv6 (UNSPEC, UNIX), where the
        /// connection's own address stands.
        case header(source: Source?, length: Int)
        /// A prefix of a header that may still be valid: more bytes are needed.
        case incomplete
        /// Not a version 2 header, or one that breaks the specification; says how.
        case invalid(String)
    }

    /// A relayed client's address bytes and port.
    public struct Source: Equatable, Sendable {
        public var address: [UInt8]
        public var port: Int
    }

    /// Reads a header from the start of `bytes` (at most ``maxLength`` of them are looked at).
    public static func parse(_ bytes: some Collection<UInt8>) -> Parsed {
        var iterator = bytes.makeIterator()
        var head: [UInt8] = []
        head.reserveCapacity(16)
        while head.count < 16, let byte = iterator.next() { head.append(byte) }
        for (index, byte) in head.prefix(12).enumerated() where byte != signature[index] {
            return .invalid("no PROXY protocol v2 signature")
        }
        guard head.count == 16 else { return .incomplete }
        guard head[12] >> 4 == 2 else { return .invalid("PROXY protocol version \(head[12] >> 4), not 2") }
        let command = head[12] & 0x0f
        guard command <= 1 else { return .invalid("PROXY protocol command \(command) (0 LOCAL and 1 PROXY are defined)") }
        let family = head[13] >> 4, transport = head[13] & 0x0f
        guard family <= 3, transport <= 2 else { return .invalid("PROXY protocol address family/protocol byte \(head[13]) is not defined") }
        let length = Int(head[14]) << 8 | Int(head[15])
        guard 16 + length <= maxLength else { return .invalid("a PROXY protocol header of \(16 + length) bytes, over \(maxLength)") }
        if command == 0 {
            // LOCAL: the balancer speaking for itself; its block, family included, is discarded
            // unread (§2.2), whatever it holds.
            var skipped = 0
            while skipped < length, iterator.next() != nil { skipped += 1 }
            return skipped == length ? .header(source: nil, length: 16 + length) : .incomplete
        }
        let addressLength =
            switch family {
            case 1: 12
            case 2: 36
            case 3: 216
            default: 0
            }
        guard length >= addressLength else {
            return .invalid("PROXY protocol addresses of family \(family) need \(addressLength) bytes, the header has \(length)")
        }
        var rest: [UInt8] = []
        rest.reserveCapacity(length)
        while rest.count < length, let byte = iterator.next() { rest.append(byte) }
        guard rest.count == length else { return .incomplete }
        // UNSPEC's bytes are to be skipped unread (the specification: "the receiver … must ignore
        // address information"); after known addresses come TLVs, which must fit.
        guard family == 0 || tlvsAreWellFormed(rest[addressLength...]) else { return .invalid("PROXY protocol TLVs run past the header") }
        switch family {
        case 1: return .header(source: Source(address: Array(rest[0..<4]), port: Int(rest[8]) << 8 | Int(rest[9])), length: 16 + length)
        case 2:
            // An IPv4 client written as IPv6 (::ffff:a.b.c.d) is that IPv4 client (F63-3): logged,
            // anonymized and rate-limited as one.
            let address = Array(rest[0..<16])
            let mapped = address.prefix(10).allSatisfy { $0 == 0 } && address[10] == 0xff && address[11] == 0xff
            return .header(
                source: Source(address: mapped ? Array(address.suffix(4)) : address, port: Int(rest[32]) << 8 | Int(rest[33])), length: 16 + length)
        default: return .header(source: nil, length: 16 + length)
        }
    }

    /// Whether `tlvs` is a sequence of type, 2-byte length and value that ends exactly at its end.
    static func tlvsAreWellFormed(_ tlvs: ArraySlice<UInt8>) -> Bool {
        var index = tlvs.startIndex
        while index < tlvs.endIndex {
            guard tlvs.endIndex - index >= 3 else { return false }
            let length = Int(tlvs[index + 1]) << 8 | Int(tlvs[index + 2])
            guard length <= tlvs.endIndex - index - 3 else { return false }
            index += 3 + length
        }
        return true
    }
}
