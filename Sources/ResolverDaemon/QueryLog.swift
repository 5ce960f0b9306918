import CoreMetrics
import DNSCore
import DNSStubServer
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
    /// Entries as bytes (``Record``), appended by the serving threads and swapped out by the writer:
    /// a copy per entry, and nothing allocated, retained or freed across threads.
    private let buffer = Mutex<(bytes: [UInt8], entries: Int, reopen: Bool, stopped: Bool)>(([], 0, false, false))
    private let wake = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let written: Counter
    private let dropped: Counter
    /// Wall time minus uptime, nanoseconds: the serving path turns the uptime it reads anyway into
    /// the entry's wall time without a second clock read; the writer refreshes it every turn.
    private let wallOffset = Atomic<UInt64>(QueryLog.now() &- DispatchTime.now().uptimeNanoseconds)

    init(settings: DaemonSettings.QueryLog, metrics: any MetricsFactory) {
        self.settings = settings
        written = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "written")], factory: metrics)
        dropped = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "dropped")], factory: metrics)
        buffer.withLock { $0.bytes.reserveCapacity(min(settings.bufferEntries, 4096) * 256) }
        let thread = Thread { [self] in
            Thread.current.name = "query-log"  // set from the thread itself: Linux names it so
            run()
        }
        thread.start()
    }

    /// Adds an entry, or drops it when the buffer is full. Never blocks beyond the copy.
    func record(_ entry: Entry) {
        // No wake-up here: the writer looks every ``interval``, so the serving path makes no
        // system call for the log.
        let taken = buffer.withLock { buffer -> Bool in
            guard !buffer.stopped, buffer.entries < settings.bufferEntries else { return false }
            Record.append(entry, to: &buffer.bytes)
            buffer.entries += 1
            return true
        }
        if !taken { dropped.increment() }
    }

    /// The wall time (nanoseconds since 1970) at `uptime` (`DispatchTime`'s nanoseconds).
    func wallTime(atUptime uptime: UInt64) -> UInt64 { wallOffset.load(ordering: .relaxed) &+ uptime }

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
        var lines = LineBuffer(capacity: 4 << 20)
        defer {
            if file >= 0 { close(file) }
            lines.deallocate()
            finished.signal()
        }
        // Two buffers, swapped under the lock: neither side allocates a new one per batch.
        var batch: [UInt8] = []
        while true {
            _ = wake.wait(timeout: .now() + Self.interval)
            wallOffset.store(QueryLog.now() &- DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            batch.removeAll(keepingCapacity: true)
            let (count, reopen, stopped) = buffer.withLock { buffer in
                swap(&buffer.bytes, &batch)
                defer {
                    buffer.entries = 0
                    buffer.reopen = false
                }
                return (buffer.entries, buffer.reopen, buffer.stopped)
            }
            if reopen, file >= 0 {
                close(file)
                file = -1
            }
            guard count > 0 else {
                if stopped { return }
                continue
            }
            /// Writes the formatted lines, rotating first when they would pass `maxBytes`.
            func flush() {
                defer { lines.count = 0 }
                guard lines.count > 0 else { return }
                if file < 0 { (file, size) = open() }
                guard file >= 0 else { return }
                if size + lines.count > settings.maxBytes, size > 0 {
                    close(file)
                    rotate()
                    (file, size) = open()
                    guard file >= 0 else { return }
                }
                size += writeAll(file, UnsafeRawBufferPointer(start: lines.base, count: lines.count))
            }
            batch.withUnsafeBytes { bytes in
                var cursor = Record.Cursor(bytes)
                while let record = cursor.next() {
                    if lines.capacity - lines.count < Record.maxLineBytes { flush() }
                    formatter.append(record, to: &lines)
                }
            }
            flush()
            written.increment(by: Int64(count))
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

    private func writeAll(_ file: Int32, _ bytes: UnsafeRawBufferPointer) -> Int {
        var offset = 0
        while offset < bytes.count {
            let count = Glibc.write(file, bytes.baseAddress! + offset, bytes.count - offset)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            offset += count
        }
        return offset
    }

    // MARK: Entries as bytes

    /// An entry laid out as bytes: fixed fields, then length-prefixed strings and the response.
    ///
    /// `time u64, latency u64, client family u8 (0, 4, 6), client 16 bytes, type u16`, then `name`
    /// (u8 length, wire form), `transport` (u8), `source`, `dnssec`, `verdict` (u8, 0xff = absent),
    /// `upstream` (u16, 0xffff = absent), `response` (u16, at most ``maxResponseBytes``).
    enum Record {
        /// A response is kept up to this many bytes (BIND's default EDNS size): the answers that fit
        /// are listed, the rest of a larger one is not.
        static let maxResponseBytes = 1_232
        /// The longest line one record can make: escaped name, four strings, every address.
        static let maxLineBytes = 64 * 1024

        static func append(_ entry: Entry, to out: inout [UInt8]) {
            withUnsafeBytes(of: entry.time.littleEndian) { out.append(contentsOf: $0) }
            withUnsafeBytes(of: entry.latencyNanoseconds.littleEndian) { out.append(contentsOf: $0) }
            switch entry.client {
            case let .v4(address)?:
                out.append(4)
                withUnsafeBytes(of: address.address.sin_addr) { out.append(contentsOf: $0) }
                out.append(contentsOf: repeatElement(0, count: 12))
            case let .v6(address)?:
                out.append(6)
                withUnsafeBytes(of: address.address.sin6_addr) { out.append(contentsOf: $0) }
            default:
                out.append(0)
                out.append(contentsOf: repeatElement(0, count: 16))
            }
            withUnsafeBytes(of: entry.query.question.type.rawValue.littleEndian) { out.append(contentsOf: $0) }
            let wire = entry.query.question.name.wire
            out.append(UInt8(truncatingIfNeeded: wire.count))
            out.append(contentsOf: wire)
            short(entry.transport, to: &out)
            short(entry.provenance?.source, to: &out)
            short(entry.provenance?.dnssec, to: &out)
            short(entry.verdict, to: &out)
            if var upstream = entry.provenance?.upstream {
                upstream.withUTF8 { bytes in
                    let count = min(bytes.count, 0xfffe)
                    withUnsafeBytes(of: UInt16(count).littleEndian) { out.append(contentsOf: $0) }
                    out.append(contentsOf: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[0..<count]))
                }
            } else {
                withUnsafeBytes(of: UInt16(0xffff)) { out.append(contentsOf: $0) }
            }
            let count = min(entry.response.count, maxResponseBytes)
            withUnsafeBytes(of: UInt16(count).littleEndian) { out.append(contentsOf: $0) }
            entry.response.withUnsafeBytes { out.append(contentsOf: UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        }

        /// A string of at most 254 bytes (the daemon's transports, sources, statuses and verdicts).
        private static func short(_ text: String?, to out: inout [UInt8]) {
            guard var text else { return out.append(0xff) }
            text.withUTF8 { bytes in
                let count = min(bytes.count, 0xfe)
                out.append(UInt8(count))
                out.append(contentsOf: UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(bytes)[0..<count]))
            }
        }

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

    /// Where lines are formatted: a buffer of its own, written with plain stores (no bounds or
    /// uniqueness checks per byte); the caller keeps ``Record/maxLineBytes`` free before each line.
    struct LineBuffer {
        let base: UnsafeMutablePointer<UInt8>
        let capacity: Int
        var count = 0

        init(capacity: Int) {
            base = .allocate(capacity: capacity)
            self.capacity = capacity
        }

        func deallocate() { base.deallocate() }

        @inline(__always) mutating func byte(_ value: UInt8) {
            base[count] = value
            count += 1
        }

        mutating func bytes(_ bytes: UnsafeRawBufferPointer) {
            guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
            (base + count).update(from: source.assumingMemoryBound(to: UInt8.self), count: bytes.count)
            count += bytes.count
        }

        mutating func text(_ text: StaticString) {
            bytes(UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
        }

        /// A non-negative integer in decimal.
        mutating func decimal(_ value: Int) {
            var digits = 1
            var limit = 10
            while value >= limit, digits < 19 {
                digits += 1
                limit &*= 10
            }
            var rest = value
            for index in stride(from: count + digits - 1, through: count, by: -1) {
                base[index] = UInt8(ascii: "0") + UInt8(rest % 10)
                rest /= 10
            }
            count += digits
        }

        /// `value` with leading zeros to `width` digits.
        mutating func digits(_ value: Int, width: Int) {
            var rest = value
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
    struct Formatter {
        let settings: DaemonSettings.QueryLog
        /// `"YYYY-MM-DDTHH:MM:SS` of the last second formatted.
        private var second: UInt64 = .max
        private var secondText: [UInt8] = []

        init(settings: DaemonSettings.QueryLog) { self.settings = settings }

        mutating func append(_ record: Record.View, to out: inout LineBuffer) {
            let seconds = record.time / 1_000_000_000
            if seconds != second {
                second = seconds
                secondText = Array(QueryLog.timestamp(seconds: seconds).utf8)
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
                switch QueryLog.anonymized(address, settings) {
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
        private func string(_ key: StaticString, _ value: UnsafeRawBufferPointer?, to out: inout LineBuffer) {
            guard let value else { return }
            out.text(key)
            out.escaped(value)
            out.byte(UInt8(ascii: "\""))
        }

        /// A wire-form name in presentation form, inside a JSON string, as ``/DNSCore/DomainName``
        /// writes it: printable ASCII as it is (`"` JSON-escaped); a dot, a backslash and any other byte as
        /// `\DDD` (RFC 1035 §5.1; the backslash itself JSON-escaped).
        static func name(_ wire: UnsafeRawBufferPointer, to out: inout LineBuffer) {
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

        static func type(_ value: UInt16, to out: inout LineBuffer) {
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
        static func answers(of response: UnsafeRawBufferPointer, to out: inout LineBuffer) {
            guard response.count >= 12 else { return }
            func count(_ section: Int) -> Int { Int(response[4 + 2 * section]) << 8 | Int(response[5 + 2 * section]) }
            var index = 12
            for _ in 0..<count(0) {
                guard let end = skipName(response, index), end + 4 <= response.count else { return }
                index = end + 4
            }
            out.text(#","answers":["#)
            var listed = 0
            var ede: Int?
            var cnames = 0
            var decoded: [DNSMessage.Record]?
            walk: for section in 1...3 {
                for _ in 0..<count(section) {
                    guard let end = skipName(response, index), end + 10 <= response.count else { break walk }
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

        /// Where the name at `index` ends (after its root label or its pointer), or nil.
        static func skipName(_ bytes: UnsafeRawBufferPointer, _ start: Int) -> Int? {
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
