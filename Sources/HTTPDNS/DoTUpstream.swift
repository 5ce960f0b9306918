import Crypto
import CurlSupport
import DNSCore
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// An RFC 7858 resolver: DNS messages, each after its 2-byte length, over one TLS connection.
///
/// Queries are pipelined on the connection and answers matched by ID, in whatever order they
/// come (RFC 7766 §6.2.1.1). The connection is opened by libcurl with the same trust, SPKI pins
/// and bootstrap pinning as every DoH transfer (``CurlConnection``), so `import HTTPDNS` stays free
/// of NIO, and it is kept while queries keep coming.
struct DoTUpstream: MessageExchanging {
    let endpoint: UpstreamEndpoint
    let client: DoTClient

    init(endpoint: UpstreamEndpoint, trust: TLSTrust) {
        self.endpoint = endpoint
        self.client = DoTClient(endpoint: endpoint, trust: trust)
    }

    var identifier: String { endpoint.url }
    var source: Resolution.Source { .dot }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await queryByExchange(question, timeout: timeout)
    }

    /// Sends a whole message and returns the response's bytes with the query's ID; the ID on the
    /// wire is the connection's own.
    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        try await client.exchange(query, timeout: timeout)
    }
}

/// The connection to one DoT server and the thread that drives it.
///
/// Callers hand queries over through `shared`; one worker thread (started when a query comes, gone
/// once the connection has been idle for ``idleTimeout``) connects, writes, polls and reads, and
/// resumes each caller with its answer or its failure.
final class DoTClient: Sendable {
    struct Job {
        var token: UInt64
        var wire: [UInt8]
        var deadline: ContinuousClock.Instant
        /// Connections that closed with this query unanswered and nothing else answered: after
        /// ``DoTClient/maxAttempts`` the query fails.
        var failedAttempts = 0
    }

    struct Shared {
        var queue: [Job] = []
        var waiters: [UInt64: CheckedContinuation<Result<[UInt8], DNSError>, Never>] = [:]
        var nextToken: UInt64 = 0
        var running = false
    }

    /// Queries in flight on one connection; more wait their turn (unbound's and BIND's limits for a
    /// client's pipeline are in the hundreds).
    static let maxInFlight = 128
    /// A query goes out on at most this many connections that close without answering anything.
    static let maxAttempts = 3
    /// An unused connection is closed after this long (servers close theirs after 10–30 s).
    static let idleTimeout: Duration = .seconds(10)

    let endpoint: UpstreamEndpoint
    let trust: TLSTrust
    let shared = Mutex(Shared())
    /// A pipe whose read end wakes the worker from poll(2) when a query arrives.
    let wake: Int32
    let wakeWriter: Int32

    init(endpoint: UpstreamEndpoint, trust: TLSTrust) {
        self.endpoint = endpoint
        var trust = trust
        trust.pinnedPublicKey = endpoint.pinnedPublicKey
        self.trust = trust
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

    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        guard query.count >= 12, query.count <= 65_535 else {
            throw DNSError(.invalidQuery, "a DNS message of \(query.count) bytes cannot be sent over TLS")
        }
        let token = shared.withLock { shared in
            shared.nextToken += 1
            return shared.nextToken
        }
        let result = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // The worker is woken only by the query that finds the queue empty: it takes the
                // whole queue when it wakes, so a burst costs one wake.
                let (startWorker, wake) = shared.withLock { shared in
                    shared.waiters[token] = continuation
                    let wasEmpty = shared.queue.isEmpty
                    shared.queue.append(Job(token: token, wire: query, deadline: .now + timeout))
                    defer { shared.running = true }
                    return (!shared.running, wasEmpty)
                }
                if startWorker {
                    IOThread.start(name: "httpdns.dot") { [self] in DoTWorker(client: self).run() }
                } else if wake {
                    var one: UInt8 = 1
                    _ = write(wakeWriter, &one, 1)
                }
            }
        } onCancel: {
            finish(token, .failure(DNSError(.cancelled, "cancelled")))
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
        request.collectsCertificates = !endpoint.certificateHashes.isEmpty
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
    func chainMatchesHashes(_ chain: [[UInt8]]) -> Bool {
        guard !endpoint.certificateHashes.isEmpty else { return true }
        return chain.contains { certificate in
            guard let tbs = Self.tbsCertificate(certificate) else { return false }
            return endpoint.certificateHashes.contains(Array(SHA256.hash(data: tbs)))
        }
    }

    /// The first element of a DER `Certificate` SEQUENCE, tag and length included (RFC 5280 §4.1).
    static func tbsCertificate(_ der: [UInt8]) -> ArraySlice<UInt8>? {
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
}

/// The worker's state: touched by its own thread only.
private final class DoTWorker {
    struct Flight {
        var job: DoTClient.Job
        var sentAt: ContinuousClock.Instant
    }

    let client: DoTClient
    var connection: CurlConnection?
    /// Taken from the queue, not yet written.
    var waiting: [DoTClient.Job] = []
    var inFlight: [UInt16: Flight] = [:]
    /// No query in flight has a deadline before this (nil: none in flight), so that neither the
    /// expiry check nor the poll timeout walks every query on every turn.
    var earliestDeadline: ContinuousClock.Instant?
    /// Bytes to write; `written` of them are gone. A write TLS could not take is repeated with the
    /// same length (`retryLength`), as OpenSSL requires.
    var output: [UInt8] = []
    var written = 0
    var retryLength = 0
    var input: [UInt8] = []
    var lastReceived = ContinuousClock.now
    /// Answers on the current connection: one that closes after answering some has made progress
    /// (servers limit queries per connection), and its unanswered queries go out again freely.
    var answered = 0
    var lastUsed = ContinuousClock.now
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)

    init(client: DoTClient) { self.client = client }

    deinit { buffer.deallocate() }

    func run() {
        var scheduling = BatchWhileBusy()
        while true {
            let jobs: [DoTClient.Job]? = client.shared.withLock { shared in
                let jobs = shared.queue
                shared.queue = []
                if jobs.isEmpty, waiting.isEmpty, inFlight.isEmpty, connection == nil {
                    shared.running = false
                    return nil
                }
                return jobs
            }
            guard let jobs else { return }
            waiting += jobs
            scheduling.update(underWay: waiting.count + inFlight.count)
            let now = ContinuousClock.now
            expire(now)
            if connection == nil, !waiting.isEmpty { connect() }
            if connection != nil {
                send()
                poll(until: nextWake(now))
            } else if !inFlight.isEmpty || !waiting.isEmpty {
                continue
            }
            if connection != nil, inFlight.isEmpty, waiting.isEmpty, ContinuousClock.now - lastUsed >= DoTClient.idleTimeout {
                close()
            }
        }
    }

    /// Fails the queries whose time is up. One that got nothing back while the connection stayed
    /// silent marks the connection as dead: it is closed, and the others are sent again.
    func expire(_ now: ContinuousClock.Instant) {
        waiting.removeAll { job in
            guard job.deadline <= now else { return false }
            client.finish(job.token, .failure(DNSError(.timeout, "no connection within the time left")))
            return true
        }
        guard let earliest = earliestDeadline, earliest <= now else { return }
        var silent = false
        var next: ContinuousClock.Instant?
        for (id, flight) in inFlight {
            guard flight.job.deadline <= now else {
                next = min(next ?? flight.job.deadline, flight.job.deadline)
                continue
            }
            inFlight[id] = nil
            if lastReceived < flight.sentAt { silent = true }
            client.finish(flight.job.token, .failure(DNSError(.timeout, "no answer in time")))
        }
        earliestDeadline = next
        if silent { drop("the connection went silent") }
    }

    func connect() {
        guard let first = waiting.map(\.deadline).min() else { return }
        let budget = first - .now
        do {
            let opened = try CurlConnection.open(client.connectRequest(budget: budget))
            guard client.chainMatchesHashes(opened.certificates) else {
                let failure = DNSError(.tlsFailed, "no certificate of the server's chain matches the stamp's certificate hashes")
                for job in waiting { client.finish(job.token, .failure(failure)) }
                waiting = []
                return
            }
            connection = opened
            answered = 0
            lastReceived = .now
            lastUsed = .now
        } catch {
            let failure = DNSError(HTTPTransport.code(for: error.code), error.message)
            for job in waiting { client.finish(job.token, .failure(failure)) }
            waiting = []
        }
    }

    /// Moves waiting queries onto the connection, each with an ID of its own, and writes.
    func send() {
        let now = ContinuousClock.now
        while inFlight.count < DoTClient.maxInFlight, !waiting.isEmpty {
            let job = waiting.removeFirst()
            var id = UInt16.random(in: 0...UInt16.max)
            while inFlight[id] != nil { id &+= 1 }
            inFlight[id] = Flight(job: job, sentAt: now)
            earliestDeadline = min(earliestDeadline ?? job.deadline, job.deadline)
            let length = job.wire.count
            output.append(UInt8(length >> 8))
            output.append(UInt8(length & 0xff))
            output.append(UInt8(id >> 8))
            output.append(UInt8(id & 0xff))
            output.append(contentsOf: job.wire[2...])
            lastUsed = now
        }
        flush()
    }

    func flush() {
        guard let connection else { return }
        while written < output.count {
            let length = retryLength > 0 ? retryLength : min(output.count - written, 16 * 1024)
            let start = written
            let outcome = output.withUnsafeBytes { bytes in
                Result { () throws(CurlError) in try connection.send(UnsafeRawBufferPointer(rebasing: bytes[start..<start + length])) }
            }
            guard case .success(let sent) = outcome else {
                // The server may have answered some before it closed: take those first.
                receive()
                if self.connection != nil, case .failure(let error) = outcome { drop("sending failed: \(error.message)") }
                return
            }
            if sent == 0 {
                retryLength = length
                return
            }
            retryLength = 0
            written += sent
        }
        output.removeAll(keepingCapacity: true)
        written = 0
    }

    func nextWake(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        var wake = lastUsed + DoTClient.idleTimeout
        if let earliestDeadline { wake = min(wake, earliestDeadline) }
        for job in waiting { wake = min(wake, job.deadline) }
        return max(now, wake)
    }

    func poll(until wake: ContinuousClock.Instant) {
        guard let connection else { return }
        var fds = [
            pollfd(fd: connection.socket, events: Int16(POLLIN) | (written < output.count ? Int16(POLLOUT) : 0), revents: 0),
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

    /// Reads everything waiting (TLS may hold decrypted bytes the socket no longer shows) and
    /// delivers each whole answer.
    func receive() {
        var closed: String?
        while let connection {
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
            lastReceived = .now
            input.append(contentsOf: buffer[0..<count])
        }
        if closed == nil, let connection { Self.acknowledgeAtOnce(connection.socket) }
        // Answers that came before the close are delivered first.
        defer { if let closed, connection != nil { drop(closed) } }
        var start = 0
        while input.count - start >= 2 {
            let length = Int(input[start]) << 8 | Int(input[start + 1])
            guard length >= 12 else {
                fail(DNSError(.malformedResponse, "a \(length)-byte message is not a DNS response"))
                return
            }
            guard input.count - start - 2 >= length else { break }
            var message = Array(input[start + 2..<start + 2 + length])
            start += 2 + length
            let id = UInt16(message[0]) << 8 | UInt16(message[1])
            // An ID nobody waits for is a late answer to a query that timed out: dropped.
            guard let flight = inFlight.removeValue(forKey: id) else { continue }
            message[0] = flight.job.wire[0]
            message[1] = flight.job.wire[1]
            answered += 1
            client.finish(flight.job.token, .success(message))
        }
        input.removeFirst(start)
    }

    /// Servers write pipelined answers one by one, and those without TCP_NODELAY (BIND 9.18's and
    /// unbound's DoT) hold the second until the first is acknowledged (Nagle), while Linux delays
    /// that ACK for 40 ms: an A+AAAA pair took 49 ms instead of 7. Quick ACKs (re-armed after each
    /// read, as the kernel clears the flag) release it at once.
    static func acknowledgeAtOnce(_ socket: Int32) {
        var on: Int32 = 1
        _ = setsockopt(socket, Int32(IPPROTO_TCP), TCP_QUICKACK, &on, socklen_t(MemoryLayout<Int32>.size))
    }

    /// Closes the connection after a failure: queries sent on it and not answered go out again on a
    /// new connection (RFC 7766 §6.2.1) — always when it answered others first (servers limit the
    /// queries a connection carries), else up to ``DoTClient/maxAttempts`` connections in all.
    func drop(_ why: String) {
        let progressed = answered > 0
        close()
        for flight in inFlight.values {
            var job = flight.job
            if !progressed { job.failedAttempts += 1 }
            if job.failedAttempts >= DoTClient.maxAttempts {
                client.finish(job.token, .failure(DNSError(.connectFailed, why)))
            } else {
                waiting.append(job)
            }
        }
        inFlight = [:]
        earliestDeadline = nil
    }

    /// A server that breaks the framing cannot be trusted with the rest of the pipeline.
    func fail(_ error: DNSError) {
        close()
        for flight in inFlight.values { client.finish(flight.job.token, .failure(error)) }
        inFlight = [:]
        earliestDeadline = nil
    }

    func close() {
        connection = nil
        output = []
        written = 0
        retryLength = 0
        input = []
    }
}
