import CCares
import DNSCore
import Foundation
import Synchronization

/// Plain DNS through c-ares: the system's (hijackable) view, for fallback and comparison.
///
/// c-ares 1.18 has no event thread and its channel is not thread-safe, so one thread per resolver
/// owns the channel and drives it with `ares_getsock`/`poll`/`ares_process_fd`; lookups are handed
/// over through a queue and a wake-up pipe. Responses are decoded and validated by ``/DNSCore/DNSMessage``,
/// so TTLs, CNAME chains and the question echo are checked as for trusted answers.
///
/// ```swift
/// let system = try SystemResolver(servers: ["127.0.0.1:5353"])
/// let answer = try await system.query(.init(name: try DomainName("www.example.test"), type: .a), timeout: .seconds(2))
/// ```
public final class SystemResolver: MessageExchanging, @unchecked Sendable {
    // Safety: `channel` and `pending` are used only on the loop thread; the hand-over queue is a
    // Mutex; the pipe descriptors are fixed after init.

    public let identifier: String
    public var source: Resolution.Source { .system }

    private var channel: ares_channel?
    private let wakeRead: Int32
    private let wakeWrite: Int32
    private let inbox = Mutex<Inbox>(Inbox())
    private var pending: [UInt64: PendingQuery] = [:]
    private let nextID = Atomic<UInt64>(0)

    private struct Inbox {
        var queries: [PendingQuery] = []
        var cancelled: [UInt64] = []
        var running = true
    }

    /// - Parameters:
    ///   - servers: `IP`, `IP:port` or `[IPv6]:port`; empty means the system's
    ///     /etc/resolv.conf (never in tests: that server is off-machine).
    ///   - attemptTimeout: how long one attempt at one server waits for its answer.
    ///   - tries: attempts per server before the next one is asked.
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` for an unusable server list.
    public init(servers: [String] = [], attemptTimeout: Duration = .milliseconds(1500), tries: Int = 2) throws(DNSError) {
        _ = Self.libraryInit
        var options = ares_options()
        options.flags = Int32(ARES_FLAG_NOSEARCH | ARES_FLAG_EDNS)
        options.timeout = Int32(
            max(
                1,
                attemptTimeout.components.seconds * 1000
                    + Int64(attemptTimeout.components.attoseconds / 1_000_000_000_000_000)))
        options.tries = Int32(max(1, tries))
        var created: ares_channel?
        let status = ares_init_options(&created, &options, Int32(ARES_OPT_FLAGS | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES))
        guard status == ARES_SUCCESS, let created else {
            throw DNSError(.invalidConfiguration, "c-ares could not start: \(String(cString: ares_strerror(status)))")
        }
        if !servers.isEmpty {
            let normalized: [String]
            do { normalized = try servers.map(Self.normalize) } catch {
                ares_destroy(created)
                throw error
            }
            let csv = normalized.joined(separator: ",")
            let set = ares_set_servers_ports_csv(created, csv)
            guard set == ARES_SUCCESS else {
                ares_destroy(created)
                throw DNSError(.invalidConfiguration, "system DNS servers '\(csv)': \(String(cString: ares_strerror(set)))")
            }
            identifier = "dns://" + normalized.joined(separator: ",")
        } else {
            identifier = "dns://system"
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            ares_destroy(created)
            throw DNSError(.invalidConfiguration, "cannot create a wake-up pipe")
        }
        _ = fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK)
        _ = fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK)
        channel = created
        wakeRead = fds[0]
        wakeWrite = fds[1]
        let thread = Thread { [self] in
            Thread.current.name = "httpdns.c-ares"  // set from the thread itself: Linux names it so
            self.run()
        }
        thread.start()
    }

    deinit {
        close(wakeRead)
        close(wakeWrite)
    }

    /// Stops the loop thread; outstanding lookups fail with `cancelled`.
    public func shutdown() {
        inbox.withLock { $0.running = false }
        wake()
    }

    private static let libraryInit: Void = { _ = ares_library_init(ARES_LIB_INIT_ALL) }()

    /// `IP` → `IP:53`; `IPv6` → `[IPv6]:53`; `IP:port` and `[IPv6]:port` kept.
    static func normalize(_ server: String) throws(DNSError) -> String {
        guard let (address, port) = IPAddress.endpoint(server) else {
            throw DNSError(.invalidConfiguration, "system DNS server '\(server)' is not IP[:port]")
        }
        return address.family == .ipv6 ? "[\(address)]:\(port ?? 53)" : "\(address):\(port ?? 53)"
    }

    // MARK: DNSUpstream

    public func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        let raw = try await exchange(question, timeout: timeout)
        return try Self.interpret(status: raw.status, answer: raw.answer, question: question, server: identifier).get()
    }

    /// The whole response to `question` (any type: HTTPS, TXT, …), checked to answer it; the
    /// caller reads its sections. NXDOMAIN and NODATA without a message are `nxdomain`/`nodata`.
    /// With `dnssecOK` the query carries DO (RFC 3225), so that a resolver that has them hands
    /// over the RRSIGs and NSEC records: what DNSSEC evidence about the system side needs.
    public func message(_ question: DNSMessage.Question, timeout: Duration, dnssecOK: Bool = false) async throws(DNSError) -> DNSMessage {
        var wire: [UInt8]?
        if dnssecOK {
            let opt = DNSMessage.Record(name: .root, type: .opt, recordClass: 1232, ttl: 0x0000_8000, data: .opaque([]))
            wire = DNSMessage(id: 0, flags: 0x0100, questions: [question], additionals: [opt]).encode()
        }
        let raw = try await exchange(question, wire: wire, timeout: timeout)
        if let answer = raw.answer, !answer.isEmpty {
            do {
                let message = try DNSMessage(decoding: answer)
                try message.validate(answering: question, id: message.id)
                return message
            } catch {
                throw DNSError(.malformedResponse, "\(identifier): \(error)")
            }
        }
        switch raw.status {
        case ARES_ENOTFOUND: throw DNSError(.nxdomain, "\(question.name) does not exist (NXDOMAIN from \(identifier))")
        case ARES_ENODATA: throw DNSError(.nodata, "\(question.name) has no \(question.type) records (from \(identifier))")
        default:
            switch Self.interpret(status: raw.status, answer: nil, question: question, server: identifier) {
            case .failure(let error): throw error
            case .success: throw DNSError(.upstreamFailed, "\(identifier): no message")
            }
        }
    }

    /// Sends a whole query message (split DNS forwards other types this way) and returns the
    /// response with the query's ID (c-ares gives each query one of its own). A response whose RCODE
    /// c-ares treats as a server failure (SERVFAIL, REFUSED, NOTIMP) is an error, as in lookups.
    /// A client's EDNS padding is removed first: it was for an encrypted hop, and plain DNS is
    /// never padded (F51-P3).
    public func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        let question = try DNSMessage.question(ofQuery: query)
        let raw = try await exchange(question, wire: EDNSPadding.unpadded(query), timeout: timeout)
        guard var answer = raw.answer, answer.count >= 12 else {
            switch Self.interpret(status: raw.status, answer: nil, question: question, server: identifier) {
            case .failure(let error): throw error
            case .success: throw DNSError(.upstreamFailed, "\(identifier): no message")
            }
        }
        answer[0] = query[0]
        answer[1] = query[1]
        return answer
    }

    private func exchange(_ question: DNSMessage.Question, wire: [UInt8]? = nil, timeout: Duration) async throws(DNSError) -> RawAnswer {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let result: Result<RawAnswer, DNSError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let query = PendingQuery(id: id, question: question, wire: wire, deadline: .now + timeout, continuation: continuation)
                let accepted = inbox.withLock { inbox -> Bool in
                    guard inbox.running else { return false }
                    inbox.queries.append(query)
                    return true
                }
                if accepted { wake() } else { query.finish(.failure(DNSError(.cancelled, "the system resolver has stopped"))) }
            }
        } onCancel: {
            inbox.withLock { $0.cancelled.append(id) }
            wake()
        }
        return try result.get()
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
    }

    // MARK: Loop thread

    private func run() {
        guard let channel else { return }
        var fds = [pollfd]()
        var sockets = [ares_socket_t](repeating: -1, count: Int(ARES_GETSOCK_MAXNUM))
        while true {
            let (queries, cancelled, running) = inbox.withLock { inbox in
                defer {
                    inbox.queries.removeAll()
                    inbox.cancelled.removeAll()
                }
                return (inbox.queries, inbox.cancelled, inbox.running)
            }
            for query in queries { start(query, on: channel) }
            for id in cancelled { pending.removeValue(forKey: id)?.finish(.failure(DNSError(.cancelled, "cancelled"))) }
            expireOverdue()
            if !running { break }

            let mask = ares_getsock(channel, &sockets, Int32(ARES_GETSOCK_MAXNUM))
            fds.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0))
            for index in 0..<Int(ARES_GETSOCK_MAXNUM) {
                let readable = mask & (1 << index) != 0
                let writable = mask & (1 << (index + Int(ARES_GETSOCK_MAXNUM))) != 0
                guard readable || writable else { continue }
                fds.append(pollfd(fd: sockets[index], events: Int16(readable ? POLLIN : 0) | Int16(writable ? POLLOUT : 0), revents: 0))
            }
            var maxWait = timeval(tv_sec: 1, tv_usec: 0)
            var wait = timeval()
            let timeout = ares_timeout(channel, &maxWait, &wait).pointee
            var milliseconds = Int32(timeout.tv_sec * 1000 + timeout.tv_usec / 1000)
            if let nearest = pending.values.map(\.deadline).min() {
                let left = nearest - .now
                milliseconds = min(
                    milliseconds,
                    Int32(
                        max(
                            0,
                            left.components.seconds * 1000
                                + Int64(left.components.attoseconds / 1_000_000_000_000_000) + 1)))
            }
            _ = poll(&fds, nfds_t(fds.count), max(0, milliseconds))

            if fds[0].revents != 0 {
                var buffer = [UInt8](repeating: 0, count: 64)
                while read(wakeRead, &buffer, buffer.count) > 0 {}
            }
            var activity = false
            for entry in fds.dropFirst() where entry.revents != 0 {
                activity = true
                let readable = entry.revents & Int16(POLLIN | POLLERR | POLLHUP) != 0 ? entry.fd : ARES_SOCKET_BAD
                let writable = entry.revents & Int16(POLLOUT) != 0 ? entry.fd : ARES_SOCKET_BAD
                ares_process_fd(channel, readable, writable)
            }
            // Lets c-ares handle its own retransmission timeouts.
            if !activity { ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD) }
        }
        for query in pending.values { query.finish(.failure(DNSError(.cancelled, "the system resolver has stopped"))) }
        pending.removeAll()
        ares_destroy(channel)
        self.channel = nil
    }

    private func start(_ query: PendingQuery, on channel: ares_channel) {
        pending[query.id] = query
        let context = Unmanaged.passRetained(CallbackContext(owner: self, id: query.id)).toOpaque()
        if let wire = query.wire {
            // A query of our own making (DO set); c-ares gives it its own ID.
            wire.withUnsafeBufferPointer { buffer in ares_send(channel, buffer.baseAddress, Int32(buffer.count), onAnswer, context) }
            return
        }
        let name = query.question.name.description
        ares_query(channel, name, Int32(DNSMessage.classIN), Int32(query.question.type.rawValue), onAnswer, context)
    }

    private func expireOverdue() {
        let now = ContinuousClock.now
        for (id, query) in pending where query.deadline <= now {
            pending.removeValue(forKey: id)
            query.finish(.failure(DNSError(.timeout, "no answer from \(identifier) in time")))
        }
    }

    /// Called on the loop thread by the C callback.
    fileprivate func complete(id: UInt64, status: Int32, answer: [UInt8]?) {
        guard let query = pending.removeValue(forKey: id) else { return }
        query.finish(.success(RawAnswer(status: status, answer: answer)))
    }

    static func interpret(
        status: Int32, answer: [UInt8]?, question: DNSMessage.Question,
        server: String
    ) -> Result<AddressAnswer, DNSError> {
        if let answer, !answer.isEmpty {
            // c-ares matched the ID already; everything else is checked as for trusted answers.
            do throws(DNSError) {
                return .success(try DNSMessage.answer(decoding: answer, to: question, id: nil))
            } catch {
                return .failure(DNSError(error.code, "\(server): \(error.message)"))
            }
        }
        switch status {
        case ARES_ENOTFOUND: return .success(.nxdomain(negativeTTL: nil))
        case ARES_ENODATA: return .success(.nodata(negativeTTL: nil))
        case ARES_ETIMEOUT: return .failure(DNSError(.timeout, "\(server) did not answer"))
        case ARES_ECONNREFUSED:
            // c-ares 1.18 reports both a REFUSED rcode and an unreachable port this way.
            return .failure(DNSError(.refused, "\(server) refused the query (or is not listening)"))
        case ARES_ECANCELLED, ARES_EDESTRUCTION: return .failure(DNSError(.cancelled, "cancelled"))
        case ARES_ESERVFAIL: return .failure(DNSError(.serverFailure, "\(server) answered SERVFAIL"))
        case ARES_EREFUSED: return .failure(DNSError(.refused, "\(server) refused the query"))
        case ARES_ENOTIMP: return .failure(DNSError(.refused, "\(server) does not implement the query (NOTIMP)"))
        default: return .failure(DNSError(.upstreamFailed, "\(server): \(String(cString: ares_strerror(status)))"))
        }
    }
}

/// What c-ares called back with: its status, and the response when there was one.
private struct RawAnswer: Sendable {
    var status: Int32
    var answer: [UInt8]?
}

/// One lookup waiting for c-ares.
private final class PendingQuery: @unchecked Sendable {
    // Safety: finished only on the loop thread, or before it was ever enqueued.
    let id: UInt64
    let question: DNSMessage.Question
    /// The query as sent, when not c-ares' own (`ares_send` instead of `ares_query`).
    let wire: [UInt8]?
    let deadline: ContinuousClock.Instant
    private var continuation: CheckedContinuation<Result<RawAnswer, DNSError>, Never>?

    init(
        id: UInt64, question: DNSMessage.Question, wire: [UInt8]? = nil, deadline: ContinuousClock.Instant,
        continuation: CheckedContinuation<Result<RawAnswer, DNSError>, Never>
    ) {
        self.id = id
        self.question = question
        self.wire = wire
        self.deadline = deadline
        self.continuation = continuation
    }

    func finish(_ result: Result<RawAnswer, DNSError>) {
        continuation?.resume(returning: result)
        continuation = nil
    }
}

/// The C callback's argument: which resolver and which lookup. c-ares calls back exactly once per
/// query (also on destruction), which releases it.
private final class CallbackContext {
    let owner: SystemResolver
    let id: UInt64
    init(owner: SystemResolver, id: UInt64) {
        self.owner = owner
        self.id = id
    }
}

private let onAnswer: @convention(c) (UnsafeMutableRawPointer?, Int32, Int32, UnsafeMutablePointer<UInt8>?, Int32) -> Void = {
    argument, status, _, buffer, length in
    guard let argument else { return }
    let context = Unmanaged<CallbackContext>.fromOpaque(argument).takeRetainedValue()
    let answer = buffer.map { Array(UnsafeBufferPointer(start: $0, count: Int(max(0, length)))) }
    context.owner.complete(id: context.id, status: status, answer: answer)
}
