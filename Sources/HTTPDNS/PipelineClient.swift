import Crypto
import CurlSupport
import DNSCore
import Foundation
import IOScheduling
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The connection to one server and the thread that drives it: queries pipelined on one TLS
/// connection that libcurl opens (``CurlConnection``: the trust, SPKI pins and bootstrap pinning of
/// every transfer), written and read by a worker thread of its own.
///
/// Callers hand queries over through `shared`; the worker (started when a query comes, gone once
/// the connection has been idle for ``PipelineState/idleTimeout``) connects, writes, polls and reads, and resumes
/// each caller with its answer or its failure. A query costs two thread hops and no per-transfer
/// setup: what makes DoT and DoH here as fast as the fastest forwarders (BENCHMARKS.md).
final class PipelineClient<Framing: PipelineFraming>: Sendable {
    typealias Job = PipelineJob

    struct Shared {
        var queue: [Job] = []
        var waiters: [UInt64: CheckedContinuation<Result<[UInt8], DNSError>, Never>] = [:]
        var nextToken: UInt64 = 0
        var running = false
        /// Queries whose callers cancelled them, counted: the worker drops them from its queue
        /// when this moved (``PipelineState/dropWaiting(where:)``).
        var cancellations: UInt64 = 0
    }

    let endpoint: UpstreamEndpoint
    let trust: TLSTrust
    let threadName: String
    /// ALPN `h2` for the connection (DoH), or none (DoT).
    let http2: Bool
    let makeFraming: @Sendable () -> Framing
    let shared = Mutex(Shared())
    /// Until when the owner takes another way (libcurl's HTTP/1.1): set when the server showed,
    /// inside TLS, that it does not speak the framing's protocol — ALPN picked `http/1.1`, or its
    /// first bytes were not HTTP/2 — and never for good: after ``refusalLifetime`` HTTP/2 is tried
    /// again, as a circuit breaker half-opens. A TLS alert, which anyone on path can forge, is a
    /// failed connection like any other (F25 of redteam-4).
    private let refusedUntil = Mutex<ContinuousClock.Instant?>(nil)
    static var refusalLifetime: Duration { .seconds(300) }
    /// A pipe whose read end wakes the worker from poll(2) when a query arrives.
    let wake: Int32
    let wakeWriter: Int32

    init(endpoint: UpstreamEndpoint, trust: TLSTrust, threadName: String, http2: Bool, makeFraming: @escaping @Sendable () -> Framing) {
        self.endpoint = endpoint
        var trust = trust
        trust.pinnedPublicKey = endpoint.pinnedPublicKey
        self.trust = trust
        self.threadName = threadName
        self.http2 = http2
        self.makeFraming = makeFraming
        var ends: [Int32] = [-1, -1]
        if pipe(&ends) == 0 {
            for end in ends { _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK) }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        }
        (wake, wakeWriter) = (ends[0], ends[1])
    }

    deinit {
        close(wake)
        close(wakeWriter)
    }

    /// Whether queries go on this client's own connection now (the server has not refused its
    /// protocol within ``refusalLifetime``).
    func usesOwnProtocol(at now: ContinuousClock.Instant = .now) -> Bool {
        refusedUntil.withLock { until in
            guard let end = until else { return true }
            guard now >= end else { return false }
            until = nil
            return true
        }
    }

    /// Records that the server does not speak the framing's protocol, for ``refusalLifetime``.
    func noteProtocolRefused(at now: ContinuousClock.Instant = .now) {
        refusedUntil.withLock { $0 = now + Self.refusalLifetime }
    }

    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        guard query.count >= 12, query.count <= DNSMessage.maxSize else {
            throw DNSError(.invalidQuery, "a DNS message of \(query.count) bytes cannot be sent")
        }
        let token = shared.withLock { shared in
            shared.nextToken += 1
            return shared.nextToken
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // The worker is woken only by the query that finds the queue empty: it takes the
                // whole queue when it wakes, so a burst costs one wake.
                let (startWorker, wake, cancelled) = shared.withLock { shared in
                    // Cancelled before the handler was installed: its `onCancel` ran already and
                    // found no waiter, so nothing would resume this one but the answer or the
                    // deadline — and a hedged lookup waits for its cancelled attempts to end.
                    guard !Task.isCancelled else { return (false, false, true) }
                    shared.waiters[token] = continuation
                    let wasEmpty = shared.queue.isEmpty
                    shared.queue.append(Job(token: token, wire: query, deadline: .now + timeout))
                    defer { shared.running = true }
                    return (!shared.running, wasEmpty, false)
                }
                if cancelled {
                    continuation.resume(returning: .failure(DNSError(.cancelled, "cancelled")))
                } else if startWorker {
                    IOThread.start(name: threadName) { [self] in PipelineWorker(client: self).run() }
                } else if wake {
                    var one: UInt8 = 1
                    _ = write(wakeWriter, &one, 1)
                }
            }
        } onCancel: {
            let waiter = shared.withLock { shared in
                shared.cancellations &+= 1
                return shared.waiters.removeValue(forKey: token)
            }
            waiter?.resume(returning: .failure(DNSError(.cancelled, "cancelled")))
        }
        return try result.get()
    }

    /// Resumes the caller waiting for `token`, once.
    func finish(_ token: UInt64, _ result: Result<[UInt8], DNSError>) {
        shared.withLock { $0.waiters.removeValue(forKey: token) }?.resume(returning: result)
    }

    /// What the worker opens: the URL names the host the certificate must be valid for (the
    /// `tls_name`, else the host); the socket goes to the bootstrap addresses, or to the literal.
    func connectRequest(budget: Duration) -> CurlRequest {
        let name = endpoint.tlsName ?? endpoint.host
        let authority = IPAddress(name)?.urlHost ?? name
        var request = CurlRequest(url: "https://\(authority):\(endpoint.port)/", timeout: budget, trust: trust)
        request.collectsCertificates = endpoint.checksChainOnConnection
        let addresses =
            endpoint.hostIsLiteral
            ? (name == endpoint.host ? [] : [IPAddress(endpoint.host).map(\.urlHost) ?? endpoint.host])
            : endpoint.bootstrap.map(\.urlHost)
        if !addresses.isEmpty {
            (request.connectTo, request.resolve) = Pinning.pin(host: name, port: endpoint.port, to: addresses)
        }
        return request
    }

    /// Whether a certificate of `chain` (DER) has a `tbsCertificate` whose SHA-256 is one of the
    /// endpoint's hashes; true when it has none.
    /// Whether the leaf of the verified `chain` names `address` (DDR's verified discovery).
    func certificateNames(_ address: IPAddress, _ chain: [[UInt8]]) -> Bool {
        guard let leaf = chain.first else { return false }
        return CurlConnection.certificate(leaf, namesAddress: address.bytes)
    }

    func chainMatchesHashes(_ chain: [[UInt8]]) -> Bool {
        guard !endpoint.certificateHashes.isEmpty else { return true }
        return chain.contains { certificate in
            guard let tbs = tbsCertificate(certificate) else { return false }
            return endpoint.certificateHashes.contains(Array(SHA256.hash(data: tbs)))
        }
    }
}

/// The first element of a DER `Certificate` SEQUENCE, tag and length included (RFC 5280 §4.1).
func tbsCertificate(_ der: [UInt8]) -> ArraySlice<UInt8>? {
    /// The content's start and end of the element at `offset`, when it is a SEQUENCE that fits.
    func sequence(at offset: Int, within end: Int) -> (content: Int, end: Int)? {
        guard offset + 2 <= end, der[offset] == 0x30 else { return nil }
        var length = Int(der[offset + 1])
        var content = offset + 2
        if length & 0x80 != 0 {
            let count = length & 0x7f
            guard (1...3).contains(count), content + count <= end else { return nil }
            length = der[content..<content + count].reduce(0) { $0 << 8 | Int($1) }
            content += count
        }
        guard length <= end - content else { return nil }
        return (content, content + length)
    }
    guard let outer = sequence(at: 0, within: der.count), let inner = sequence(at: outer.content, within: outer.end) else { return nil }
    return der[outer.content..<inner.end]
}

/// Keys of queries given up on one connection whose answers may still come (DoT's IDs): not drawn
/// again until that answer comes or the connection closes, so that a late answer is never taken for
/// a new query's (F27 of redteam-4; unbound keeps them the same way). Past ``maxKeys`` the connection
/// takes no new query and closes once the rest are answered (a new one starts with none).
struct AbandonedKeys {
    private var keys: Set<UInt32> = []
    static var maxKeys: Int { 4_096 }

    var isFull: Bool { keys.count >= Self.maxKeys }
    var count: Int { keys.count }
    func contains(_ key: UInt32) -> Bool { keys.contains(key) }
    mutating func insert(_ key: UInt32) { keys.insert(key) }
    /// The late answer came: the key is free again. Whether it was reserved.
    @discardableResult mutating func remove(_ key: UInt32) -> Bool { keys.remove(key) != nil }
}

/// The thread of one ``PipelineClient``: it connects, writes, polls and reads for a
/// ``PipelineState``, which decides everything else, and resumes callers as the state says. Touched
/// by its own thread only.
private final class PipelineWorker<Framing: PipelineFraming> {
    let client: PipelineClient<Framing>
    var connection: CurlConnection?
    var state: PipelineState<Framing>
    var actions: [PipelineAction] = []
    /// ``PipelineClient/Shared/cancellations`` when the queue was last cleared of cancelled queries.
    var seenCancellations: UInt64 = 0
    /// The last read stopped at ``readBudget`` with more perhaps waiting (inside TLS, where poll(2)
    /// does not see it): the next turn reads again before it polls.
    var readPending = false
    /// The bytes one turn reads at most: a server that never stops sending still lets the turn end,
    /// so deadlines fire and queries fail over (before, it held the thread in its read loop).
    static var readBudget: Int { 256 * 1024 }
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)

    init(client: PipelineClient<Framing>) {
        self.client = client
        self.state = PipelineState(framing: client.makeFraming(), now: .now)
    }

    deinit { buffer.deallocate() }

    func run() {
        var scheduling = BatchWhileBusy()
        while true {
            let jobs: [PipelineJob]? = client.shared.withLock { shared in
                let jobs = shared.queue
                shared.queue = []
                if jobs.isEmpty, state.isIdle {
                    shared.running = false
                    return nil
                }
                return jobs
            }
            guard let jobs else { return }
            state.enqueue(jobs)
            scheduling.update(underWay: state.underWay)
            let now = ContinuousClock.now
            state.tick(now, &actions)
            perform()
            if connection != nil {
                dropCancelled()
                state.send(.now)
                flush()
                if readPending { receive() } else { poll(until: state.wake(now)) }
            } else if !state.isIdle {
                continue
            }
            state.closeIfIdle(.now, &actions)
            perform()
        }
    }

    /// Clears the queue of queries whose callers are gone, when some were cancelled or put back by a
    /// lost connection since the last time: one lock for the walk, and no walk otherwise.
    func dropCancelled() {
        guard !state.waiting.isEmpty else { return }
        client.shared.withLock { shared in
            guard state.requeued || shared.cancellations != seenCancellations else { return }
            seenCancellations = shared.cancellations
            state.dropWaiting { shared.waiters[$0] == nil }
        }
    }

    /// Does what the state asked for, in order; what that leads to (a connection's outcome) may
    /// ask for more.
    func perform() {
        while !actions.isEmpty {
            let batch = actions
            actions.removeAll(keepingCapacity: true)
            for action in batch {
                switch action {
                case .finish(let token, let result): client.finish(token, result)
                case .close: connection = nil
                case .protocolRefused: client.noteProtocolRefused()
                case .connect(let deadline): connect(deadline)
                }
            }
        }
    }

    func connect(_ deadline: ContinuousClock.Instant) {
        do {
            let opened = try CurlConnection.open(client.connectRequest(budget: deadline - .now), http2: client.http2)
            guard client.chainMatchesHashes(opened.certificates) else {
                let message = "no certificate of the server's verified chain matches the stamp's certificate hashes"
                state.connectFailed(DNSError(.tlsFailed, message), &actions)
                return
            }
            if let designating = client.endpoint.designatingResolver, !client.certificateNames(designating, opened.certificates) {
                let message = "the certificate does not name \(designating), the resolver that designated this one (RFC 9462 §4.2)"
                state.connectFailed(DNSError(.tlsFailed, message), &actions)
                return
            }
            if client.http2, let picked = opened.negotiatedProtocol, picked != "h2" {
                // Said in the verified handshake: the server speaks HTTP/2 on no connection.
                state.connectFailed(DNSError(.malformedResponse, "the server does not speak HTTP/2 (ALPN picked \(picked))"), refused: true, &actions)
                return
            }
            connection = opened
            UpstreamSocket.retransmitSooner(opened.socket)
            // The handshake's last read may have taken the server's first bytes (HTTP/2's SETTINGS)
            // into TLS, where poll(2) does not see them (CurlConnection): read before polling.
            readPending = true
            state.connected(client.makeFraming(), .now)
        } catch {
            // Whatever the handshake's failure — an alert included, which is not authenticated — it
            // says nothing lasting about the server: the next query connects again.
            state.connectFailed(DNSError(HTTPTransport.code(for: error.code), error.message), &actions)
        }
    }

    func flush() {
        guard let connection else { return }
        while let range = state.nextWrite {
            let outcome = state.output.withUnsafeBytes { bytes in
                Result { () throws(CurlError) in try connection.send(UnsafeRawBufferPointer(rebasing: bytes[range])) }
            }
            switch outcome {
            case .success(let sent):
                state.wrote(sent)
                if sent == 0 { return }
            case .failure(let error):
                // The server may have answered some before it closed: take those first.
                receive()
                if self.connection != nil {
                    state.lost("sending failed: \(error.message)", &actions)
                    perform()
                }
                return
            }
        }
    }

    func poll(until wake: ContinuousClock.Instant) {
        guard let connection else { return }
        var fds = [
            pollfd(fd: connection.socket, events: Int16(POLLIN) | (state.wantsWrite ? Int16(POLLOUT) : 0), revents: 0),
            pollfd(fd: client.wake, events: Int16(POLLIN), revents: 0),
        ]
        let remaining = wake - .now
        let milliseconds = max(0, min(1000, remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1))
        let ready = Glibc.poll(&fds, 2, Int32(milliseconds))
        guard ready > 0 else { return }
        if fds[1].revents != 0 {
            var drained = [UInt8](repeating: 0, count: 64)
            while read(client.wake, &drained, drained.count) > 0 {}
        }
        if fds[0].revents & Int16(POLLOUT) != 0 { flush() }
        if fds[0].revents & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 { receive() }
    }

    /// Reads everything waiting (TLS may hold decrypted bytes the socket no longer shows) and hands
    /// it to the state read by read.
    func receive() {
        var closed: String?
        var budget = Self.readBudget
        readPending = false
        while let connection {
            if budget <= 0 {
                readPending = true
                break
            }
            let count: Int?
            do { count = try connection.receive(into: buffer) } catch {
                closed = "receiving failed: \(error.message)"
                break
            }
            guard let count else { break }
            guard count > 0 else {
                closed = "the server closed the connection"
                break
            }
            budget -= count
            state.received(UnsafeRawBufferPointer(rebasing: buffer[0..<count]), .now, &actions)
            perform()
        }
        if closed == nil, let connection { UpstreamSocket.acknowledgeAtOnce(connection.socket) }
        // Answers that came before the close have been delivered first.
        if let closed, connection != nil {
            state.lost(closed, &actions)
            perform()
        }
        if state.wantsWrite, connection != nil { flush() }
    }
}

/// The socket options of an upstream connection (DoT, DoH on HTTP/2), set by its worker.
enum UpstreamSocket {
    /// What a lost segment costs on a lossy path. Every answer pipelined behind a lost segment waits
    /// for its retransmission (head-of-line blocking), and Linux's timer for it is at least
    /// 200 ms past the smoothed RTT, doubled after each retransmission that is lost too: on 10 % loss
    /// with 80 ms each way, two losses of one segment in a row hold the connection 1.1 s and three
    /// 2.6 s, which becomes the p99 of every query behind them (by the timer's arithmetic, 370 + 740
    /// + 1,480 ms; the test command once measured a p99 of 2.67 s; BENCHMARKS.md, "The lossy link").
    /// A DNS pipeline is
    /// a thin stream (a few small segments in flight), the case the kernel's linear timeouts are for
    /// (`TCP_THIN_LINEAR_TIMEOUTS`: no doubling for the first six retransmissions while fewer than
    /// four segments are in flight), and its segments are too small for a spurious retransmission to
    /// cost anything but a few bytes: the floor goes to ``minimumRetransmissionTimeout``
    /// (`TCP_RTO_MIN_US`, Linux 6.15; older kernels refuse it and keep 200 ms).
    static func retransmitSooner(_ socket: Int32) {
        var on: Int32 = 1
        _ = setsockopt(socket, Int32(IPPROTO_TCP), 16 /* TCP_THIN_LINEAR_TIMEOUTS */, &on, socklen_t(MemoryLayout<Int32>.size))
        let (seconds, attoseconds) = minimumRetransmissionTimeout.components
        var floor = Int32(seconds * 1_000_000 + attoseconds / 1_000_000_000_000)
        _ = setsockopt(socket, Int32(IPPROTO_TCP), 45 /* TCP_RTO_MIN_US */, &floor, socklen_t(MemoryLayout<Int32>.size))
    }

    /// The retransmission timer's floor on an upstream connection: the timer is still the smoothed RTT
    /// plus four mean deviations (RFC 6298), only not less than this past the RTT.
    static var minimumRetransmissionTimeout: Duration { .milliseconds(50) }

    /// Servers write pipelined answers one by one, and those without TCP_NODELAY (BIND 9.18's and
    /// unbound's DoT) hold the second until the first is acknowledged (Nagle), while Linux delays
    /// that ACK for 40 ms (BENCHMARKS.md, "DNS over TLS"). Quick ACKs (re-armed after each
    /// read, as the kernel clears the flag) release it at once.
    static func acknowledgeAtOnce(_ socket: Int32) {
        var on: Int32 = 1
        _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_QUICKACK, &on, socklen_t(MemoryLayout<Int32>.size))
    }
}
