/// A validated, case-folded DNS name (RFC 1035 §2.3.4, RFC 1123 §2.1).
///
/// Stored in wire form (length-prefixed labels, root label last) with ASCII letters lower-cased,
/// so equality and hashing are DNS's case-insensitive comparison.
///
/// ```swift
/// let name = try DomainName("API.Example.test.")
/// print(name)            // api.example.test
/// ```
public struct DomainName: Sendable, Hashable, CustomStringConvertible {
    /// Wire form, lower-cased: `[3]api[7]example[4]test[0]`.
    public let wire: [UInt8]

    /// The wire bytes in one call: the synthesized hash feeds the hasher byte by byte, and every
    /// lookup hashes its name several times (the cache, its shard, the single flight; BENCHMARKS.md,
    /// "DNS over TLS").
    public func hash(into hasher: inout Hasher) {
        wire.withUnsafeBytes { hasher.combine(bytes: $0) }
    }

    public static func == (lhs: DomainName, rhs: DomainName) -> Bool { lhs.wire == rhs.wire }

    /// The largest wire length of a name (RFC 1035 §3.1).
    public static let maxWireLength = 255
    /// The largest label (RFC 1035 §2.3.4).
    public static let maxLabelLength = 63

    /// The root name `.`.
    public static let root = DomainName(uncheckedWire: [0])

    /// Parses a host name as users type it.
    ///
    /// Accepts letters, digits, `-` and `_` in each label and an optional trailing dot. Rejects an
    /// empty name, empty labels, labels over 63 octets, names over 255 octets in wire form, labels
    /// starting or ending with `-`, and any other character. Non-ASCII names must be given in their
    /// `xn--` (punycode) form.
    /// - Throws: ``DNSError`` with code ``DNSError/Code/invalidName``.
    public init(_ text: String) throws(DNSError) {
        var utf8 = Array(text.utf8)
        if utf8 == [UInt8(ascii: ".")] {
            self = .root
            return
        }
        if utf8.last == UInt8(ascii: ".") { utf8.removeLast() }
        guard !utf8.isEmpty else { throw DNSError(.invalidName, "the host name is empty") }
        guard utf8.count <= 253 else {
            throw DNSError(.invalidName, "the host name is \(utf8.count) characters long (253 at most)")
        }
        var wire: [UInt8] = []
        wire.reserveCapacity(utf8.count + 2)
        var labelStart = 0
        var index = 0
        while index <= utf8.count {
            if index == utf8.count || utf8[index] == UInt8(ascii: ".") {
                let label = utf8[labelStart..<index]
                try Self.validate(label: label, in: text)
                wire.append(UInt8(label.count))
                for byte in label { wire.append(Self.lowercase(byte)) }
                labelStart = index + 1
            }
            index += 1
        }
        wire.append(0)
        self.wire = wire
    }

    /// Reads a name in presentation form as ``description`` writes it: any printable byte, `\DDD`
    /// and `\X` escapes (RFC 1035 §5.1), so every name DNS allows — not only host names — comes
    /// back (`a*b.tracker.test`, `\001x.test`). Letters are case-folded.
    /// - Throws: ``DNSError`` (`invalid_name`) for an empty label, a label over 63 or a name over 255
    ///   octets, or an escape that is cut short or over 255.
    package init(presentation text: String) throws(DNSError) {
        let utf8 = Array(text.utf8)
        if utf8.isEmpty || utf8 == [UInt8(ascii: ".")] {
            self = .root
            return
        }
        var wire: [UInt8] = [0]
        var labelStart = 0
        var labelOpen = true
        var index = 0
        func closeLabel() throws(DNSError) {
            let length = wire.count - labelStart - 1
            guard length > 0 else { throw DNSError(.invalidName, "'\(text)' has an empty label") }
            guard length <= Self.maxLabelLength else { throw DNSError(.invalidName, "'\(text)' has a label over 63 octets") }
            wire[labelStart] = UInt8(length)
        }
        while index < utf8.count {
            let byte = utf8[index]
            index += 1
            switch byte {
            case UInt8(ascii: "."):
                try closeLabel()
                labelOpen = false
                if index < utf8.count {
                    labelStart = wire.count
                    wire.append(0)
                    labelOpen = true
                }
            case UInt8(ascii: "\\"):
                guard index < utf8.count else { throw DNSError(.invalidName, "'\(text)' ends in an escape") }
                if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(utf8[index]) {
                    guard index + 3 <= utf8.count, utf8[index..<index + 3].allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
                    else { throw DNSError(.invalidName, "'\(text)' has an escape that is not \\DDD") }
                    let value = utf8[index..<index + 3].reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
                    guard value <= 255 else { throw DNSError(.invalidName, "'\(text)' has an escape over 255") }
                    wire.append(Self.lowercase(UInt8(value)))
                    index += 3
                } else {
                    wire.append(Self.lowercase(utf8[index]))
                    index += 1
                }
            default:
                wire.append(Self.lowercase(byte))
            }
            guard wire.count < Self.maxWireLength else { throw DNSError(.invalidName, "'\(text)' is over 255 octets") }
        }
        if labelOpen { try closeLabel() }
        wire.append(0)
        self.wire = wire
    }

    /// Whether the name is a host name as ``init(_:)`` accepts one (letters, digits, `-` and `_` in
    /// each label, no label starting or ending with `-`): read from the wire, without a parse. A
    /// name DNS allows but a host name does not (`a*b.example`) is relayed by the daemon, not looked
    /// up as a host.
    package var isHostName: Bool {
        var index = 0
        while index < wire.count, wire[index] != 0 {
            let length = Int(wire[index])
            let label = wire[(index + 1)..<min(index + 1 + length, wire.count)]
            guard label.count == length, label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-") else { return false }
            for byte in label {
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    continue
                default:
                    return false
                }
            }
            index += 1 + length
        }
        return true
    }

    /// Builds a name from wire bytes already validated by the decoder and case-folded.
    package init(uncheckedWire: [UInt8]) {
        self.wire = uncheckedWire
    }

    private static func validate(label: ArraySlice<UInt8>, in text: String) throws(DNSError) {
        guard !label.isEmpty else {
            throw DNSError(.invalidName, "'\(text)' has an empty label")
        }
        guard label.count <= maxLabelLength else {
            throw DNSError(.invalidName, "'\(text)' has a label of \(label.count) characters (63 at most)")
        }
        for byte in label {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                continue
            case 0x80...:
                throw DNSError(.invalidName, "'\(text)' is not ASCII; give internationalised names in xn-- form")
            default:
                throw DNSError(.invalidName, "'\(text)' contains the character \(Self.printable(byte))")
            }
        }
        if label.first == UInt8(ascii: "-") || label.last == UInt8(ascii: "-") {
            throw DNSError(.invalidName, "'\(text)' has a label that starts or ends with '-'")
        }
    }

    private static func printable(_ byte: UInt8) -> String {
        if byte == 0x20 { return "' ' (space)" }
        return (0x21...0x7e).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "0x" + String(byte, radix: 16)
    }

    @inline(__always)
    static func lowercase(_ byte: UInt8) -> UInt8 {
        (byte >= 0x41 && byte <= 0x5a) ? byte | 0x20 : byte
    }

    /// The number of labels, not counting the root.
    public var labelCount: Int {
        var count = 0
        var index = 0
        while wire[index] != 0 {
            count += 1
            index += Int(wire[index]) + 1
        }
        return count
    }

    /// Presentation form without the trailing dot; bytes outside printable ASCII and the
    /// characters `.` and `\` inside labels are escaped as `\DDD` (RFC 1035 §5.1).
    public var description: String {
        if wire == [0] { return "." }
        var out: [UInt8] = []
        out.reserveCapacity(wire.count)
        var index = 0
        while wire[index] != 0 {
            let length = Int(wire[index])
            if !out.isEmpty { out.append(UInt8(ascii: ".")) }
            for byte in wire[(index + 1)...(index + length)] {
                if byte == UInt8(ascii: ".") || byte == UInt8(ascii: "\\") || byte < 0x21 || byte > 0x7e {
                    out.append(UInt8(ascii: "\\"))
                    let digits = String(byte)
                    out.append(contentsOf: Array(repeating: UInt8(ascii: "0"), count: 3 - digits.count))
                    out.append(contentsOf: digits.utf8)
                } else {
                    out.append(byte)
                }
            }
            index += length + 1
        }
        return String(decoding: out, as: UTF8.self)
    }
}
