import DNSCore

/// A query handed to a ``PipelineClient``: who waits for it, its bytes, and until when.
struct PipelineJob: Sendable {
    var token: UInt64
    var wire: [UInt8]
    var deadline: ContinuousClock.Instant
    /// Connections that closed with this query unanswered and nothing else answered, and times
    /// the server handed it back unprocessed (REFUSED_STREAM, past a GOAWAY's last stream): after
    /// ``PipelineState/maxAttempts`` the query fails.
    var failedAttempts = 0
}

/// What the thread that drives a ``PipelineState`` does for it.
enum PipelineAction: Equatable {
    /// Open a connection; the handshake must be done by `deadline` (the first waiting query's).
    case connect(deadline: ContinuousClock.Instant)
    /// Resume the caller waiting for the token.
    case finish(UInt64, Result<[UInt8], DNSError>)
    /// Close the connection (the state has already forgotten it).
    case close
    /// The server does not speak the framing's protocol: the client says so for a while
    /// (``PipelineClient/noteProtocolRefused(at:)``).
    case protocolRefused
}

/// The decisions of one upstream connection and the queries it carries, as a value: which query goes
/// out when, under which key, what an answer, a close, a silence or a deadline does to each, when to
/// connect and when to close. No I/O and no clock: every input says when it happened, and every
/// decision comes back as bytes to write (``nextWrite``) and ``PipelineAction``s. The thread in
/// ``PipelineClient`` only moves bytes, polls and resumes callers; the tests drive this directly
/// with a scripted server and their own instants (`PipelineStateTests`).
struct PipelineState<Framing: PipelineFraming> {
    typealias Job = PipelineJob
    typealias Action = PipelineAction

    struct Flight {
        var job: Job
        var sentAt: ContinuousClock.Instant
    }

    /// A query goes out on at most this many connections that close without answering anything,
    /// and is handed back unprocessed at most this many times.
    static var maxAttempts: Int { 3 }
    /// An unused connection is closed after this long (servers close theirs after 10–30 s).
    static var idleTimeout: Duration { .seconds(10) }
    /// The most written in one call, so that a write TLS could not take is retried with a length
    /// the output still holds.
    static var writeChunk: Int { 16 * 1024 }
    /// Answers to no query a connection may carry beyond the ones it answered (a server that
    /// answers twice now and then): a server that streams them is cut off, not read forever.
    static var unsolicitedAllowance: Int { 16 }
    /// Bytes a connection may send past its last answer, for each query in flight and one more: a
    /// whole answer (64 KiB) with its framing fits with room to spare, while a server that streams
    /// what answers nothing (PINGs, SETTINGS, padding, answers to no query) is cut off.
    static var bytesPerAnswerAllowance: Int { 128 * 1024 }

    private(set) var isConnected = false
    private(set) var framing: Framing
    /// Taken from the queue, not yet written.
    private(set) var waiting = JobQueue()
    private(set) var inFlight: [UInt32: Flight] = [:]
    private(set) var abandoned = AbandonedKeys()
    /// No query in flight has a deadline before this (nil: none in flight), so that neither the
    /// expiry check nor the poll timeout walks every query on every turn.
    private var earliestDeadline: ContinuousClock.Instant?
    /// Bytes to write; `written` of them are gone. A write TLS could not take is repeated with the
    /// same length (`retryLength`), as OpenSSL requires.
    private(set) var output: [UInt8] = []
    private var written = 0
    private var retryLength = 0
    private var input: [UInt8] = []
    private var events: [PipelineEvent] = []
    /// Queries the server handed back unprocessed in one read, in the order it named them.
    private var handedBack: [Job] = []
    /// When the connection last carried something that ends a query (an answer, a failure, a late
    /// answer, a refusal): bytes that end nothing (PINGs, SETTINGS, half an answer) do not make a
    /// connection live, or a server could hold queries on it with a trickle until their deadlines.
    private var lastProgress: ContinuousClock.Instant
    /// Answers on the current connection: one that closes after answering some has made progress
    /// (servers limit queries per connection), and its unanswered queries go out again freely.
    private var answered = 0
    /// Answers on the current connection under an ID no query has (never sent, or answered already):
    /// past ``unsolicitedAllowance`` more than it answered, the connection is broken.
    private var unsolicited = 0
    /// Bytes read on the current connection since its last answer (or since it opened).
    private var sinceLastAnswer = 0
    private var lastUsed: ContinuousClock.Instant

    init(framing: Framing, now: ContinuousClock.Instant) {
        self.framing = framing
        lastProgress = now
        lastUsed = now
    }

    /// Nothing waits, nothing is in flight, no connection is open: the thread may end.
    var isIdle: Bool { waiting.isEmpty && inFlight.isEmpty && !isConnected }
    /// Queries taken and not finished.
    var underWay: Int { waiting.count + inFlight.count }
    /// Bytes wait to be written.
    var wantsWrite: Bool { written < output.count }

    mutating func enqueue(_ jobs: [Job]) {
        waiting.append(contentsOf: jobs)
    }

    /// Queries put back to wait by a lost connection since the last ``dropWaiting(where:)``.
    private(set) var requeued = false

    /// Drops the waiting queries whose callers are gone (`isGone`: cancelled — another connection or
    /// upstream answered them), so that a replaced connection does not send them again (F60-2).
    mutating func dropWaiting(where isGone: (UInt64) -> Bool) {
        requeued = false
        waiting.removeAll { isGone($0.token) }
    }

    /// The turn's decisions before any I/O: queries whose time is up fail, a drained connection
    /// closes, and a connection is asked for when queries wait and none is open.
    mutating func tick(_ now: ContinuousClock.Instant, _ actions: inout [Action]) {
        expire(now, &actions)
        if isConnected, framing.isDraining || abandoned.isFull, inFlight.isEmpty { close(&actions) }
        if !isConnected, let first = waiting.earliestDeadline { actions.append(.connect(deadline: first)) }
    }

    /// The connection asked for is open, with a new `framing`.
    mutating func connected(_ framing: Framing, _ now: ContinuousClock.Instant) {
        self.framing = framing
        self.framing.start(into: &output)
        isConnected = true
        answered = 0
        unsolicited = 0
        sinceLastAnswer = 0
        lastProgress = now
        lastUsed = now
    }

    /// The connection asked for could not be opened: the waiting queries fail with `error` (the
    /// next query connects again). `refused`: the server showed, inside a verified handshake, that
    /// it does not speak the framing's protocol.
    mutating func connectFailed(_ error: DNSError, refused: Bool = false, _ actions: inout [Action]) {
        if refused { actions.append(.protocolRefused) }
        failWaiting(error, &actions)
    }

    /// Moves waiting queries onto the connection, as far as the framing and the reserved keys let.
    mutating func send(_ now: ContinuousClock.Instant) {
        guard isConnected else { return }
        while inFlight.count < framing.capacity, !abandoned.isFull, let job = waiting.popFirst() {
            let key = framing.send(job.wire, into: &output) { [inFlight, abandoned] in inFlight[$0] != nil || abandoned.contains($0) }
            inFlight[key] = Flight(job: job, sentAt: now)
            earliestDeadline = min(earliestDeadline ?? job.deadline, job.deadline)
            lastUsed = now
        }
    }

    /// The bytes of ``output`` to write next, nil when none wait. After a write that took nothing the
    /// same range comes again (TLS requires the retry to repeat it).
    var nextWrite: Range<Int>? {
        guard isConnected, written < output.count else { return nil }
        let length = retryLength > 0 ? retryLength : min(output.count - written, Self.writeChunk)
        // Output only grows between tries, so a retried range stays inside it.
        precondition(written + length <= output.count, "a retried write past the output")
        return written..<written + length
    }

    /// The connection took `count` bytes of ``nextWrite`` (0: it could take none now).
    mutating func wrote(_ count: Int) {
        guard let range = nextWrite else { return }
        guard count > 0 else {
            retryLength = range.count
            return
        }
        retryLength = 0
        written += min(count, range.count)
        if written == output.count {
            output.removeAll(keepingCapacity: true)
            written = 0
        }
    }

    /// Bytes read from the connection at `now`: each whole answer is delivered. What is read is
    /// handed to the framing read by read, so a server that never stops sending is held to one read
    /// and one frame of buffer.
    mutating func received(_ bytes: UnsafeRawBufferPointer, _ now: ContinuousClock.Instant, _ actions: inout [Action]) {
        guard isConnected else { return }
        input.append(contentsOf: bytes)
        sinceLastAnswer += bytes.count
        if deliver(&actions) { lastProgress = now }
        let allowance = (inFlight.count + 1) * Self.bytesPerAnswerAllowance
        if isConnected, sinceLastAnswer > allowance {
            fail(DNSError(.malformedResponse, "the server sent \(sinceLastAnswer) bytes without an answer"), &actions)
        }
    }

    /// The connection closed or failed (`why`): queries sent on it and not answered go out again on
    /// a new connection (RFC 7766 §6.2.1) — always when it answered others first (servers limit the
    /// queries a connection carries), else up to ``maxAttempts`` connections in all.
    mutating func lost(_ why: String, _ actions: inout [Action]) {
        guard isConnected else { return }
        let progressed = answered > 0
        close(&actions)
        for flight in inFlight.values {
            var job = flight.job
            if !progressed { job.failedAttempts += 1 }
            if job.failedAttempts >= Self.maxAttempts {
                actions.append(.finish(job.token, .failure(DNSError(.connectFailed, why))))
            } else {
                waiting.append(job)
                requeued = true
            }
        }
        inFlight = [:]
        earliestDeadline = nil
    }

    /// Until when the thread may wait for the connection before it must decide again: the first
    /// deadline, or the idle close.
    func wake(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        var wake = lastUsed + Self.idleTimeout
        if let earliestDeadline { wake = min(wake, earliestDeadline) }
        if let first = waiting.earliestDeadline { wake = min(wake, first) }
        return max(now, wake)
    }

    /// Closes a connection nothing has used for ``idleTimeout``.
    mutating func closeIfIdle(_ now: ContinuousClock.Instant, _ actions: inout [Action]) {
        if isConnected, inFlight.isEmpty, waiting.isEmpty, now - lastUsed >= Self.idleTimeout { close(&actions) }
    }

    /// Fails the queries whose time is up. One that got nothing back while the connection stayed
    /// silent marks the connection as dead: it is closed, and the others are sent again.
    private mutating func expire(_ now: ContinuousClock.Instant, _ actions: inout [Action]) {
        waiting.removeAll { job in
            guard job.deadline <= now else { return false }
            actions.append(.finish(job.token, .failure(DNSError(.timeout, "no connection within the time left"))))
            return true
        }
        guard let earliest = earliestDeadline, earliest <= now else { return }
        var silent = false
        var next: ContinuousClock.Instant?
        for (key, flight) in inFlight {
            guard flight.job.deadline <= now else {
                next = min(next ?? flight.job.deadline, flight.job.deadline)
                continue
            }
            inFlight[key] = nil
            framing.abandon(key, into: &output)
            if Framing.rewritesIDs { abandoned.insert(key) }
            // Nothing ended since it went out (an answer at the very instant counts as before it).
            if lastProgress <= flight.sentAt { silent = true }
            actions.append(.finish(flight.job.token, .failure(DNSError(.timeout, "no answer in time"))))
        }
        earliestDeadline = next
        if silent { lost("the connection went silent", &actions) }
    }

    private mutating func failWaiting(_ failure: DNSError, _ actions: inout [Action]) {
        for job in waiting.takeAll() { actions.append(.finish(job.token, .failure(failure))) }
    }

    /// Hands the buffered bytes to the framing and acts on what they carried; whether they ended
    /// some query (an event; a query handed back unprocessed ends nothing).
    private mutating func deliver(_ actions: inout [Action]) -> Bool {
        framing.receive(&input, into: &output, events: &events)
        let progressed = events.contains { if case .unprocessed = $0 { false } else { true } }
        delivering: for event in events {
            switch event {
            case .answer(let key, var message):
                // A key nobody waits for is a late answer to a query that timed out: dropped, and
                // the key is free again. Under a key never reserved it answers nothing asked: a few
                // are forgiven, a stream of them breaks the connection.
                guard let flight = inFlight.removeValue(forKey: key) else {
                    if Framing.rewritesIDs, !abandoned.contains(key) {
                        unsolicited += 1
                        if unsolicited > answered + Self.unsolicitedAllowance {
                            fail(DNSError(.malformedResponse, "the server sent \(unsolicited) answers to no query"), &actions)
                            break delivering
                        }
                    }
                    // A late answer was asked for: it counts as one for the byte allowance.
                    if abandoned.remove(key) { sinceLastAnswer = 0 }
                    continue
                }
                answered += 1
                sinceLastAnswer = 0
                guard WireQuestion.echoes(message, questionOf: flight.job.wire) else {
                    let error = DNSError(.mismatchedResponse, "the response does not answer the question asked")
                    actions.append(.finish(flight.job.token, .failure(error)))
                    continue
                }
                if Framing.rewritesIDs {
                    message[0] = flight.job.wire[0]
                    message[1] = flight.job.wire[1]
                }
                actions.append(.finish(flight.job.token, .success(message)))
            case .failed(let key, let error):
                guard let flight = inFlight.removeValue(forKey: key) else { continue }
                answered += 1
                sinceLastAnswer = 0
                actions.append(.finish(flight.job.token, .failure(error)))
            case .late:
                sinceLastAnswer = 0
            case .unprocessed(let key):
                // Sent again, first in line (a server that caps requests per connection hands back
                // what came past its cap with GOAWAY: behind newer queries it would land past the
                // cap again). A connection that has answered nothing yet counts as a failed attempt,
                // as in `lost`: a server that refuses every stream, or GOAWAYs every connection
                // before its first answer, is not asked again in a loop until the deadline (red
                // team W2: 27,000 requests in 3 s).
                guard var job = inFlight.removeValue(forKey: key)?.job else { continue }
                if answered == 0 { job.failedAttempts += 1 }
                if job.failedAttempts >= Self.maxAttempts {
                    let error = DNSError(
                        .connectFailed,
                        "the server did not process the query (REFUSED_STREAM or GOAWAY) on \(job.failedAttempts) connections that answered nothing")
                    actions.append(.finish(job.token, .failure(error)))
                } else {
                    handedBack.append(job)
                }
            case .broken(let error):
                fail(error, &actions)
            case .refused(let error):
                actions.append(.protocolRefused)
                fail(error, &actions)
                for job in handedBack { actions.append(.finish(job.token, .failure(error))) }
                handedBack.removeAll(keepingCapacity: true)
                failWaiting(error, &actions)
            }
        }
        events.removeAll(keepingCapacity: true)
        if !handedBack.isEmpty {
            waiting.prepend(contentsOf: handedBack)
            handedBack.removeAll(keepingCapacity: true)
        }
        if inFlight.isEmpty { earliestDeadline = nil }
        return progressed
    }

    /// A server that breaks the framing cannot be trusted with the rest of the pipeline.
    private mutating func fail(_ error: DNSError, _ actions: inout [Action]) {
        guard isConnected else { return }
        close(&actions)
        for flight in inFlight.values { actions.append(.finish(flight.job.token, .failure(error))) }
        inFlight = [:]
        earliestDeadline = nil
    }

    private mutating func close(_ actions: inout [Action]) {
        isConnected = false
        abandoned = AbandonedKeys()
        output = []
        written = 0
        retryLength = 0
        input = []
        actions.append(.close)
    }
}

/// The queries waiting for a connection, in the order they go out: taken from the front in
/// constant time (a burst of thousands is not quadratic), retries appended at the back.
struct JobQueue: Sequence {
    private var jobs: [PipelineJob] = []
    private var head = 0

    var isEmpty: Bool { head == jobs.count }
    var count: Int { jobs.count - head }
    /// The first deadline among them (a walk: called once a turn, and only while queries wait).
    var earliestDeadline: ContinuousClock.Instant? {
        var first: ContinuousClock.Instant?
        for job in self { first = Swift.min(first ?? job.deadline, job.deadline) }
        return first
    }

    mutating func append(_ job: PipelineJob) { jobs.append(job) }
    mutating func append(contentsOf more: [PipelineJob]) { jobs += more }

    /// Puts `more` at the front, in their order (into the taken front's room when it has enough).
    mutating func prepend(contentsOf more: [PipelineJob]) {
        if head >= more.count {
            head -= more.count
            jobs.replaceSubrange(head..<head + more.count, with: more)
        } else {
            jobs.replaceSubrange(0..<head, with: more)
            head = 0
        }
    }

    mutating func popFirst() -> PipelineJob? {
        guard head < jobs.count else { return nil }
        let job = jobs[head]
        head += 1
        // The taken front is dropped once it is most of the storage: amortised constant time.
        if head == jobs.count {
            jobs.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64, head * 2 >= jobs.count {
            jobs.removeFirst(head)
            head = 0
        }
        return job
    }

    mutating func removeAll(where shouldRemove: (PipelineJob) -> Bool) {
        jobs.removeFirst(head)
        head = 0
        jobs.removeAll(where: shouldRemove)
    }

    mutating func takeAll() -> ArraySlice<PipelineJob> {
        defer {
            jobs = []
            head = 0
        }
        return jobs[head...]
    }

    func makeIterator() -> ArraySlice<PipelineJob>.Iterator { jobs[head...].makeIterator() }
}
