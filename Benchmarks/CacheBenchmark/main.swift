// Engine benchmarks: cache hits against glibc and c-ares, memory per cached name, a Zipf workload.
//
//   cache-benchmark hits SECONDS DNS_SERVER     cache-hit latency (p50/p99) and throughput, 1 and 2
//                                               threads: ours vs glibc getaddrinfo("localhost") from
//                                               /etc/hosts vs c-ares ares_getaddrinfo via DNS_SERVER
//   cache-benchmark memory NAMES                RSS delta per cached name (A + AAAA)
//   cache-benchmark zipf SECONDS NAMES          Zipf(1.0) lookups over NAMES names, TTLs 2-300 s
//   cache-benchmark ours SECONDS                our hit paths alone (engine and HTTPDNSResolver, sync
//                                               and awaited): two builds compared by bench-cache-ab.sh
//
// Upstreams are in-process fakes (no network) except c-ares, which asks the loopback dnsmasq that
// Scripts/bench/bench-cache.sh starts. Output: one JSON object per line.
import CCares
import DNSCore
import Foundation
import HTTPDNS
import Synchronization

/// An in-process upstream: answers every name with one address of the asked family after `delay`.
struct FakeUpstream: DNSUpstream {
    let identifier = "https://bench.test/dns-query"
    let source = Resolution.Source.doh
    let delay: Duration
    let ttl: @Sendable (DomainName) -> UInt32
    let queries = Counter()

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        queries.add()
        if delay > .zero { try? await Task.sleep(for: delay) }
        let ip = question.type == .a ? IPAddress("198.18.0.1")! : IPAddress("2001:2::1")!
        return .addresses([ResolvedAddress(ip: ip, ttl: ttl(question.name))], canonicalName: question.name)
    }
}

final class Counter: Sendable {
    private let value = Atomic<Int>(0)
    func add() { value.add(1, ordering: .relaxed) }
    var count: Int { value.load(ordering: .relaxed) }
}

@inline(__always) func nanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// Runs `operation` on `threads` threads for `seconds`, timing each call. `operation(thread, i)`
/// returns false on a failed lookup (counted, and the run aborts: a benchmark of failures is void).
func measure(
    _ label: String, threads: Int, seconds: Double,
    _ operation: @escaping @Sendable (Int, Int) -> Bool
) -> [String: Any] {
    let samples = Mutex<[UInt64]>([])
    let operations = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let start = nanoseconds()
    let end = start + UInt64(seconds * 1e9)
    let group = DispatchGroup()
    for thread in 0..<threads {
        group.enter()
        Thread {
            var local: [UInt64] = []
            local.reserveCapacity(1 << 20)
            var index = 0
            while true {
                let before = nanoseconds()
                if before >= end { break }
                if !operation(thread, index) { failures.add(1, ordering: .relaxed) }
                local.append(nanoseconds() - before)
                index += 1
            }
            operations.add(index, ordering: .relaxed)
            samples.withLock { $0 += local }
            group.leave()
        }.start()
    }
    group.wait()
    let elapsed = Double(nanoseconds() - start) / 1e9
    var sorted = samples.withLock { $0 }
    sorted.sort()
    func percentile(_ p: Double) -> UInt64 { sorted.isEmpty ? 0 : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))] }
    return [
        "what": label, "threads": threads, "operations": operations.load(ordering: .relaxed),
        "failures": failures.load(ordering: .relaxed), "p50_ns": percentile(0.5), "p99_ns": percentile(0.99),
        "ops_per_s": Double(operations.load(ordering: .relaxed)) / elapsed,
    ]
}

/// The overhead of the timing itself (two clock reads), reported so the smallest figures can be read.
func timerOverhead() -> UInt64 {
    var samples: [UInt64] = []
    for _ in 0..<100_000 {
        let before = nanoseconds()
        samples.append(nanoseconds() - before)
    }
    samples.sort()
    return samples[samples.count / 2]
}

func emit(_ object: [String: Any]) {
    let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

// MARK: Peers

/// glibc getaddrinfo of a name /etc/hosts answers (nsswitch `files` first: no packet is sent).
func getaddrinfoLookup(_ name: String) -> Bool {
    var hints = addrinfo()
    hints.ai_family = AF_INET
    hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    var result: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(name, nil, &hints, &result)
    if let result { freeaddrinfo(result) }
    return status == 0
}

/// One c-ares channel per thread, driven synchronously with ares_getsock/poll/ares_process_fd.
final class AresClient {
    private var channel: ares_channel?

    init(server: String) {
        var options = ares_options()
        options.flags = ARES_FLAG_NOSEARCH
        options.timeout = 2000
        options.tries = 1
        let lookups = strdup("b")  // DNS only: no /etc/hosts, so every call is a real query
        options.lookups = lookups
        precondition(
            ares_init_options(
                &channel, &options,
                Int32(ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS)) == ARES_SUCCESS)
        free(lookups)
        precondition(ares_set_servers_ports_csv(channel, server) == ARES_SUCCESS, "bad server \(server)")
    }

    deinit { ares_destroy(channel) }

    func lookup(_ name: String) -> Bool {
        var status: Int32 = -1
        var hints = ares_addrinfo_hints()
        hints.ai_family = AF_INET
        withUnsafeMutablePointer(to: &status) { pointer in
            ares_getaddrinfo(
                channel, name, nil, &hints,
                { argument, status, _, result in
                    argument!.assumingMemoryBound(to: Int32.self).pointee = status
                    if let result { ares_freeaddrinfo(result) }
                }, pointer)
            drive()
        }
        return status == ARES_SUCCESS
    }

    private func drive() {
        var sockets = [ares_socket_t](repeating: -1, count: Int(ARES_GETSOCK_MAXNUM))
        while true {
            let mask = ares_getsock(channel, &sockets, Int32(ARES_GETSOCK_MAXNUM))
            var fds: [pollfd] = []
            for index in 0..<Int(ARES_GETSOCK_MAXNUM) {
                let readable = mask & (1 << index) != 0
                let writable = mask & (1 << (index + Int(ARES_GETSOCK_MAXNUM))) != 0
                guard readable || writable else { continue }
                fds.append(pollfd(fd: sockets[index], events: Int16(readable ? POLLIN : 0) | Int16(writable ? POLLOUT : 0), revents: 0))
            }
            if fds.isEmpty { return }
            if poll(&fds, nfds_t(fds.count), 1000) <= 0 {
                ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD)
                continue
            }
            for fd in fds where fd.revents != 0 {
                ares_process_fd(
                    channel, fd.revents & Int16(POLLIN | POLLERR | POLLHUP) != 0 ? fd.fd : ARES_SOCKET_BAD,
                    fd.revents & Int16(POLLOUT) != 0 ? fd.fd : ARES_SOCKET_BAD)
            }
        }
    }
}

// MARK: Modes

func hits(seconds: Double, server: String?) async throws {
    let names = (0..<1000).map { "n\($0).bench.hd.test" }
    var options = ResolverOptions()
    options.prefetch = false
    let engine = ResolverEngine(upstreams: [FakeUpstream(delay: .zero, ttl: { _ in 86_400 })], options: options)
    for name in names { _ = try await engine.resolve(name, type: .a) }
    emit(["what": "timer_overhead", "p50_ns": timerOverhead()])
    let order = (0..<4096).map { _ in Int.random(in: 0..<names.count) }
    for threads in [1, 2] {
        emit(
            measure("swift-httpdns cachedResolution", threads: threads, seconds: seconds) { _, index in
                engine.cachedResolution(for: names[order[index & 4095]], type: .a)?.addresses.isEmpty == false
            })
    }
    // The public, synchronous entry point: what a caller that is not async pays for a hit.
    let resolver = HTTPDNSResolver(options: options, upstreams: [FakeUpstream(delay: .zero, ttl: { _ in 86_400 })])
    for name in names { _ = try await resolver.resolve(name, type: .a) }
    for threads in [1, 2] {
        emit(
            measure("swift-httpdns resolveBlocking (hit)", threads: threads, seconds: seconds) { _, index in
                (try? resolver.resolveBlocking(names[order[index & 4095]], type: .a))?.addresses.isEmpty == false
            })
    }
    guard let server else { return }
    for threads in [1, 2] {
        emit(
            measure("swift-httpdns resolve (async, hit)", threads: threads, seconds: seconds) { _, index in
                // The async API from synchronous code: the cost of a hop onto the concurrency runtime included.
                let done = DispatchSemaphore(value: 0)
                let result = Mutex(false)
                Task {
                    let ok = (try? await engine.resolve(names[order[index & 4095]], type: .a)) != nil
                    result.withLock { $0 = ok }
                    done.signal()
                }
                done.wait()
                return result.withLock { $0 }
            })
    }
    for threads in [1, 2] {
        emit(
            measure("glibc getaddrinfo (/etc/hosts)", threads: threads, seconds: seconds) { _, _ in
                getaddrinfoLookup("localhost")
            })
    }
    let clients = Mutex<[Int: AresClient]>([:])
    for threads in [1, 2] {
        emit(
            measure("c-ares ares_getaddrinfo (dnsmasq)", threads: threads, seconds: seconds) { thread, _ in
                let client = clients.withLock { all in
                    if let client = all[thread] { return client }
                    let client = AresClient(server: server)
                    all[thread] = client
                    return client
                }
                return client.lookup("www.hd.test")
            })
    }
}

/// In-task cache-hit latency: what an async caller pays (no thread hop).
func asyncHits(seconds: Double) async throws {
    let names = (0..<1000).map { "n\($0).bench.hd.test" }
    var options = ResolverOptions()
    options.prefetch = false
    let engine = ResolverEngine(upstreams: [FakeUpstream(delay: .zero, ttl: { _ in 86_400 })], options: options)
    for name in names { _ = try await engine.resolve(name, type: .a) }
    emit(
        try await awaitedHits("swift-httpdns await resolve (in a task, hit)", seconds: seconds, names: names) {
            try await engine.resolve($0, type: .a)
        })
    // The public façade (HTTPDNSResolver): what a library user's `await resolver.resolve(host)` pays.
    let resolver = HTTPDNSResolver(options: options, upstreams: [FakeUpstream(delay: .zero, ttl: { _ in 86_400 })])
    for name in names { _ = try await resolver.resolve(name, type: .a) }
    emit(
        try await awaitedHits("swift-httpdns HTTPDNSResolver await resolve (in a task, hit)", seconds: seconds, names: names) {
            try await resolver.resolve($0, type: .a)
        })
}

/// Times `lookup` awaited in a loop inside one task for `seconds`, over `names` in turn.
func awaitedHits(
    _ label: String, seconds: Double, names: [String], _ lookup: (String) async throws -> Resolution
) async throws -> [String: Any] {
    var samples: [UInt64] = []
    let end = nanoseconds() + UInt64(seconds * 1e9)
    var index = 0
    let start = nanoseconds()
    while nanoseconds() < end {
        let before = nanoseconds()
        _ = try await lookup(names[index % names.count])
        samples.append(nanoseconds() - before)
        index += 1
    }
    let elapsed = Double(nanoseconds() - start) / 1e9
    samples.sort()
    return [
        "what": label, "threads": 1, "operations": index,
        "p50_ns": samples[samples.count / 2], "p99_ns": samples[samples.count * 99 / 100],
        "ops_per_s": Double(index) / elapsed,
    ]
}

func residentBytes() -> Int {
    guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = text.split(separator: " ")
    return (Int(fields[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

func memory(names count: Int) async throws {
    var options = ResolverOptions()
    options.cacheCapacity = count * 4  // room in every shard: no eviction during the measurement
    options.prefetch = false
    let engine = ResolverEngine(upstreams: [FakeUpstream(delay: .zero, ttl: { _ in 86_400 })], options: options)
    let names = (0..<count).map { "host-\($0).example-\($0 % 97).bench.hd.test" }
    _ = try await engine.resolve("warm.bench.hd.test")  // runtime and first allocations outside the delta
    let before = residentBytes()
    for name in names { _ = try await engine.resolve(name, type: .both) }
    let after = residentBytes()
    emit([
        "what": "memory", "names": count, "entries": engine.cachedEntryCount,
        "rss_delta_bytes": after - before, "bytes_per_name": Double(after - before) / Double(count),
        "bytes_per_entry": Double(after - before) / Double(engine.cachedEntryCount),
    ])
}

func zipf(seconds: Double, names count: Int) async throws {
    // TTLs 2-300 s, fixed per name; the fake upstream takes 1 ms like a near resolver.
    let upstream = FakeUpstream(
        delay: .milliseconds(1),
        ttl: { name in
            UInt32(2 + (UInt32(truncatingIfNeeded: name.description.hashValue) & 0x7fff_ffff) % 299)
        })
    var options = ResolverOptions()
    options.minTTL = .zero
    let engine = ResolverEngine(upstreams: [upstream], options: options)
    let names = (0..<count).map { "z\($0).bench.hd.test" }
    // Zipf(s = 1): cumulative weights 1/k, sampled by binary search.
    var cumulative: [Double] = []
    var sum = 0.0
    for rank in 1...count {
        sum += 1 / Double(rank)
        cumulative.append(sum)
    }
    func sample() -> Int {
        let target = Double.random(in: 0..<sum)
        var low = 0, high = count - 1
        while low < high {
            let mid = (low + high) / 2
            if cumulative[mid] < target { low = mid + 1 } else { high = mid }
        }
        return low
    }
    let start = ContinuousClock.now
    let warmUntil = start + .seconds(5)
    let end = start + .milliseconds(Int64(seconds * 1000))
    var lookups = 0, answeredFromCache = 0, queriesAtWarm = 0, warmed = false
    var bySource: [String: Int] = [:]
    while ContinuousClock.now < end {
        // 64 lookups at a time, as concurrent callers would make them.
        let batch = (0..<64).map { _ in names[sample()] }
        let sources = await withTaskGroup(of: Resolution.Source?.self) { group in
            for name in batch { group.addTask { try? await engine.resolve(name, type: .a).source } }
            return await group.reduce(into: [Resolution.Source?]()) { $0.append($1) }
        }
        if !warmed, ContinuousClock.now >= warmUntil {
            warmed = true
            queriesAtWarm = upstream.queries.count
        }
        guard warmed else { continue }
        for source in sources {
            lookups += 1
            let key = source.map { "\($0)" } ?? "error"
            bySource[key, default: 0] += 1
            if source == .cache || source == .stale { answeredFromCache += 1 }
        }
    }
    let measured = ContinuousClock.now - warmUntil
    let measuredSeconds = Double(measured.components.seconds) + Double(measured.components.attoseconds) / 1e18
    emit([
        "what": "zipf", "names": count, "seconds_after_warmup": measuredSeconds, "lookups": lookups,
        "hit_ratio": Double(answeredFromCache) / Double(max(1, lookups)), "by_source": bySource,
        "upstream_queries_per_s": Double(upstream.queries.count - queriesAtWarm) / measuredSeconds,
        "lookups_per_s": Double(lookups) / measuredSeconds,
    ])
}

/// A block list of `count` names as public lists hold them (a random label under one of 5,000
/// registrable names), loaded `runs` times: load time, memory (the set's own count and the RSS
/// delta), and the cost of asking whether a name is blocked (a hit and a miss).
func blockList(names count: Int, runs: Int) throws {
    var random = SystemRandomNumberGenerator()
    var text: [UInt8] = []
    var names: [String] = []
    names.reserveCapacity(count)
    for index in 0..<count {
        let label = String(random.next() % 2_000_000_000, radix: 36)
        let name = "\(label)-\(index % 1000).ads-\(index % 5000).test"
        names.append(name)
        text.append(contentsOf: name.utf8)
        text.append(0x0a)
    }
    let blocked = try (0..<1000).map { try DomainName("x.\(names[$0 * (count / 1000)])") }
    let open = try (0..<1000).map { try DomainName("www.site-\($0).example.test") }
    for run in 1...runs {
        let before = residentBytes()
        let start = nanoseconds()
        var builder = LocalZone.Builder()
        let taken = builder.addBlockList(text, source: "bench")
        let zone = try builder.build()
        let loadNs = nanoseconds() - start
        let after = residentBytes()
        func perLookup(_ list: [DomainName]) -> Double {
            let rounds = 200
            var found = 0
            let begin = nanoseconds()
            for _ in 0..<rounds { for name in list where zone.isBlocked(name) { found += 1 } }
            precondition(found == 0 || found == rounds * list.count)
            return Double(nanoseconds() - begin) / Double(rounds * list.count)
        }
        emit([
            "what": "block list", "run": run, "names": taken.names, "load_s": Double(loadNs) / 1e9,
            "set_bytes_per_name": Double(zone.listMemoryBytes) / Double(count),
            "rss_bytes_per_name": Double(after - before) / Double(count),
            "blocked_lookup_ns": perLookup(blocked), "open_lookup_ns": perLookup(open),
        ])
        withExtendedLifetime(zone) {}
    }
}

let arguments = CommandLine.arguments
switch arguments.count > 1 ? arguments[1] : "" {
case "hits" where arguments.count == 4:
    try await hits(seconds: Double(arguments[2]) ?? 3, server: arguments[3])
    try await asyncHits(seconds: Double(arguments[2]) ?? 3)
case "peek" where arguments.count == 3:  // only our synchronous hit path, for profiling
    try await hits(seconds: Double(arguments[2]) ?? 3, server: nil)
case "ours" where arguments.count == 3:  // only our hit paths, sync and async (Scripts/bench/bench-cache-ab.sh)
    try await hits(seconds: Double(arguments[2]) ?? 3, server: nil)
    try await asyncHits(seconds: Double(arguments[2]) ?? 3)
case "memory" where arguments.count == 3:
    try await memory(names: Int(arguments[2]) ?? 100_000)
case "blocklist" where arguments.count == 4:
    try blockList(names: Int(arguments[2]) ?? 1_000_000, runs: Int(arguments[3]) ?? 3)
case "zipf" where arguments.count == 4:
    try await zipf(seconds: Double(arguments[2]) ?? 60, names: Int(arguments[3]) ?? 10_000)
default:
    FileHandle.standardError.write(
        Data("usage: cache-benchmark hits SECONDS IP:PORT | ours SECONDS | memory NAMES | zipf SECONDS NAMES | blocklist NAMES RUNS\n".utf8))
    exit(2)
}
