import CoreMetrics
import DNSCore
import Foundation
import NIOCore
import ResolverConfig
import Synchronization

/// The query log (`query_log:`): one JSON line per DNS question the daemon answered, over the stub
/// (UDP, TCP) or DoH, written by a thread of its own.
///
/// The serving path only appends an entry to a bounded buffer under a lock held for that append, and
/// wakes the writer: it never formats, never touches the file, never waits. A full buffer drops the
/// entry and counts it (`httpdns_query_log_entries_total{outcome="dropped"}`). The file is rotated by
/// size (`queries.jsonl` → `queries.jsonl.1` → … `.keep`), reopened on SIGHUP (for an external
/// logrotate too), and flushed on stop.
///
/// ```json
/// {"time":"2026-11-26T19:50:01.123Z","client":"127.0.0.0","transport":"udp","name":"www.hd.test","type":"A",
///  "rcode":"NOERROR","answers":["198.18.0.10"],"source":"cache","upstream":"https://…","latency_ms":0.04}
/// ```
final class QueryLog: Sendable {
    /// What an entry says, kept raw until the writer formats it.
    struct Entry: Sendable {
        /// Wall time, nanoseconds since 1970 (CLOCK_REALTIME).
        var time: UInt64
        var client: SocketAddress?
        var transport: String
        var query: DNSQuery
        var response: [UInt8]
        var provenance: DNSAnswers.Provenance?
        var verdict: String?
        var latencyNanoseconds: UInt64
    }

    let settings: DaemonSettings.QueryLog
    private let buffer = Mutex<(entries: [Entry], reopen: Bool, stopped: Bool)>(([], false, false))
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let written: Counter
    private let dropped: Counter

    init(settings: DaemonSettings.QueryLog, metrics: any MetricsFactory) {
        self.settings = settings
        written = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "written")], factory: metrics)
        dropped = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "dropped")], factory: metrics)
        let thread = Thread { [self] in run() }
        thread.name = "query-log"
        thread.start()
    }

    /// Adds an entry, or drops it when the buffer is full. Never blocks beyond the append.
    func record(_ entry: Entry) {
        // No wake-up here: the writer looks every ``interval``, so the serving path makes no
        // system call for the log.
        let taken = buffer.withLock { buffer -> Bool in
            guard !buffer.stopped, buffer.entries.count < settings.bufferEntries else { return false }
            buffer.entries.append(entry)
            return true
        }
        if !taken { dropped.increment() }
    }

    /// How often the writer takes what the buffer holds.
    static let interval: DispatchTimeInterval = .milliseconds(50)

    /// Closes and reopens the file at the next write (SIGHUP).
    func reopen() {
        buffer.withLock { $0.reopen = true }
        wake.signal()
    }

    /// Writes what is buffered and stops the writer (waits at most 2 s).
    func stop() {
        buffer.withLock { $0.stopped = true }
        wake.signal()
        _ = finished.wait(timeout: .now() + 2)
    }

    // MARK: The writer thread

    private func run() {
        var file: Int32 = -1
        var size = 0
        var formatter = Formatter(settings: settings)
        defer {
            if file >= 0 { close(file) }
            finished.signal()
        }
        // Two buffers, swapped under the lock: neither side allocates a new one per batch.
        var entries: [Entry] = []
        var text: [UInt8] = []
        while true {
            _ = wake.wait(timeout: .now() + Self.interval)
            entries.removeAll(keepingCapacity: true)
            let (reopen, stopped) = buffer.withLock { buffer in
                swap(&buffer.entries, &entries)
                defer { buffer.reopen = false }
                return (buffer.reopen, buffer.stopped)
            }
            if reopen, file >= 0 {
                close(file)
                file = -1
            }
            if !entries.isEmpty {
                text.removeAll(keepingCapacity: true)
                for entry in entries { formatter.append(entry, to: &text) }
                if file < 0 { (file, size) = open() }
                if file >= 0 {
                    if size + text.count > settings.maxBytes, size > 0 {
                        close(file)
                        rotate()
                        (file, size) = open()
                    }
                    if file >= 0 {
                        size += writeAll(file, text)
                        written.increment(by: Int64(entries.count))
                    }
                }
            }
            if stopped { return }
        }
    }

    private func open() -> (Int32, Int) {
        let file = Glibc.open(settings.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o640)
        guard file >= 0 else { return (-1, 0) }
        var info = stat()
        return (file, fstat(file, &info) == 0 ? Int(info.st_size) : 0)
    }

    /// `path.N-1` → `path.N`, …, `path` → `path.1`; the oldest beyond `keep` is removed.
    private func rotate() {
        let path = settings.path
        unlink("\(path).\(settings.keep)")
        if settings.keep > 1 {
            for index in stride(from: settings.keep - 1, through: 1, by: -1) { rename("\(path).\(index)", "\(path).\(index + 1)") }
        }
        if settings.keep > 0 { rename(path, "\(path).1") } else { unlink(path) }
    }

    private func writeAll(_ file: Int32, _ bytes: [UInt8]) -> Int {
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { Glibc.write(file, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            offset += count
        }
        return offset
    }

    // MARK: Formatting

    /// Formats lines straight into bytes: the writer's cost is CPU the serving threads do not get
    /// on a busy core, so nothing here makes a string, a dictionary or a decoded message per entry.
    struct Formatter {
        let settings: DaemonSettings.QueryLog
        /// `"YYYY-MM-DDTHH:MM:SS` of the last second formatted.
        private var second: UInt64 = .max
        private var secondText: [UInt8] = []

        init(settings: DaemonSettings.QueryLog) { self.settings = settings }

        mutating func append(_ entry: Entry, to out: inout [UInt8]) {
            let seconds = entry.time / 1_000_000_000
            if seconds != second {
                second = seconds
                secondText = Array(QueryLog.timestamp(seconds: seconds).utf8)
            }
            Self.append(#"{"time":""#, to: &out)
            out.append(contentsOf: secondText)
            out.append(UInt8(ascii: "."))
            Self.digits(Int(entry.time / 1_000_000 % 1000), width: 3, to: &out)
            Self.append(#"Z""#, to: &out)
            if let client = entry.client.flatMap(Self.address) {
                field("client", to: &out)
                out.append(UInt8(ascii: "\""))
                Self.write(QueryLog.anonymized(client, settings), to: &out)
                out.append(UInt8(ascii: "\""))
            }
            string("transport", entry.transport, to: &out)
            field("name", to: &out)
            Self.write(name: entry.query.question.name, to: &out)
            string("type", entry.query.question.type.description, to: &out)
            let response = entry.response
            let rcode = response.count >= 4 ? Int(response[3] & 0x0f) : 2
            string("rcode", rcode < Self.rcodes.count ? Self.rcodes[rcode] : "RCODE\(rcode)", to: &out)
            Self.answers(of: response, to: &out)
            if let provenance = entry.provenance {
                string("source", provenance.source, to: &out)
                if let upstream = provenance.upstream { string("upstream", upstream, to: &out) }
                if let dnssec = provenance.dnssec { string("dnssec", dnssec, to: &out) }
            }
            if let verdict = entry.verdict { string("verdict", verdict, to: &out) }
            field("latency_ms", to: &out)
            let micros = Int(min(entry.latencyNanoseconds, 1 << 50) / 1_000)
            Self.decimal(micros / 1000, to: &out)
            out.append(UInt8(ascii: "."))
            Self.digits(micros % 1000, width: 3, to: &out)
            Self.append("}\n", to: &out)
        }

        private func field(_ key: StaticString, to out: inout [UInt8]) {
            Self.append(#",""#, to: &out)
            Self.append(key, to: &out)
            Self.append(#"":"#, to: &out)
        }

        static func append(_ text: StaticString, to out: inout [UInt8]) {
            out.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }

        private func string(_ key: StaticString, _ value: String, to out: inout [UInt8]) {
            field(key, to: &out)
            Self.write(string: value, to: &out)
        }

        static let rcodes = ["NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"]

        static func address(_ socket: SocketAddress) -> IPAddress? {
            switch socket {
            case let .v4(address):
                return .v4(UInt32(bigEndian: address.address.sin_addr.s_addr))
            case let .v6(address):
                return withUnsafeBytes(of: address.address.sin6_addr) { IPAddress(bytes: $0) }
            default:
                return nil
            }
        }

        static func write(_ ip: IPAddress, to out: inout [UInt8]) {
            guard case let .v4(value) = ip else { return out.append(contentsOf: ip.description.utf8) }
            for shift in [24, 16, 8, 0] {
                if shift != 24 { out.append(UInt8(ascii: ".")) }
                decimal(Int((value >> UInt32(shift)) & 0xff), to: &out)
            }
        }

        static func digits(_ value: Int, width: Int, to out: inout [UInt8]) {
            var divisor = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }

        /// A name in presentation form as a JSON string: host-name bytes as they are, anything else
        /// as the name's `\DDD`-escaped description.
        static func write(name: DomainName, to out: inout [UInt8]) {
            let wire = name.wire
            guard wire.allSatisfy({ $0 < 0x40 || ($0 >= 0x61 && $0 <= 0x7a) || $0 == 0x2d || $0 == 0x5f || ($0 >= 0x30 && $0 <= 0x39) }) else {
                return write(string: name.description, to: &out)
            }
            out.append(UInt8(ascii: "\""))
            if wire.count == 1 { out.append(UInt8(ascii: ".")) }
            var index = 0
            while wire[index] != 0 {
                let length = Int(wire[index])
                if index > 0 { out.append(UInt8(ascii: ".")) }
                out.append(contentsOf: wire[(index + 1)...(index + length)])
                index += length + 1
            }
            out.append(UInt8(ascii: "\""))
        }

        static func write(string: String, to out: inout [UInt8]) {
            out.append(UInt8(ascii: "\""))
            var string = string
            let copied = string.withUTF8 { bytes -> Bool in
                // Most strings (URLs, sources, names) need no escape: one scan and one copy.
                guard !bytes.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) else { return false }
                out.append(contentsOf: bytes)
                return true
            }
            if !copied {
                for byte in string.utf8 {
                    switch byte {
                    case UInt8(ascii: "\""): out.append(contentsOf: [0x5c, 0x22])
                    case UInt8(ascii: "\\"): out.append(contentsOf: [0x5c, 0x5c])
                    case 0..<0x20:
                        let hex = Array("0123456789abcdef".utf8)
                        out.append(contentsOf: [0x5c, UInt8(ascii: "u"), 0x30, 0x30, hex[Int(byte >> 4)], hex[Int(byte & 0x0f)]])
                    default: out.append(byte)
                    }
                }
            }
            out.append(UInt8(ascii: "\""))
        }

        /// A non-negative integer in decimal, without a string.
        static func decimal(_ value: Int, to out: inout [UInt8]) {
            var digits = InlineArray<20, UInt8>(repeating: 0)
            var count = 0
            var rest = value
            repeat {
                digits[count] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
                count += 1
            } while rest > 0
            for index in stride(from: count - 1, through: 0, by: -1) { out.append(digits[index]) }
        }

        /// `"answers":[…]` (A and AAAA as addresses, CNAME as `CNAME target`, other types by name)
        /// and `"ede":N`, read by walking the response's sections; a response that does not walk
        /// cleanly gets no answers key.
        static func answers(of response: [UInt8], to out: inout [UInt8]) {
            guard response.count >= 12 else { return }
            let counts = (0..<4).map { Int(response[4 + 2 * $0]) << 8 | Int(response[5 + 2 * $0]) }
            var index = 12
            for _ in 0..<counts[0] {
                guard let end = skipName(response, index), end + 4 <= response.count else { return }
                index = end + 4
            }
            var list: [UInt8] = [UInt8(ascii: "[")]
            var ede: Int?
            var decoded: [DNSMessage.Record]?
            var cnames = 0
            for section in 1...3 {
                for _ in 0..<counts[section] {
                    guard let end = skipName(response, index), end + 10 <= response.count else { return }
                    let type = Int(response[end]) << 8 | Int(response[end + 1])
                    let length = Int(response[end + 8]) << 8 | Int(response[end + 9])
                    let data = end + 10
                    guard data + length <= response.count else { return }
                    if section == 1 {
                        if list.count > 1 { list.append(UInt8(ascii: ",")) }
                        switch (type, length) {
                        case (1, 4), (28, 16):
                            list.append(UInt8(ascii: "\""))
                            write(IPAddress(bytes: response[data..<(data + length)])!, to: &list)
                            list.append(UInt8(ascii: "\""))
                        case (5, _):
                            // Rare enough to decode the message for (compression pointers).
                            if decoded == nil { decoded = (try? DNSMessage(decoding: response))?.answers.filter { $0.type == .cname } ?? [] }
                            var target = "?"
                            if let aliases = decoded, cnames < aliases.count, case let .cname(name) = aliases[cnames].data {
                                target = name.description
                            }
                            cnames += 1
                            write(string: "CNAME " + target, to: &list)
                        default:
                            write(string: RecordType(rawValue: UInt16(type)).description, to: &list)
                        }
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
            list.append(UInt8(ascii: "]"))
            append(#","answers":"#, to: &out)
            out.append(contentsOf: list)
            if let ede {
                append(#","ede":"#, to: &out)
                decimal(ede, to: &out)
            }
        }

        /// Where the name at `index` ends (after its root label or its pointer), or nil.
        static func skipName(_ bytes: [UInt8], _ start: Int) -> Int? {
            var index = start
            while index < bytes.count {
                let length = Int(bytes[index])
                if length == 0 { return index + 1 }
                if length & 0xc0 == 0xc0 { return index + 2 <= bytes.count ? index + 2 : nil }
                guard length < 64 else { return nil }
                index += length + 1
            }
            return nil
        }
    }

    /// The client address with the bits past the configured prefix zeroed (none: as it is).
    static func anonymized(_ address: IPAddress, _ settings: DaemonSettings.QueryLog) -> IPAddress {
        switch address {
        case let .v4(value):
            guard let prefix = settings.anonymizeIPv4 else { return address }
            return .v4(prefix == 0 ? 0 : value & ~UInt32(0) << (32 - UInt32(prefix)))
        case let .v6(high, low):
            guard let prefix = settings.anonymizeIPv6 else { return address }
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

    /// Nanoseconds since 1970 now (CLOCK_REALTIME).
    static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }
}
