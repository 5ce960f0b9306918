import DNSCore

#if canImport(Glibc)
import Glibc
#endif

// The query log's records read back and formatted as JSON lines. Apart from QueryLog.swift, with
// DNSCore alone, so that the formatter is also built as a libFuzzer target with AddressSanitizer
// (Fuzz/QueryLogFuzzer.swift, Scripts/fuzz.sh querylog).

/// A query-log entry laid out as bytes (``QueryLog/Record/append(_:to:)`` writes them).
enum QueryLogRecord {
    /// A response is kept up to this many bytes (BIND's default EDNS size): the answers that fit
    /// are listed, the rest of a larger one is not.
    static let maxResponseBytes = 1_232

    /// One record read back: views into the batch, valid while it is.
    struct View {
        var time: UInt64
        var latency: UInt64
        var clientFamily: UInt8
        var client: UnsafeRawBufferPointer
        var type: UInt16
        var name: UnsafeRawBufferPointer
        var transport: UnsafeRawBufferPointer?
        var source: UnsafeRawBufferPointer?
        var dnssec: UnsafeRawBufferPointer?
        var verdict: UnsafeRawBufferPointer?
        var upstream: UnsafeRawBufferPointer?
        var response: UnsafeRawBufferPointer
    }

    /// Reads records written by ``append(_:to:)``; stops at the first that does not fit.
    struct Cursor {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

        mutating func next() -> View? {
            guard offset + 35 <= bytes.count else { return nil }
            let time = bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self).littleEndian
            let latency = bytes.loadUnaligned(fromByteOffset: offset + 8, as: UInt64.self).littleEndian
            let family = bytes[offset + 16]
            let client = UnsafeRawBufferPointer(rebasing: bytes[(offset + 17)..<(offset + 33)])
            let type = bytes.loadUnaligned(fromByteOffset: offset + 33, as: UInt16.self).littleEndian
            offset += 35
            guard let name = take(Int(byte() ?? 0)) else { return nil }
            let transport = shortString(), source = shortString(), dnssec = shortString(), verdict = shortString()
            guard offset + 2 <= bytes.count else { return nil }
            let upstreamLength = bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self).littleEndian
            offset += 2
            let upstream = upstreamLength == 0xffff ? nil : take(Int(upstreamLength))
            guard offset + 2 <= bytes.count else { return nil }
            let responseLength = bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self).littleEndian
            offset += 2
            guard let response = take(Int(responseLength)) else { return nil }
            return View(
                time: time, latency: latency, clientFamily: family, client: client, type: type, name: name, transport: transport,
                source: source, dnssec: dnssec, verdict: verdict, upstream: upstream, response: response)
        }

        private mutating func byte() -> UInt8? {
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        private mutating func take(_ count: Int) -> UnsafeRawBufferPointer? {
            guard offset + count <= bytes.count else { return nil }
            defer { offset += count }
            return UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)])
        }

        private mutating func shortString() -> UnsafeRawBufferPointer? {
            guard let length = byte(), length != 0xff else { return nil }
            return take(Int(length))
        }
    }
}

/// Where lines are formatted: memory of its own, written with plain stores rather than `Array`'s
/// per-append uniqueness check (the writer's CPU is taken from the serving threads on a busy core).
///
/// Bound: every store is preceded, in the same method, by ``reserve(_:)`` for the bytes it writes,
/// which grows the memory when they do not fit; nothing writes past `capacity`, whatever a record
/// holds (a relayed answer of compressed CNAMEs makes a line of ~85 KB from 1,232 bytes: F19 of
/// redteam-4). The writer flushes before a line when less than ``flushReserve`` is left, so lines
/// of the usual size never grow it. Tested at the bound in `QueryLogTests` and fuzzed with
/// AddressSanitizer (Fuzz/QueryLogFuzzer.swift).
struct QueryLogLine {
    private(set) var base: UnsafeMutablePointer<UInt8>
    private(set) var capacity: Int
    private(set) var count = 0
    /// Free room the writer keeps before each line: room for any line of the usual size.
    static let flushReserve = 64 * 1024

    init(capacity: Int) {
        precondition(capacity > 0)
        base = .allocate(capacity: capacity)
        self.capacity = capacity
    }

    func deallocate() { base.deallocate() }

    /// The formatted lines.
    var written: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }

    /// Forgets the lines (keeps the memory).
    mutating func removeAll() { count = 0 }

    /// Makes room for `extra` more bytes.
    @inline(__always) mutating func reserve(_ extra: Int) {
        if _slowPath(extra > capacity &- count) { grow(extra) }
    }

    @inline(never) private mutating func grow(_ extra: Int) {
        precondition(extra >= 0 && extra <= Int.max / 4 - count)
        var size = capacity
        while size - count < extra { size *= 2 }
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: size)
        larger.initialize(from: base, count: count)
        base.deallocate()
        base = larger
        capacity = size
    }

    @inline(__always) mutating func byte(_ value: UInt8) {
        reserve(1)
        base[count] = value
        count += 1
    }

    mutating func bytes(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        reserve(bytes.count)
        (base + count).update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
        count += bytes.count
    }

    mutating func text(_ text: StaticString) {
        bytes(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// A non-negative integer in decimal (a negative one is written as 0).
    mutating func decimal(_ value: Int) {
        let value = max(0, value)
        var digits = 1
        var limit = 10
        while value >= limit, digits < 19 {
            digits += 1
            limit &*= 10
        }
        self.digits(value, width: digits)
    }

    /// `value` (non-negative) with leading zeros to `width` digits (at most 19).
    mutating func digits(_ value: Int, width: Int) {
        let width = min(max(width, 1), 19)
        reserve(width)
        var rest = max(0, value)
        for index in stride(from: count + width - 1, through: count, by: -1) {
            base[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
        count += width
    }

    /// Bytes as a JSON string's contents (quotes, backslashes and controls escaped).
    mutating func escaped(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) else { return self.bytes(bytes) }
        let hex: StaticString = "0123456789abcdef"
        for value in bytes {
            switch value {
            case 0x22, 0x5c:
                byte(0x5c)
                byte(value)
            case 0..<0x20:
                text("\\u00")
                byte(hex.utf8Start[Int(value >> 4)])
                byte(hex.utf8Start[Int(value & 0x0f)])
            default: byte(value)
            }
        }
    }

    mutating func ipv4(_ bytes: UnsafeRawBufferPointer) {
        for index in 0..<4 {
            if index > 0 { byte(UInt8(ascii: ".")) }
            decimal(Int(bytes[index]))
        }
    }
}

// MARK: Formatting

/// Formats lines straight into bytes: the writer's cost is CPU the serving threads do not get
/// on a busy core, so nothing here makes a string, an array or a decoded message per entry
/// (but for AAAA answers, CNAME targets and unusual types, which take the slow path).
struct QueryLogFormatter {
    /// Client addresses are cut to these prefixes (nil: whole).
    let anonymizeIPv4: Int?
    let anonymizeIPv6: Int?
    /// `"YYYY-MM-DDTHH:MM:SS` of the last second formatted.
    private var second: UInt64 = .max
    private var secondText: [UInt8] = []

    init(anonymizeIPv4: Int?, anonymizeIPv6: Int?) {
        self.anonymizeIPv4 = anonymizeIPv4
        self.anonymizeIPv6 = anonymizeIPv6
    }

    mutating func append(_ record: QueryLogRecord.View, to out: inout QueryLogLine) {
        let seconds = record.time / 1_000_000_000
        if seconds != second {
            second = seconds
            secondText = Array(Self.timestamp(seconds: seconds).utf8)
        }
        out.text(#"{"time":""#)
        secondText.withUnsafeBytes { out.bytes($0) }
        out.byte(UInt8(ascii: "."))
        out.digits(Int(record.time / 1_000_000 % 1000), width: 3)
        out.text(#"Z""#)
        if record.clientFamily != 0 {
            out.text(#","client":""#)
            let address =
                record.clientFamily == 4
                ? IPAddress.v4(
                    UInt32(record.client[0]) << 24 | UInt32(record.client[1]) << 16 | UInt32(record.client[2]) << 8 | UInt32(record.client[3]))
                : IPAddress(bytes: record.client)!
            switch Self.anonymized(address, ipv4: anonymizeIPv4, ipv6: anonymizeIPv6) {
            case let .v4(value):
                withUnsafeBytes(of: value.bigEndian) { out.ipv4($0) }
            case let other:
                var text = other.description
                text.withUTF8 { out.bytes(UnsafeRawBufferPointer($0)) }
            }
            out.byte(UInt8(ascii: "\""))
        }
        string(#","transport":""#, record.transport, to: &out)
        out.text(#","name":""#)
        Self.name(record.name, to: &out)
        out.text(#"","type":""#)
        Self.type(record.type, to: &out)
        out.byte(UInt8(ascii: "\""))
        let response = record.response
        let rcode = response.count >= 4 ? Int(response[3] & 0x0f) : 2
        out.text(#","rcode":""#)
        switch rcode {
        case 0: out.text("NOERROR")
        case 1: out.text("FORMERR")
        case 2: out.text("SERVFAIL")
        case 3: out.text("NXDOMAIN")
        case 4: out.text("NOTIMP")
        case 5: out.text("REFUSED")
        default:
            out.text("RCODE")
            out.decimal(rcode)
        }
        out.byte(UInt8(ascii: "\""))
        Self.answers(of: response, to: &out)
        string(#","source":""#, record.source, to: &out)
        string(#","upstream":""#, record.upstream, to: &out)
        string(#","dnssec":""#, record.dnssec, to: &out)
        string(#","verdict":""#, record.verdict, to: &out)
        out.text(#","latency_ms":"#)
        let micros = Int(min(record.latency, 1 << 50) / 1_000)
        out.decimal(micros / 1000)
        out.byte(UInt8(ascii: "."))
        out.digits(micros % 1000, width: 3)
        out.text("}\n")
    }

    /// `key` (which opens the string) and the value, when there is one.
    private func string(_ key: StaticString, _ value: UnsafeRawBufferPointer?, to out: inout QueryLogLine) {
        guard let value else { return }
        out.text(key)
        out.escaped(value)
        out.byte(UInt8(ascii: "\""))
    }

    /// A wire-form name in presentation form, inside a JSON string, as ``/DNSCore/DomainName``
    /// writes it: printable ASCII as it is (`"` JSON-escaped); a dot, a backslash and any other byte as
    /// `\DDD` (RFC 1035 §5.1; the backslash itself JSON-escaped).
    static func name(_ wire: UnsafeRawBufferPointer, to out: inout QueryLogLine) {
        guard wire.count > 1 else { return out.byte(UInt8(ascii: ".")) }
        var index = 0
        while index < wire.count, wire[index] != 0 {
            let length = Int(wire[index])
            guard index + 1 + length <= wire.count else { return }
            if index > 0 { out.byte(UInt8(ascii: ".")) }
            for value in wire[(index + 1)..<(index + 1 + length)] {
                switch value {
                case UInt8(ascii: "."), UInt8(ascii: "\\"), 0..<0x21, 0x7f...:
                    out.text("\\\\")
                    out.digits(Int(value), width: 3)
                case UInt8(ascii: "\""):
                    out.text("\\\"")
                default:
                    out.byte(value)
                }
            }
            index += 1 + length
        }
    }

    static func type(_ value: UInt16, to out: inout QueryLogLine) {
        switch value {
        case 1: out.text("A")
        case 28: out.text("AAAA")
        case 5: out.text("CNAME")
        case 65: out.text("HTTPS")
        default:
            var text = RecordType(rawValue: value).description
            text.withUTF8 { out.escaped(UnsafeRawBufferPointer($0)) }
        }
    }

    /// `"answers":[…]` (A and AAAA as addresses, CNAME as `CNAME target`, other types by name)
    /// and `"ede":N`, read by walking the response's sections; the answers listed are those
    /// that walk cleanly (a response cut at ``Record/maxResponseBytes`` lists what fits).
    static func answers(of response: UnsafeRawBufferPointer, to out: inout QueryLogLine) {
        guard response.count >= 12 else { return }
        func count(_ section: Int) -> Int { Int(response[4 + 2 * section]) << 8 | Int(response[5 + 2 * section]) }
        var index = 12
        for _ in 0..<count(0) {
            guard let end = WireQuestion.skipName(response, from: index), end + 4 <= response.count else { return }
            index = end + 4
        }
        out.text(#","answers":["#)
        var listed = 0
        var ede: Int?
        var cnames = 0
        var decoded: [DNSMessage.Record]?
        walk: for section in 1...3 {
            for _ in 0..<count(section) {
                guard let end = WireQuestion.skipName(response, from: index), end + 10 <= response.count else { break walk }
                let type = Int(response[end]) << 8 | Int(response[end + 1])
                let length = Int(response[end + 8]) << 8 | Int(response[end + 9])
                let data = end + 10
                guard data + length <= response.count else { break walk }
                if section == 1 {
                    if listed > 0 { out.byte(UInt8(ascii: ",")) }
                    listed += 1
                    out.byte(UInt8(ascii: "\""))
                    switch (type, length) {
                    case (1, 4):
                        out.ipv4(UnsafeRawBufferPointer(rebasing: response[data..<(data + 4)]))
                    case (28, 16):
                        var text = IPAddress(bytes: UnsafeRawBufferPointer(rebasing: response[data..<(data + 16)]))!.description
                        text.withUTF8 { out.bytes(UnsafeRawBufferPointer($0)) }
                    case (5, _):
                        // Rare enough to decode the message for (compression pointers).
                        if decoded == nil {
                            decoded = (try? DNSMessage(decoding: Array(response)))?.answers.filter { $0.type == .cname } ?? []
                        }
                        var target = "?"
                        if let aliases = decoded, cnames < aliases.count, case let .cname(name) = aliases[cnames].data {
                            target = name.description
                        }
                        cnames += 1
                        out.text("CNAME ")
                        target.withUTF8 { out.escaped(UnsafeRawBufferPointer($0)) }
                    default:
                        Self.type(UInt16(type), to: &out)
                    }
                    out.byte(UInt8(ascii: "\""))
                } else if section == 3, type == 41 {
                    var option = data
                    while option + 4 <= data + length {
                        let code = Int(response[option]) << 8 | Int(response[option + 1])
                        let size = Int(response[option + 2]) << 8 | Int(response[option + 3])
                        if code == 15, size >= 2, option + 6 <= data + length { ede = Int(response[option + 4]) << 8 | Int(response[option + 5]) }
                        option += 4 + size
                    }
                }
                index = data + length
            }
        }
        out.byte(UInt8(ascii: "]"))
        if let ede {
            out.text(#","ede":"#)
            out.decimal(ede)
        }
    }

    /// The client address with the bits past the configured prefix zeroed (none: as it is).
    static func anonymized(_ address: IPAddress, ipv4: Int?, ipv6: Int?) -> IPAddress {
        switch address {
        case let .v4(value):
            guard let prefix = ipv4 else { return address }
            return .v4(prefix == 0 ? 0 : value & ~UInt32(0) << (32 - UInt32(prefix)))
        case let .v6(high, low):
            guard let prefix = ipv6 else { return address }
            let highMask: UInt64 = prefix >= 64 ? ~0 : (prefix == 0 ? 0 : ~UInt64(0) << (64 - UInt64(prefix)))
            let lowMask: UInt64 = prefix <= 64 ? 0 : (prefix >= 128 ? ~0 : ~UInt64(0) << (128 - UInt64(prefix)))
            return .v6(high & highMask, low & lowMask)
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS`, UTC.
    static func timestamp(seconds: UInt64) -> String {
        var value = time_t(seconds)
        var parts = tm()
        gmtime_r(&value, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return
            "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
    }
}
