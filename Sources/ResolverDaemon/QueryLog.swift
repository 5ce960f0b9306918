import CoreMetrics
import DNSCore
import Foundation
import NIOCore
import ResolverConfig
import ResultFormatting
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
        var time: Date
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
        let (taken, first) = buffer.withLock { buffer -> (Bool, Bool) in
            guard !buffer.stopped, buffer.entries.count < settings.bufferEntries else { return (false, false) }
            buffer.entries.append(entry)
            return (true, buffer.entries.count == 1)
        }
        if first { wake.signal() }
        if !taken { dropped.increment() }
    }

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
        defer {
            if file >= 0 { close(file) }
            finished.signal()
        }
        while true {
            _ = wake.wait(timeout: .now() + 1)
            let (entries, reopen, stopped) = buffer.withLock { buffer in
                defer {
                    buffer.entries.removeAll(keepingCapacity: true)
                    buffer.reopen = false
                }
                return (buffer.entries, buffer.reopen, buffer.stopped)
            }
            if reopen, file >= 0 {
                close(file)
                file = -1
            }
            if !entries.isEmpty {
                var text: [UInt8] = []
                text.reserveCapacity(entries.count * 256)
                for entry in entries { Self.append(entry, anonymize: settings, to: &text) }
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

    /// One JSON line for `entry`.
    static func append(_ entry: Entry, anonymize settings: DaemonSettings.QueryLog, to out: inout [UInt8]) {
        var object = JSONObject()
        object["time"] = .string(timestamp(entry.time))
        if let client = entry.client?.ipAddress.flatMap(IPAddress.init) { object["client"] = .string(anonymized(client, settings).description) }
        object["transport"] = .string(entry.transport)
        object["name"] = .string(entry.query.question.name.description)
        object["type"] = .string(entry.query.question.type.description)
        let rcode = entry.response.count >= 4 ? UInt16(entry.response[3] & 0x0f) : 2
        object["rcode"] = .string(ResponseCode(rawValue: rcode).description)
        if let message = try? DNSMessage(decoding: entry.response) {
            object["answers"] = .array(
                message.answers.filter { $0.type != .opt }.map { record -> JSONValue in
                    switch record.data {
                    case let .address(ip): return .string(ip.description)
                    case let .cname(target): return .string("CNAME \(target)")
                    default: return .string(record.type.description)
                    }
                })
            if let code = extendedError(in: message) { object["ede"] = .int(Int(code)) }
        }
        if let provenance = entry.provenance {
            object["source"] = .string(provenance.source)
            if let upstream = provenance.upstream { object["upstream"] = .string(upstream) }
            if let dnssec = provenance.dnssec { object["dnssec"] = .string(dnssec) }
        }
        if let verdict = entry.verdict { object["verdict"] = .string(verdict) }
        object["latency_ms"] = .double((Double(entry.latencyNanoseconds) / 1_000).rounded() / 1_000)
        out.append(contentsOf: JSONValue.object(object).serialized.utf8)
        out.append(0x0a)
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

    private static func extendedError(in message: DNSMessage) -> UInt16? {
        guard let opt = message.additionals.first(where: { $0.type == .opt }), case let .opaque(data) = opt.data else { return nil }
        var index = 0
        while index + 4 <= data.count {
            let code = UInt16(data[index]) << 8 | UInt16(data[index + 1])
            let length = Int(UInt16(data[index + 2]) << 8 | UInt16(data[index + 3]))
            if code == 15, length >= 2, index + 6 <= data.count { return UInt16(data[index + 4]) << 8 | UInt16(data[index + 5]) }
            index += 4 + length
        }
        return nil
    }

    private static func timestamp(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        let milliseconds = Int((date.timeIntervalSince1970 - Double(seconds)) * 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = milliseconds < 10 ? "00\(milliseconds)" : milliseconds < 100 ? "0\(milliseconds)" : "\(milliseconds)"
        return
            "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(millis)Z"
    }
}
