import DNSCore
import Foundation
import MetricsTestKit
import NIOCore
import ResolverConfig
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire
@testable import ResolverDaemon

/// The query log's writer in process: every entry is written or counted as dropped, lines are
/// JSON with the documented keys, files rotate by size, client addresses are cut to their prefix.
@Suite struct QueryLogTests {
    func entry(_ name: String, client: String = "192.0.2.77") throws -> QueryLog.Entry {
        let query = try DNSQuery(Wire.header() + Wire.question(name))
        let answer = DNSAnswers.response(to: query, .nxdomain, negativeTTL: 30)
        return QueryLog.Entry(
            time: 1_800_000_000_250_000_000, client: try SocketAddress(ipAddress: client, port: 5353),
            transport: "udp", query: query, response: answer.bytes, provenance: .init(source: "doh", upstream: "https://u.test/dns-query"),
            verdict: "consistent", latencyNanoseconds: 1_234_567)
    }

    func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("qlog-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    func lines(_ directory: URL) throws -> [[String: Any]] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted().flatMap { file in
            try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8).split(separator: "\n").map {
                try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
            }
        }
    }

    @Test func everyEntryIsWrittenOrCountedAsDropped() throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonSettings.QueryLog(path: directory.appendingPathComponent("q.jsonl").path)
        settings.bufferEntries = 4
        let metrics = TestMetrics()
        let log = QueryLog(settings: settings, metrics: metrics)
        let sample = try entry("www.example.test")
        let start = DispatchTime.now().uptimeNanoseconds
        for _ in 0..<5_000 { log.record(sample) }
        // The serving side never waited for the file.
        #expect(DispatchTime.now().uptimeNanoseconds - start < 500_000_000)
        log.stop()
        let written = try metrics.expectCounter("httpdns_query_log_entries_total", [("outcome", "written")]).totalValue
        let dropped = try metrics.expectCounter("httpdns_query_log_entries_total", [("outcome", "dropped")]).totalValue
        #expect(written + dropped == 5_000)
        #expect(dropped > 0)
        #expect(try lines(directory).count == written)
    }

    @Test func linesCarryTheDocumentedKeysAndRotateBySize() throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonSettings.QueryLog(path: directory.appendingPathComponent("q.jsonl").path)
        settings.maxBytes = 4_096
        settings.keep = 2
        settings.anonymizeIPv4 = 24
        settings.anonymizeIPv6 = 48
        let log = QueryLog(settings: settings, metrics: TestMetrics())
        for index in 0..<100 {
            log.record(try entry("n\(index).example.test", client: index % 2 == 0 ? "192.0.2.77" : "2001:db8:1:2::9"))
            if index % 10 == 9 { usleep(20_000) }  // several batches, so that rotation has turns
        }
        log.stop()
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(files == ["q.jsonl", "q.jsonl.1", "q.jsonl.2"])
        for file in files {
            let size = try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(file).path)[.size] as? Int ?? 0
            #expect(size <= 4_096 + 10 * 400, "\(file): \(size)")
        }
        let first = try #require(try lines(directory).last)
        #expect(
            Set(first.keys) == ["time", "client", "transport", "name", "type", "rcode", "answers", "source", "upstream", "verdict", "latency_ms"])
        #expect(first["time"] as? String == "2027-01-15T08:00:00.250Z")
        #expect(first["rcode"] as? String == "NXDOMAIN")
        #expect(first["latency_ms"] as? Double == 1.234)
        let clients = Set(try lines(directory).compactMap { $0["client"] as? String })
        #expect(clients == ["192.0.2.0", "2001:db8:1::"])
    }

    /// Whatever a client asks and an upstream answers, each entry is one line of valid JSON: names
    /// with dots, quotes, backslashes and control bytes in labels, garbage and cut responses, and
    /// the answer kinds (A, AAAA, CNAME, other types, EDE) listed as documented.
    /// F19 of redteam-4: a relayed 1,232-byte answer of compressed CNAMEs to a long name of
    /// non-printable bytes, as a forward zone's plain-DNS server (or anyone spoofing it) can send.
    static func cnameFlood(escaping every: Int) -> [UInt8] {
        var name: [UInt8] = []
        for _ in 0..<4 { name += [60] + (0..<60).map { $0 % every == 0 ? 0x01 : 0x61 } }
        name.append(0)
        var message: [UInt8] = [0, 0, 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0, 2, 0x66, 0x7a, 4, 0x74, 0x65, 0x73, 0x74, 0, 0, 16, 0, 1]
        message += [0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 1, 0x2c, 0, UInt8(name.count)] + name
        let target = 12 + 13 + 12
        var count = 1
        while message.count + 14 <= QueryLog.Record.maxResponseBytes {
            message += [0xc0, 0x0c, 0, 5, 0, 1, 0, 0, 1, 0x2c, 0, 2, UInt8(0xc0 | target >> 8), UInt8(target & 0xff)]
            count += 1
        }
        message[6] = UInt8(count >> 8)
        message[7] = UInt8(count & 0xff)
        return message
    }

    /// The line of such an answer is ~85 KB, more than the 64 KiB the writer keeps free: formatted
    /// into a buffer with only a few bytes left, it grows the buffer instead of writing past it, and
    /// comes out as one valid JSON line. (Before the fix: written past the end; SIGSEGV in the daemon.)
    @Test func aLineLongerThanTheRoomLeftGrowsTheBuffer() throws {
        for every in [1, 2, 3, 7] {
            let response = Self.cnameFlood(escaping: every)
            #expect(response.count <= QueryLog.Record.maxResponseBytes)
            var line = QueryLogLine(capacity: 4096)
            defer { line.deallocate() }
            let filler = [UInt8](repeating: 0x20, count: 4096 - 10)
            filler.withUnsafeBytes { line.bytes($0) }
            var formatter = QueryLogFormatter(anonymizeIPv4: nil, anonymizeIPv6: nil)
            let name: [UInt8] = [2, 0x66, 0x7a, 4, 0x74, 0x65, 0x73, 0x74, 0]
            let client = [UInt8](repeating: 0, count: 16)
            name.withUnsafeBytes { name in
                response.withUnsafeBytes { response in
                    client.withUnsafeBytes { client in
                        formatter.append(
                            QueryLogRecord.View(
                                time: 1_800_000_000_000_000_000, latency: 1, clientFamily: 0, client: client, type: 16, name: name,
                                transport: nil, source: nil, dnssec: nil, verdict: nil, upstream: nil, response: response), to: &line)
                    }
                }
            }
            #expect(line.count <= line.capacity)
            let text = Array(line.written[(4096 - 10)...])
            #expect(text.count > (every == 1 ? 65_536 : 10_000), "escaping every \(every): \(text.count) bytes")
            #expect(text.last == UInt8(ascii: "\n") && !text.dropLast().contains(UInt8(ascii: "\n")))
            let object = try #require(try JSONSerialization.jsonObject(with: Data(text)) as? [String: Any])
            #expect((object["answers"] as? [String])?.count ?? 0 > 60)
        }
    }

    /// The same through the whole writer, lines of varied lengths so that some start with less room
    /// than they need: every line written, each valid JSON.
    @Test func longLinesOfVariedLengthsAreWrittenWhole() throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonSettings.QueryLog(path: directory.appendingPathComponent("q.jsonl").path)
        settings.bufferEntries = 1_000
        let log = QueryLog(settings: settings, metrics: TestMetrics())
        let query = try DNSQuery(Wire.header() + Wire.question("fz.test", type: 16))
        for index in 0..<60 {
            log.record(
                QueryLog.Entry(
                    time: 1_800_000_000_000_000_000, client: nil, transport: "udp", query: query,
                    response: Self.cnameFlood(escaping: 1 + index % 9), provenance: nil, verdict: nil, latencyNanoseconds: 1))
        }
        log.stop()
        let lines = try lines(directory)
        #expect(lines.count == 60)
    }

    @Test func anyNameAndResponseMakeOneValidJSONLine() throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var settings = DaemonSettings.QueryLog(path: directory.appendingPathComponent("q.jsonl").path)
        settings.bufferEntries = 100_000
        let log = QueryLog(settings: settings, metrics: TestMetrics())
        var random = SystemRandomNumberGenerator()
        var expectedNames: [String] = []
        // A well-formed answer with every kind, from the resolver's own writer.
        let query = try DNSQuery(Wire.header() + Wire.question("www.example.test"))
        var message = DNSMessage(id: 0x1234, flags: 0x8180, questions: [.init(name: try DomainName("www.example.test"), type: .a)])
        message.answers = [
            .init(name: try DomainName("www.example.test"), type: .cname, ttl: 60, data: .cname(try DomainName("edge.example.test"))),
            .init(name: try DomainName("edge.example.test"), type: .a, ttl: 60, data: .address(IPAddress("198.51.100.7")!)),
            .init(name: try DomainName("edge.example.test"), type: .aaaa, ttl: 60, data: .address(IPAddress("2001:db8::7")!)),
            .init(name: try DomainName("edge.example.test"), type: .txt, ttl: 60, data: .opaque([3, 0x61, 0x62, 0x63])),
        ]
        message.additionals = [.init(name: .root, type: .opt, recordClass: 1232, ttl: 0, data: .opaque([0, 15, 0, 2, 0, 17]))]
        log.record(
            QueryLog.Entry(
                time: 1_800_000_000_000_000_000, client: try SocketAddress(ipAddress: "2001:db8::9", port: 1), transport: "dot", query: query,
                response: message.encode(), provenance: .init(source: "cache", upstream: nil, dnssec: "insecure"), verdict: nil,
                latencyNanoseconds: 5_000))
        for index in 0..<2_000 {
            // Labels of any bytes (but the first label keeps the line's order readable).
            let labels = (0..<Int.random(in: 1...4, using: &random)).map { _ in
                (0..<Int.random(in: 1...20, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            }
            var wire = Wire.header()
            for label in labels { wire += [UInt8(label.count)] + label }
            wire += [0, 0, 1, 0, 1]
            guard let query = try? DNSQuery(wire) else { continue }
            expectedNames.append(query.question.name.description)
            let response = (0..<Int.random(in: 0...200, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            log.record(
                QueryLog.Entry(
                    time: 1_800_000_000_000_000_000 + UInt64(index), client: nil, transport: "udp", query: query,
                    response: index % 2 == 0 ? response : Array(message.encode().prefix(Int.random(in: 0...80, using: &random))),
                    provenance: nil, verdict: "hijacked\"\u{1}", latencyNanoseconds: UInt64(index)))
        }
        log.stop()
        let text = try String(contentsOf: directory.appendingPathComponent("q.jsonl"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count == expectedNames.count + 1)
        var parsed: [[String: Any]] = []
        for line in lines {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            #expect(object != nil, "not JSON: \(line)")
            if let object { parsed.append(object) }
        }
        let first = try #require(parsed.first)
        #expect(first["client"] as? String == "2001:db8::9")
        #expect(first["transport"] as? String == "dot")
        #expect(first["answers"] as? [String] == ["CNAME edge.example.test", "198.51.100.7", "2001:db8::7", "TXT"])
        #expect(first["ede"] as? Int == 17)
        #expect(first["dnssec"] as? String == "insecure")
        #expect(first["latency_ms"] as? Double == 0.005)
        // Names in the presentation form DomainName gives (RFC 1035 escapes), verdicts escaped back.
        for (object, name) in zip(parsed.dropFirst(), expectedNames) {
            #expect(object["name"] as? String == name)
            #expect(object["verdict"] as? String == "hijacked\"\u{1}")
        }
    }

    @Test func anonymisingCutsTheAddressAtThePrefix() {
        var settings = DaemonSettings.QueryLog(path: "/dev/null")
        settings.anonymizeIPv4 = 16
        settings.anonymizeIPv6 = 56
        #expect(QueryLog.anonymized(IPAddress("203.0.113.200")!, settings).description == "203.0.0.0")
        #expect(QueryLog.anonymized(IPAddress("2001:db8:aaaa:bbcc::1")!, settings).description == "2001:db8:aaaa:bb00::")
        settings.anonymizeIPv6 = 128
        #expect(QueryLog.anonymized(IPAddress("2001:db8::1")!, settings).description == "2001:db8::1")
        settings.anonymizeIPv4 = 0
        #expect(QueryLog.anonymized(IPAddress("203.0.113.200")!, settings).description == "0.0.0.0")
    }
}

/// The token buckets of `rate_limit:` on a manual clock.
@Suite struct RateLimiterTests {
    func limiter(rate: Double = 10, burst: Double = 5, slip: Int = 2, bucketsPerShard: Int = RateLimiter.maxBucketsPerShard) -> RateLimiter {
        var settings = DaemonSettings.RateLimit(queriesPerSecond: rate, burst: burst)
        settings.ipv6Prefix = 56
        settings.slip = slip
        return RateLimiter(settings: settings, metrics: TestMetrics(), bucketsPerShard: bucketsPerShard)
    }

    func address(_ text: String) throws -> SocketAddress { try SocketAddress(ipAddress: text, port: 5353) }

    @Test func aBurstThenTheRate() throws {
        let limiter = limiter()
        let client = try address("192.0.2.10")
        let start: UInt64 = 1_000_000_000
        let burst = (0..<8).map { _ in limiter.decide(client, transport: .tcp, now: start) == .allowed }
        #expect(burst == [true, true, true, true, true, false, false, false])
        // 10 per second: one more token after 100 ms, not before.
        #expect(limiter.decide(client, transport: .tcp, now: start + 90_000_000) == .limited)
        #expect(limiter.decide(client, transport: .tcp, now: start + 200_000_000) == .allowed)
        // Quiet for a second: the bucket is full again, but never beyond the burst.
        let later = (0..<7).map { _ in limiter.decide(client, transport: .tcp, now: start + 5_000_000_000) }
        #expect(later.filter { $0 == .allowed }.count == 5)
    }

    @Test func neighboursShareTheirNetworksBucketPerTable() throws {
        let limiter = limiter(burst: 1)
        let now: UInt64 = 1
        #expect(limiter.decide(try address("192.0.2.10"), transport: .tcp, now: now) == .allowed)
        #expect(limiter.decide(try address("192.0.2.200"), transport: .doh, now: now) == .limited)
        #expect(limiter.decide(try address("192.0.3.10"), transport: .dot, now: now) == .allowed)
        #expect(limiter.decide(try address("2001:db8:0:100::1"), transport: .doh, now: now) == .allowed)
        #expect(limiter.decide(try address("2001:db8:0:1ff::9"), transport: .doh, now: now) == .limited)
        #expect(limiter.decide(try address("2001:db8:0:200::1"), transport: .doh, now: now) == .allowed)
        // A Unix socket or no address: not limited.
        #expect(limiter.decide(nil, transport: .doh, now: now) == .allowed)
    }

    /// F21: behind a dual-stack `[::]` listener every IPv4 client is `::ffff:a.b.c.d`; NAT64 puts
    /// IPv4 in `64:ff9b::/96`. Both are keyed as their IPv4 address, so IPv4 networks keep buckets
    /// of their own (before: all of them shared the bucket of `::/56`).
    @Test func ipv4InIPv6IsKeyedAsIPv4() throws {
        let limiter = limiter(burst: 1)
        let now: UInt64 = 1
        #expect(limiter.key(try address("::ffff:198.51.100.7")) == limiter.key(try address("198.51.100.7")))
        #expect(limiter.key(try address("64:ff9b::198.51.100.7")) == limiter.key(try address("198.51.100.9")))
        #expect(limiter.key(try address("::ffff:198.51.100.7")) != limiter.key(try address("::ffff:203.0.113.7")))
        #expect(limiter.decide(try address("::ffff:198.51.100.7"), transport: .tcp, now: now) == .allowed)
        #expect(limiter.decide(try address("::ffff:198.51.100.7"), transport: .tcp, now: now) == .limited)
        // Another IPv4 network behind the same listener is not limited by the first.
        #expect(limiter.decide(try address("::ffff:203.0.113.7"), transport: .tcp, now: now) == .allowed)
        #expect(limiter.decide(try address("64:ff9b::192.0.2.1"), transport: .tcp, now: now) == .allowed)
        // The same IPv4 network, plain or mapped: one bucket.
        #expect(limiter.decide(try address("198.51.100.200"), transport: .tcp, now: now) == .limited)
        // An IPv6 client near ::ffff:0:0/96 is still IPv6.
        #expect(limiter.key(try address("::1")) != limiter.key(try address("0.0.0.1")))
        #expect(limiter.key(try address("::")) != limiter.key(try address("0.0.0.0")))
    }

    /// F23: spoofed UDP from a victim's address uses up the victim's UDP bucket only; its TCP, DoT
    /// and DoH keep theirs.
    @Test func spoofedUDPNeverChargesTheVerifiedTransports() throws {
        let limiter = limiter(rate: 1, burst: 5)
        let victim = try address("192.0.2.55")
        let now: UInt64 = 1_000_000_000
        for _ in 0..<50 { _ = limiter.decide(victim, transport: .udp, now: now) }
        #expect(limiter.decide(victim, transport: .udp, now: now) != .allowed)
        #expect(limiter.decide(victim, transport: .doh, now: now) == .allowed)
        #expect(limiter.decide(victim, transport: .tcp, now: now) == .allowed)
        #expect(limiter.decide(victim, transport: .dot, now: now) == .allowed)
    }

    /// The slip: every `slip`-th limited UDP query gets a truncated reply (to go on over TCP),
    /// never one over TCP, DoT or DoH; `slip: 0` never.
    @Test func limitedUDPQueriesSlipToTruncatedReplies() throws {
        let client = try address("192.0.2.66")
        let now: UInt64 = 1
        let two = limiter(burst: 1, slip: 2)
        #expect(two.decide(client, transport: .udp, now: now) == .allowed)
        let udp = (0..<6).map { _ in two.decide(client, transport: .udp, now: now) }
        #expect(udp == [.truncated, .limited, .truncated, .limited, .truncated, .limited])
        #expect(two.decide(client, transport: .tcp, now: now) == .allowed)
        #expect((0..<4).map { _ in two.decide(client, transport: .tcp, now: now) } == Array(repeating: .limited, count: 4))
        let one = limiter(burst: 1, slip: 1)
        _ = one.decide(client, transport: .udp, now: now)
        #expect((0..<3).map { _ in one.decide(client, transport: .udp, now: now) } == Array(repeating: .truncated, count: 3))
        let never = limiter(burst: 1, slip: 0)
        _ = never.decide(client, transport: .udp, now: now)
        #expect((0..<3).map { _ in never.decide(client, transport: .udp, now: now) } == Array(repeating: .limited, count: 3))
    }

    /// F22: a flood from more networks than the table holds neither grows it nor refuses the
    /// networks it has not seen: new networks take the slots of those seen once (CLOCK), in O(1)
    /// per query, while a network that keeps asking keeps its bucket (and its limit).
    @Test func aFullTableEvictsInsteadOfRefusingNewcomers() throws {
        let limiter = limiter(rate: 1, burst: 2)
        let regular: UInt128 = 1 << 32 | 0xC000_0201  // 192.0.2.1
        #expect(limiter.take(regular, now: 1))
        #expect(limiter.take(regular, now: 1))
        #expect(!limiter.take(regular, now: 1))
        let flood = 16 * RateLimiter.maxBucketsPerShard + 5_000
        var admitted = 0
        let start = ContinuousClock.now
        for index in 0..<flood {
            if limiter.take(UInt128(index + 1) << 8, now: 1) { admitted += 1 }
            // The regular client keeps asking (once per 256 spoofed sources): still limited, never
            // forgotten and refilled by the flood.
            if index % 256 == 0 { #expect(!limiter.take(regular, now: 1)) }
        }
        let elapsed = ContinuousClock.now - start
        #expect(admitted == flood, "every new network was admitted")
        #expect(limiter.bucketCount <= 16 * RateLimiter.maxBucketsPerShard)
        // A network never seen is admitted at once, the flood's own networks included.
        #expect(limiter.take(UInt128(UInt64.max) << 40, now: 1))
        // O(1) a query: 136,000 sources in well under a second even in a debug build (before: a
        // whole-shard copy per new source once full).
        #expect(elapsed < .seconds(3), "\(elapsed)")
    }

    /// Every bit of a /64 counts (F32 of redteam-5: a shift for the family marker made /64 a /63).
    @Test func adjacentSlash64sHaveBucketsOfTheirOwn() throws {
        var settings = DaemonSettings.RateLimit(queriesPerSecond: 1, burst: 1)
        settings.ipv6Prefix = 64
        let limiter = RateLimiter(settings: settings, metrics: TestMetrics())
        #expect(limiter.key(try address("2001:db8:0:2::1")) != limiter.key(try address("2001:db8:0:3::1")))
        #expect(limiter.key(try address("2001:db8:0:2::1")) == limiter.key(try address("2001:db8:0:2:ffff::9")))
        #expect(limiter.decide(try address("2001:db8:0:2::1"), transport: .tcp, now: 1) == .allowed)
        #expect(limiter.decide(try address("2001:db8:0:3::1"), transport: .tcp, now: 1) == .allowed)
    }

    @Test func aSmallTableKeepsItsBound() throws {
        let limiter = limiter(rate: 1, burst: 1, bucketsPerShard: 4)
        for index in 0..<10_000 { #expect(limiter.take(UInt128(index), transport: .udp, now: 1)) }
        #expect(limiter.bucketCount <= 64)
    }
}
