/// An IPv4 or IPv6 address, parsed and printed without the C library so that `DNSCore` stays pure.
///
/// IPv6 prints in RFC 5952 canonical form (lower case, longest zero run compressed).
public enum IPAddress: Sendable, Hashable, CustomStringConvertible, Comparable {
    case v4(UInt32)
    case v6(UInt64, UInt64)

    /// The address family, as the CLI prints it.
    public enum Family: String, Sendable, Hashable, Codable {
        case ipv4, ipv6
    }

    public var family: Family {
        if case .v4 = self { return .ipv4 }
        return .ipv6
    }

    /// Parses `192.0.2.1`, `2001:db8::1` or `[2001:db8::1]`. Returns nil for anything else,
    /// including IPv4 parts with leading zeros (ambiguous: octal to some parsers).
    public init?(_ text: some StringProtocol) {
        // Host names are most of what comes here (each lookup asks whether its host is a literal):
        // a byte no address text holds ends it before anything is copied.
        for byte in text.utf8 where !Self.mayAppearInLiteral(byte) { return nil }
        var bytes = Array(text.utf8)
        if bytes.first == UInt8(ascii: "["), bytes.last == UInt8(ascii: "]") {
            bytes = Array(bytes.dropFirst().dropLast())
        }
        if let v4 = Self.parseV4(bytes[...]) {
            self = .v4(v4)
        } else if let v6 = Self.parseV6(bytes) {
            self = v6
        } else {
            return nil
        }
    }

    /// Builds an address from 4 or 16 network-order bytes.
    public init?(bytes: some Collection<UInt8>) {
        let array = Array(bytes)
        switch array.count {
        case 4:
            self = .v4(array.reduce(0) { $0 << 8 | UInt32($1) })
        case 16:
            let high = array[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            let low = array[8..<16].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
            self = .v6(high, low)
        default:
            return nil
        }
    }

    /// Network-order bytes: 4 for IPv4, 16 for IPv6.
    public var bytes: [UInt8] {
        switch self {
        case let .v4(value):
            return (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) }
        case let .v6(high, low):
            return (0..<8).map { UInt8(truncatingIfNeeded: high >> (56 - 8 * $0)) }
                + (0..<8).map { UInt8(truncatingIfNeeded: low >> (56 - 8 * $0)) }
        }
    }

    public static func < (lhs: IPAddress, rhs: IPAddress) -> Bool {
        switch (lhs, rhs) {
        case let (.v4(a), .v4(b)): return a < b
        case (.v4, .v6): return true
        case (.v6, .v4): return false
        case let (.v6(ah, al), .v6(bh, bl)): return (ah, al) < (bh, bl)
        }
    }

    public var description: String {
        switch self {
        case let .v4(value):
            return "\(value >> 24).\(value >> 16 & 0xff).\(value >> 8 & 0xff).\(value & 0xff)"
        case let .v6(high, low) where high == 0 && low >> 32 == 0xffff:
            // IPv4-mapped: the dotted form RFC 5952 §5 recommends.
            return "::ffff:" + IPAddress.v4(UInt32(truncatingIfNeeded: low)).description
        case let .v6(high, low):
            let groups =
                (0..<4).map { UInt16(truncatingIfNeeded: high >> (48 - 16 * $0)) }
                + (0..<4).map { UInt16(truncatingIfNeeded: low >> (48 - 16 * $0)) }
            return Self.formatV6(groups)
        }
    }

    /// The address as a URL host: IPv6 in brackets.
    public var urlHost: String {
        family == .ipv6 ? "[\(description)]" : description
    }

    // MARK: Parsing

    /// Digits, hex letters, `:`, `.` and the brackets of `[v6]`.
    @inline(__always)
    private static func mayAppearInLiteral(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: ":"), UInt8(ascii: "a")...UInt8(ascii: "f"), UInt8(ascii: "A")...UInt8(ascii: "F"),
            UInt8(ascii: "."), UInt8(ascii: "["), UInt8(ascii: "]"):
            return true
        default:
            return false
        }
    }

    private static func parseV4(_ bytes: ArraySlice<UInt8>) -> UInt32? {
        var value: UInt32 = 0
        var parts = 0
        var current: UInt32 = 0
        var digits = 0
        var leadingZero = false
        for byte in bytes {
            if byte == UInt8(ascii: ".") {
                guard digits > 0, parts < 3 else { return nil }
                value = value << 8 | current
                parts += 1
                current = 0
                digits = 0
                leadingZero = false
            } else if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                if digits == 1 && leadingZero { return nil }
                if digits == 0 && byte == UInt8(ascii: "0") { leadingZero = true }
                current = current * 10 + UInt32(byte - UInt8(ascii: "0"))
                digits += 1
                guard current <= 255, digits <= 3 else { return nil }
            } else {
                return nil
            }
        }
        guard parts == 3, digits > 0 else { return nil }
        return value << 8 | current
    }

    private static func parseV6(_ bytes: [UInt8]) -> IPAddress? {
        guard bytes.count >= 2, bytes.count <= 45 else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var sawGap = false
        var index = 0
        if bytes.starts(with: [UInt8(ascii: ":"), UInt8(ascii: ":")]) {
            sawGap = true
            index = 2
        } else if bytes.first == UInt8(ascii: ":") {
            return nil
        }
        while index < bytes.count {
            // An embedded IPv4 address may end the text (e.g. ::ffff:192.0.2.1).
            var end = index
            while end < bytes.count && bytes[end] != UInt8(ascii: ":") { end += 1 }
            let piece = bytes[index..<end]
            if end == bytes.count, piece.contains(UInt8(ascii: ".")) {
                guard let v4 = parseV4(piece) else { return nil }
                let groups = [UInt16(v4 >> 16), UInt16(v4 & 0xffff)]
                if sawGap { tail += groups } else { head += groups }
                index = end
                break
            }
            guard !piece.isEmpty, piece.count <= 4, let group = UInt16(String(decoding: piece, as: UTF8.self), radix: 16)
            else { return nil }
            if sawGap { tail.append(group) } else { head.append(group) }
            index = end
            if index < bytes.count {
                // Skip ':' and detect '::'.
                index += 1
                if index < bytes.count && bytes[index] == UInt8(ascii: ":") {
                    guard !sawGap else { return nil }
                    sawGap = true
                    index += 1
                } else if index == bytes.count {
                    return nil  // trailing single ':'
                }
            }
        }
        let total = head.count + tail.count
        if sawGap {
            guard total <= 7 else { return nil }
        } else {
            guard total == 8 else { return nil }
        }
        let groups = head + Array(repeating: 0, count: 8 - total) + tail
        let high = groups[0..<4].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        let low = groups[4..<8].reduce(UInt64(0)) { $0 << 16 | UInt64($1) }
        return .v6(high, low)
    }

    private static func formatV6(_ groups: [UInt16]) -> String {
        // RFC 5952 §4.2: compress the longest run of two or more zero groups, the first on a tie.
        var bestStart = -1, bestLength = 0, runStart = -1
        for index in 0...8 {
            if index < 8 && groups[index] == 0 {
                if runStart < 0 { runStart = index }
            } else if runStart >= 0 {
                let length = index - runStart
                if length > bestLength && length >= 2 {
                    bestStart = runStart
                    bestLength = length
                }
                runStart = -1
            }
        }
        if bestStart < 0 {
            return groups.map { String($0, radix: 16) }.joined(separator: ":")
        }
        let left = groups[..<bestStart].map { String($0, radix: 16) }.joined(separator: ":")
        let right = groups[(bestStart + bestLength)...].map { String($0, radix: 16) }.joined(separator: ":")
        return left + "::" + right
    }
}

// MARK: - Special-purpose ranges (rebinding guard)

extension IPAddress {
    /// The special-purpose range this address belongs to, or nil for a global unicast address.
    ///
    /// These are the answers the rebinding guard drops unless private answers are allowed:
    /// IPv4 `0.0.0.0/8` unspecified, `10/8`, `172.16/12`, `192.168/16` private (RFC 1918),
    /// `100.64/10` CGNAT (RFC 6598), `127/8` loopback, `169.254/16` link-local,
    /// `192.0.0.0/24` IETF protocol assignments, `192.0.2/24`, `198.51.100/24`, `203.0.113/24`
    /// documentation (RFC 5737), `224/4` multicast, `240/4` reserved and broadcast;
    /// IPv6 `::` unspecified, `::1` loopback, `fc00::/7` unique-local, `fe80::/10` link-local,
    /// `fec0::/10` site-local, `ff00::/8` multicast, `2001:db8::/32` and `3fff::/20` documentation,
    /// `100::/64` discard, the rest of `::/96` (IPv4-compatible), `64:ff9b:1::/48` (local-use
    /// NAT64), and IPv4-mapped, IPv4-translated, NAT64 and 6to4 addresses (`::ffff:0:0/96`,
    /// `::ffff:0:0:0/96`, `64:ff9b::/96`, `2002::/16`) whose embedded IPv4 address is special.
    ///
    /// The benchmarking ranges `198.18.0.0/15` and `2001:2::/48` are deliberately *not* listed:
    /// fake-IP proxies (Clash, Surge) hand them out on purpose, and nothing on the internet routes them.
    public var specialPurposeRange: String? {
        switch self {
        case let .v4(value):
            return Self.v4Ranges.first { value & $0.mask == $0.prefix }?.name
        case let .v6(high, low):
            if high == 0 && low == 0 { return "unspecified" }
            if high == 0 && low == 1 { return "loopback" }
            if high == 0 && low >> 32 == 0xffff {
                return IPAddress.v4(UInt32(truncatingIfNeeded: low)).specialPurposeRange.map { "IPv4-mapped \($0)" }
            }
            if high == 0x0064_ff9b_0000_0000 && low >> 32 == 0 {
                return IPAddress.v4(UInt32(truncatingIfNeeded: low)).specialPurposeRange.map { "NAT64 \($0)" }
            }
            // The rest of ::/96, IPv4-compatible (RFC 4291 §2.5.5.1, deprecated): the kernel dials
            // them over IPv6, and behind a gateway they reach the embedded IPv4 address.
            if high == 0 && low >> 32 == 0 { return "IPv4-compatible" }
            // SIIT's IPv4-translated ::ffff:0:a.b.c.d (RFC 6052 §2.1, RFC 7915).
            if high == 0 && low >> 32 == 0xffff_0000 {
                return IPAddress.v4(UInt32(truncatingIfNeeded: low)).specialPurposeRange.map { "IPv4-translated \($0)" }
            }
            // The local-use NAT64 prefix (RFC 8215): whatever a local translator makes of it.
            if high >> 16 == 0x0064_ff9b_0001 { return "NAT64 local-use" }
            // 6to4 (RFC 3056): the IPv4 address in bits 16-47 is where the packet goes.
            if high >> 48 == 0x2002 {
                return IPAddress.v4(UInt32(truncatingIfNeeded: high >> 16)).specialPurposeRange.map { "6to4 \($0)" }
            }
            let top16 = high >> 48
            if top16 & 0xfe00 == 0xfc00 { return "unique-local" }
            if top16 & 0xffc0 == 0xfe80 { return "link-local" }
            if top16 & 0xffc0 == 0xfec0 { return "site-local" }
            if top16 & 0xff00 == 0xff00 { return "multicast" }
            if high >> 32 == 0x2001_0db8 { return "documentation" }
            if high >> 44 == 0x3fff0 { return "documentation" }
            if high == 0x0100_0000_0000_0000 { return "discard" }
            return nil
        }
    }

    private static let v4Ranges: [(prefix: UInt32, mask: UInt32, name: String)] = [
        (0x0000_0000, 0xff00_0000, "unspecified"),
        (0x0a00_0000, 0xff00_0000, "private"),
        (0x6440_0000, 0xffc0_0000, "CGNAT"),
        (0x7f00_0000, 0xff00_0000, "loopback"),
        (0xa9fe_0000, 0xffff_0000, "link-local"),
        (0xac10_0000, 0xfff0_0000, "private"),
        (0xc000_0000, 0xffff_ff00, "IETF protocol assignments"),
        (0xc000_0200, 0xffff_ff00, "documentation"),
        (0xc0a8_0000, 0xffff_0000, "private"),
        (0xc633_6400, 0xffff_ff00, "documentation"),
        (0xcb00_7100, 0xffff_ff00, "documentation"),
        (0xe000_0000, 0xf000_0000, "multicast"),
        (0xf000_0000, 0xf000_0000, "reserved"),
    ]
}

extension IPAddress {
    /// Parses `IP`, `IPv4:port` or `[IPv6]:port` (a bare IPv6 address has no port): the spelling
    /// of servers and listeners in flags and config files. nil when malformed or the port is not
    /// 1...65535.
    public static func endpoint(_ text: String) -> (address: IPAddress, port: Int?)? {
        if let address = IPAddress(text) { return (address, nil) }
        let host: Substring, port: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]") {
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(after: close)...]
            guard port.first == ":" else { return nil }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[colon...]
        } else {
            return nil
        }
        guard let address = IPAddress(String(host)), let number = Int(port.dropFirst()), (1...65535).contains(number) else { return nil }
        // Brackets are for IPv6 only; an unbracketed IPv6 with a port is ambiguous.
        guard (address.family == .ipv6) == text.hasPrefix("[") else { return nil }
        return (address, number)
    }
}
