internal import CHiredis
import CoreMetrics
import Crypto
import DNSCore
import Dispatch
import Foundation
import Logging
import Synchronization

/// The daemon's `cache.shared`: a second-level cache on Redis, through hiredis (the reference C
/// client), that the members of a pool share, as unbound's `cachedb` and Blocky's Redis cache do.
///
/// - **Never slower, never failing.** A read waits at most `timeout` (50 ms by default); a Redis that
///   is slow, down or refusing counts as a miss, and after an error the cache is skipped for a second
///   before the next try. Writes are queued (at most 1,024) and dropped, counted, beyond that. One
///   connection, used from one serial queue, so a lookup never blocks a thread of the pool.
/// - **Authenticated.** Redis is a trust boundary: whoever can write to it could otherwise put any
///   address in every member's answers. Each value is `HMAC-SHA256(key, redis key ‖ entry) ‖ entry`
///   with a key the members share (`cache.shared.key_file`); a value that fails the MAC, that does not
///   decode, or that answers another question is rejected and counted, and the lookup goes upstream.
///   Expiries are absolute (wall clock) and covered by the MAC, so a replayed old value is expired.
/// - **TTLs kept.** The entry carries its remaining lifetime against the writer's wall clock; a reader
///   gets what is left of it. Only fresh entries are taken. DNSSEC statuses are not shared: a member
///   with validation on proves the answer itself.
package final class RedisSharedCache: SharedCache {
    /// Where Redis listens.
    package enum Endpoint: Sendable, Equatable {
        case tcp(host: String, port: Int)
        case unix(path: String)
    }

    package static let maxPendingWrites = 1_024
    /// The longest value read or written: a sealed entry of 512 IPv6 addresses is ~11 KB. Reads ask
    /// Redis for at most one byte more (`GETRANGE`), so a value a key-less writer made huge is never
    /// sent, copied or decoded: longer is refused by its length (F24 of redteam-4); entries that would
    /// seal longer are not shared.
    package static let maxValueBytes = 16 * 1024
    /// How long the cache is skipped after an error.
    package static let backoff: Duration = .seconds(1)

    private let endpoint: Endpoint
    private let password: String?
    private let key: SymmetricKey
    private let prefix: String
    private let timeout: Duration
    private let logger: Logger
    private let queue = DispatchQueue(label: "httpdns.redis-shared-cache")
    private let connection = Connection()
    /// Operations queued or running on `queue` (reads and writes).
    private let pending = Atomic<Int>(0)
    /// Skip Redis until this instant (after an error), and whether it was last seen up.
    private let health = Mutex<(skipUntil: ContinuousClock.Instant?, up: Bool)>((nil, true))
    private let outcomes: [Outcome: Counter]

    /// What became of one request, counted in `httpdns_shared_cache_requests_total{outcome}`.
    package enum Outcome: String, CaseIterable, Sendable {
        case hit, miss, rejected, timeout, error, skipped, stored, dropped
    }

    /// - Parameters:
    ///   - endpoint: Redis's address (loopback or a Unix socket: the config refuses others).
    ///   - password: sent with `AUTH` after connecting, or nil.
    ///   - key: the HMAC key the members share (at least 32 bytes).
    ///   - prefix: put before every Redis key (several pools can share one Redis).
    ///   - timeout: the longest a lookup waits for a read.
    ///   - metrics: where `httpdns_shared_cache_requests_total` goes.
    ///   - logger: connection changes (warning when lost, notice when back).
    package init(
        endpoint: Endpoint, password: String?, key: SymmetricKey, prefix: String, timeout: Duration, metrics: any MetricsFactory,
        logger: Logger
    ) {
        self.endpoint = endpoint
        self.password = password
        self.key = key
        self.prefix = prefix
        self.timeout = timeout
        self.logger = logger
        var outcomes: [Outcome: Counter] = [:]
        for outcome in Outcome.allCases {
            outcomes[outcome] = Counter(
                label: "httpdns_shared_cache_requests_total", dimensions: [("outcome", outcome.rawValue)], factory: metrics)
        }
        self.outcomes = outcomes
    }

    deinit {
        let connection = self.connection
        queue.async { connection.close() }
    }

    private func count(_ outcome: Outcome) { outcomes[outcome]?.increment() }

    /// The Redis key of a question: `prefix` + name + `/` + type number.
    package func redisKey(_ key: CacheKey) -> String { "\(prefix)\(key.name.description.lowercased())/\(key.type.rawValue)" }

    // MARK: SharedCache

    package func entry(for key: CacheKey, now: ResolverInstant) async -> CacheEntry? {
        guard shouldTry() else {
            count(.skipped)
            return nil
        }
        // Requests beyond what the queue can serve within the wait would only time out.
        guard pending.add(1, ordering: .relaxed).newValue <= 64 else {
            pending.subtract(1, ordering: .relaxed)
            count(.skipped)
            return nil
        }
        let redisKey = redisKey(key)
        let value: [UInt8]?? = await withCheckedContinuation { continuation in
            let once = ResumeOnce(continuation)
            queue.async { [self] in
                defer { pending.subtract(1, ordering: .relaxed) }
                guard !once.isResumed else { return }
                // GETRANGE answers "" for a missing key: no sealed value is empty.
                let reply = command(["GETRANGE", redisKey, "0", "\(Self.maxValueBytes)"].map { Array($0.utf8) })
                switch reply {
                case .bytes(let bytes): once.resume(.some(bytes.isEmpty ? nil : bytes))
                case .nil: once.resume(.some(nil))
                case .failed, .other: once.resume(nil)
                }
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(timeout / .nanoseconds(1)))) {
                if once.resume(nil) { self.count(.timeout) }
            }
        }
        guard let value else { return nil }  // timed out or failed (counted where it happened)
        guard let value else {
            count(.miss)
            return nil
        }
        guard value.count <= Self.maxValueBytes else {
            count(.rejected)
            logger.warning("shared cache: a value longer than any entry; ignored", metadata: ["key": "\(redisKey)"])
            return nil
        }
        guard let entry = open(value, redisKey: redisKey, for: key, now: now) else {
            count(.rejected)
            logger.warning("shared cache: a value failed authentication or does not answer its key; ignored", metadata: ["key": "\(redisKey)"])
            return nil
        }
        count(.hit)
        return entry
    }

    package func store(_ entry: CacheEntry, for key: CacheKey, now: ResolverInstant) {
        if case .failure = entry.payload { return }
        guard now < entry.expiresAt, shouldTry() else { return }
        guard pending.add(1, ordering: .relaxed).newValue <= Self.maxPendingWrites else {
            pending.subtract(1, ordering: .relaxed)
            count(.dropped)
            return
        }
        let redisKey = redisKey(key)
        let value = seal(entry, for: key, redisKey: redisKey, now: now)
        guard value.count <= Self.maxValueBytes else {
            pending.subtract(1, ordering: .relaxed)
            return
        }
        let milliseconds = max(1, Int64((entry.expiresAt - now) / .milliseconds(1)))
        queue.async { [self] in
            defer { pending.subtract(1, ordering: .relaxed) }
            if case .other = command([Array("SET".utf8), Array(redisKey.utf8), value, Array("PX".utf8), Array("\(milliseconds)".utf8)]) {
                count(.stored)
            }
        }
    }

    // MARK: Values

    /// `HMAC ‖ snapshot of the one entry`.
    package func seal(_ entry: CacheEntry, for key: CacheKey, redisKey: String, now: ResolverInstant) -> [UInt8] {
        let snapshot = CacheSnapshot.encode([(key, entry)], monotonicNow: now, wallMilliseconds: Self.wallMilliseconds())
        return Array(mac(redisKey, snapshot)) + snapshot
    }

    /// The entry a value holds, when its MAC is right and it answers `key`; nil otherwise.
    package func open(_ value: [UInt8], redisKey: String, for key: CacheKey, now: ResolverInstant) -> CacheEntry? {
        let macSize = SHA256.byteCount
        guard value.count > macSize, value.count <= Self.maxValueBytes else { return nil }
        let snapshot = Array(value[macSize...])
        guard HMAC<SHA256>.isValidAuthenticationCode(value[..<macSize], authenticating: Array(redisKey.utf8) + [0] + snapshot, using: self.key)
        else { return nil }
        guard let entries = try? CacheSnapshot.decode(snapshot, monotonicNow: now, wallMilliseconds: Self.wallMilliseconds()),
            entries.count == 1, entries[0].0 == key
        else { return nil }
        return entries[0].1
    }

    private func mac(_ redisKey: String, _ snapshot: [UInt8]) -> HashedAuthenticationCode<SHA256> {
        HMAC<SHA256>.authenticationCode(for: Array(redisKey.utf8) + [0] + snapshot, using: key)
    }

    static func wallMilliseconds() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970 * 1_000)) }

    // MARK: The connection (on `queue` only)

    private func shouldTry() -> Bool {
        health.withLock { state in
            guard let until = state.skipUntil else { return true }
            return ContinuousClock.now >= until
        }
    }

    private enum Reply {
        case bytes([UInt8])
        case `nil`
        case other
        case failed
    }

    /// Runs one command, connecting first when needed; an error closes the connection and makes the
    /// cache skipped for ``backoff``. On `queue`.
    private func command(_ arguments: [[UInt8]]) -> Reply {
        guard let context = connection.context ?? connect() else { return .failed }
        let reply = Self.run(context, arguments)
        guard let reply else {
            let reason = context.pointee.err != 0 ? Self.errorText(context) : "no reply"
            fail(reason)
            return .failed
        }
        defer { freeReplyObject(reply) }
        switch reply.pointee.type {
        case REDIS_REPLY_STRING:
            return .bytes(reply.pointee.len == 0 ? [] : Array(UnsafeRawBufferPointer(start: reply.pointee.str, count: reply.pointee.len)))
        case REDIS_REPLY_NIL: return .nil
        case REDIS_REPLY_ERROR:
            let message = reply.pointee.str.map { String(cString: $0) } ?? "error"
            fail("Redis answered: \(message)")
            return .failed
        default: return .other
        }
    }

    private static func run(_ context: UnsafeMutablePointer<redisContext>, _ arguments: [[UInt8]]) -> UnsafeMutablePointer<redisReply>? {
        let lengths = arguments.map(\.count)
        let pointers = arguments.map { bytes -> UnsafeMutablePointer<CChar> in
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: max(bytes.count, 1))
            bytes.withUnsafeBytes { raw in
                if let base = raw.baseAddress { UnsafeMutableRawPointer(buffer).copyMemory(from: base, byteCount: bytes.count) }
            }
            return buffer
        }
        defer { pointers.forEach { $0.deallocate() } }
        var argv = pointers.map { UnsafePointer<CChar>?($0) }
        let raw = argv.withUnsafeMutableBufferPointer { argv in
            lengths.withUnsafeBufferPointer { lengths in
                redisCommandArgv(context, Int32(arguments.count), argv.baseAddress, lengths.baseAddress)
            }
        }
        return raw?.assumingMemoryBound(to: redisReply.self)
    }

    private func connect() -> UnsafeMutablePointer<redisContext>? {
        let micros = Int(max(timeout * 4, .milliseconds(200)) / .microseconds(1))
        let limit = timeval(tv_sec: micros / 1_000_000, tv_usec: micros % 1_000_000)
        let context: UnsafeMutablePointer<redisContext>? =
            switch endpoint {
            case .tcp(let host, let port): redisConnectWithTimeout(host, Int32(port), limit)
            case .unix(let path): redisConnectUnixWithTimeout(path, limit)
            }
        guard let context else {
            fail("cannot allocate a connection")
            return nil
        }
        guard context.pointee.err == 0 else {
            let reason = Self.errorText(context)
            redisFree(context)
            fail(reason)
            return nil
        }
        redisSetTimeout(context, limit)
        connection.context = context
        if let password {
            // The password goes only to Redis, never to a log or an error.
            guard let reply = Self.run(context, [Array("AUTH".utf8), Array(password.utf8)]) else {
                fail("AUTH got no reply")
                return nil
            }
            let refused = reply.pointee.type == REDIS_REPLY_ERROR
            freeReplyObject(reply)
            if refused {
                fail("AUTH refused (cache.shared.password_file)")
                return nil
            }
        }
        let wasDown = health.withLock { state in
            defer { state = (nil, true) }
            return !state.up
        }
        if wasDown { logger.notice("shared cache: connected to Redis again", metadata: ["redis": "\(endpoint)"]) }
        return context
    }

    private static func errorText(_ context: UnsafeMutablePointer<redisContext>) -> String {
        withUnsafeBytes(of: context.pointee.errstr) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    private func fail(_ reason: String) {
        connection.close()
        count(.error)
        let wasUp = health.withLock { state in
            defer { state = (ContinuousClock.now + Self.backoff, false) }
            return state.up
        }
        if wasUp {
            logger.warning(
                "shared cache: Redis unavailable; lookups go on without it, retried every second",
                metadata: ["redis": "\(endpoint)", "error": "\(reason)"])
        }
    }
}

/// The hiredis context, touched only on the cache's serial queue.
private final class Connection: @unchecked Sendable {
    // Safety: read and written only on RedisSharedCache.queue (and in its deinit's last block there).
    var context: UnsafeMutablePointer<redisContext>?

    func close() {
        if let context { redisFree(context) }
        context = nil
    }
}

/// A continuation resumed once, by whichever comes first: the reply or the timer.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<Value, Never>?>

    init(_ continuation: CheckedContinuation<Value, Never>) { self.continuation = Mutex(continuation) }

    var isResumed: Bool { continuation.withLock { $0 == nil } }

    /// Resumes with `value` unless already resumed; true when this call did.
    @discardableResult
    func resume(_ value: Value) -> Bool {
        guard
            let continuation = continuation.withLock({ current in
                defer { current = nil }
                return current
            })
        else { return false }
        continuation.resume(returning: value)
        return true
    }
}
