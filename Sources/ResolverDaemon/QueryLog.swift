import CoreMetrics
import DNSCore
import DNSStubServer
import DNSWire
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
    /// The file and its size, opened when the log is made (before the daemon switches to `user:`),
    /// and whether this open created it (only a file it created is handed to `user:`).
    private let opened: (file: Int32, size: Int, created: Bool)

    init(settings: DaemonSettings.QueryLog, metrics: any MetricsFactory) {
        self.settings = settings
        written = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "written")], factory: metrics)
        dropped = Counter(label: "httpdns_query_log_entries_total", dimensions: [("outcome", "dropped")], factory: metrics)
        buffer.withLock { $0.bytes.reserveCapacity(min(settings.bufferEntries, 4096) * 256) }
        opened = Self.open(settings.path)
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

    /// Whether the file could be opened when the log was made.
    var isOpen: Bool { opened.file >= 0 }

    /// Gives the file to the account the daemon is about to switch to (`user:`) when this process
    /// created it (as root, just now), so that the writer can reopen it after SIGHUP. A file that was
    /// there before is never given away — it may be a link an attacker planted in a directory `user:`
    /// can write (F29 of redteam-5); it must already be writable by `user:`, which the daemon checks
    /// after the switch, with the directory (rotation).
    func handOver(toUID uid: uid_t, gid: gid_t) {
        if opened.file >= 0, opened.created { _ = fchown(opened.file, uid, gid) }
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
        var (file, size) = (opened.file, opened.size)
        var formatter = QueryLogFormatter(anonymizeIPv4: settings.anonymizeIPv4, anonymizeIPv6: settings.anonymizeIPv6)
        var lines = QueryLogLine(capacity: 4 << 20)
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
                defer { lines.removeAll() }
                guard lines.count > 0 else { return }
                if file < 0 { (file, size, _) = Self.open(settings.path) }
                guard file >= 0 else { return }
                if size + lines.count > settings.maxBytes, size > 0 {
                    close(file)
                    rotate()
                    (file, size, _) = Self.open(settings.path)
                    guard file >= 0 else { return }
                }
                size += writeAll(file, lines.written)
            }
            batch.withUnsafeBytes { bytes in
                var cursor = Record.Cursor(bytes)
                while let record = cursor.next() {
                    if lines.capacity - lines.count < QueryLogLine.flushReserve { flush() }
                    formatter.append(record, to: &lines)
                }
            }
            flush()
            written.increment(by: Int64(count))
            if stopped { return }
        }
    }

    /// Opens the log file for appending: never through a symbolic link, and only a regular file
    /// with one link (not a hard link to some other file); a new one is created exclusively.
    /// -1 when none can be opened so (the writer counts nothing written; the daemon's check after
    /// `user:` names the file).
    static func open(_ path: String) -> (file: Int32, size: Int, created: Bool) {
        let flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW
        var created = true
        var file = Glibc.open(path, flags | O_CREAT | O_EXCL, 0o640)
        if file < 0, errno == EEXIST {
            created = false
            file = Glibc.open(path, flags | O_NONBLOCK)
        }
        guard file >= 0 else { return (-1, 0, false) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else {
            close(file)
            return (-1, 0, false)
        }
        return (file, Int(info.st_size), created)
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

    typealias Record = QueryLogRecord

    /// The client address with the bits past the configured prefix zeroed (none: as it is).
    static func anonymized(_ address: IPAddress, _ settings: DaemonSettings.QueryLog) -> IPAddress {
        QueryLogFormatter.anonymized(address, ipv4: settings.anonymizeIPv4, ipv6: settings.anonymizeIPv6)
    }

    /// Nanoseconds since 1970 now (CLOCK_REALTIME).
    static func now() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }
}

/// An entry laid out as bytes: fixed fields, then length-prefixed strings and the response.
///
/// `time u64, latency u64, client family u8 (0, 4, 6), client 16 bytes, type u16`, then `name`
/// (u8 length, wire form), `transport` (u8), `source`, `dnssec`, `verdict` (u8, 0xff = absent),
/// `upstream` (u16, 0xffff = absent), `response` (u16, at most ``maxResponseBytes``).
extension QueryLogRecord {
    static func append(_ entry: QueryLog.Entry, to out: inout [UInt8]) {
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
}
