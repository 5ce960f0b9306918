import Logging
import Synchronization

/// How the pool picks upstreams for a question.
public enum UpstreamStrategy: String, Sendable, Hashable, CaseIterable {
    /// In configured order, failing over to the next (the default).
    case ordered
    /// Lowest decayed round-trip time first; failures are penalised; every 16th query puts the
    /// least recently used upstream first, so a recovered one is noticed.
    case fastest
    /// The best two (by decayed RTT) in parallel; the first valid answer wins and the slower one is
    /// charged the time the winner took.
    case race
}

/// What an upstream answered, for each kind of exchange the pool's attempt loop carries.
///
/// A request and a reply of concrete types rather than a generic loop over an exchange closure:
/// every frame on a suspended lookup's path stays on its task until the answer comes, and the
/// closure's call frame, its context and the unspecialised generic frames grew each of 1,024
/// stalled lookups by ~4 KB in a debug build (the adversarial burst test: 55.4 → 59.4 MB; 55.5
/// again with these types).
package enum PoolReply: Sendable {
    /// An address lookup's answer.
    case answer(UpstreamAnswer)
    /// A whole response message (forwarding), checked to answer its question.
    case message([UInt8])
}

/// What one turn of the pool's attempt loop gives: the reply an upstream gave, or every upstream's
/// failure.
package struct PoolOutcome: Sendable {
    package var reply: PoolReply?
    package var upstream: (any DNSUpstream)?
    package var failures: [DNSError.Attempt]

    package init(reply: PoolReply? = nil, upstream: (any DNSUpstream)? = nil, failures: [DNSError.Attempt]) {
        self.reply = reply
        self.upstream = upstream
        self.failures = failures
    }

    /// The address lookup's answer, if that is what came.
    package var answer: UpstreamAnswer? {
        if case .answer(let answer) = reply { return answer }
        return nil
    }

    /// The forwarded response, if that is what came.
    package var message: [UInt8]? {
        if case .message(let message) = reply { return message }
        return nil
    }
}

/// What the pool's attempt loop asks each upstream: an address lookup, or a whole message
/// (forwarding: the types the engine does not answer, HTTPS/SVCB lookups, DNSSEC chain fetches),
/// which only the upstreams that carry messages are asked.
package enum PoolRequest: Sendable {
    case lookup(DNSMessage.Question)
    /// `wire` (ID 0) asks `question`; the response must decode, be a response with ID 0 and echo
    /// the question (``ResolverEngine/check(_:answers:)``), else it is that upstream's failure.
    case message([UInt8], DNSMessage.Question)

    package var question: DNSMessage.Question {
        switch self {
        case .lookup(let question), .message(_, let question): question
        }
    }

    /// Whether `upstream` can be asked this.
    func accepts(_ upstream: any DNSUpstream) -> Bool {
        if case .message = self { return upstream is any MessageExchanging }
        return true
    }
}

/// How many queries an upstream's second connection may take (gRPC's hedging throttle): each
/// answer its first connection gives within the hedge delay earns a quarter of one, each query on
/// the second spends one, and at most twenty are saved up. Earned by answers in time, not by
/// lookups: a server that is late because it is busy earns nothing while it is, so a burst at its
/// capacity costs it twenty copies at most, not a quarter of the burst (F60-6).
package struct HedgeBudget: Sendable {
    package static let burst = 20.0
    package static let earnedPerAnswer = 0.25
    package private(set) var tokens = HedgeBudget.burst

    package init() {}

    package mutating func earn() { tokens = min(Self.burst, tokens + Self.earnedPerAnswer) }

    /// Gives back a query held and not spent.
    package mutating func refund() { tokens = min(Self.burst, tokens + 1) }

    /// Spends one query when there is one.
    package mutating func take() -> Bool {
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}

/// Trusted upstreams with a selection strategy and a circuit breaker per upstream.
///
/// An upstream that fails `failureThreshold` times in a row has its circuit opened: it goes last
/// in every order, asked by a lookup only when every other upstream has failed it. Health is then
/// learned off the users' path (dnsdist's health checks): once a backoff has passed — `baseBackoff`,
/// doubling after each failed probe up to `maxBackoff` — the next order spawns one probe (the
/// `probe` question, on the spawner) and only its answer closes the circuit. Before, the first
/// lookup after the backoff was the trial, and it waited the dead upstream's share of the budget.
package final class UpstreamPool: Sendable {
    package struct Health: Sendable {
        package var rtt: Double? = nil
        /// The smoothed round-trip time of answered exchanges only, and its mean deviation
        /// (RFC 6298's SRTT and RTTVAR), in seconds: what the hedge delay is made of. A failure's
        /// time is not a round trip (a timeout would pin the delay at its bound; Karn's rule).
        package var answeredRTT: Double? = nil
        package var rttDeviation: Double = 0
        package var consecutiveFailures = 0
        /// When the next probe of an open circuit is due; nil while closed.
        package var openUntil: ResolverInstant? = nil
        /// The wait before the next probe; zero while the circuit is closed.
        package var backoff: Duration = .zero
        /// A probe of this upstream is in flight.
        package var probing = false
        /// The backoff in force when a probe last closed the circuit; zero once a lookup has been
        /// answered since. A circuit that opens again before then waits twice as long: an upstream
        /// that answers the probe and nothing else cannot come back every second (F48-2).
        package var probationBackoff: Duration = .zero
        /// Whether the circuit is open: tried last, and closed only by an answer.
        package var isOpen: Bool { backoff != .zero }
        package var lastUsed: ResolverInstant? = nil
        /// When the upstream last answered at the DNS level: an answer, NXDOMAIN, NODATA, or an
        /// RCODE such as SERVFAIL or REFUSED (it is reachable and speaking DNS).
        package var lastResponse: ResolverInstant? = nil
        /// When an exchange with it last failed below DNS: refused, timed out, TLS, HTTP, garbage.
        package var lastTransportFailure: ResolverInstant? = nil

        /// Queries its second connection may still take.
        package var secondConnectionBudget = HedgeBudget()
        /// Until when its second connection is not asked, after it failed other than by a timeout
        /// (refused, reset, TLS): one failed lookup there costs up to three handshakes (F60-3).
        package var secondConnectionRestsUntil: ResolverInstant? = nil

        /// Reachable: it responded within `window` of `now`, and nothing failed since.
        package func isReachable(now: ResolverInstant, window: Duration) -> Bool {
            guard let lastResponse, now - lastResponse <= window else { return false }
            return lastTransportFailure.map { $0 < lastResponse } ?? true
        }

        /// The last exchange of any outcome.
        package var lastExchange: ResolverInstant? {
            switch (lastResponse, lastTransportFailure) {
            case let (response?, failure?): max(response, failure)
            case let (response, failure): response ?? failure
            }
        }
    }

    package let upstreams: [any DNSUpstream]
    /// Each upstream's second connection (``SecondConnectionUpstream``), where it has one.
    private let secondConnections: [(any DNSUpstream)?]
    private let strategy: UpstreamStrategy
    private let clock: any ResolverClock
    private let failureThreshold: Int
    private let baseBackoff: Duration
    private let maxBackoff: Duration
    private let health: Mutex<[Health]>
    private let queries = Atomic<Int>(0)
    private let metrics: ResolverMetrics
    private let logger: Logger
    /// What a probe of an open circuit asks, within `probeTimeout`; where probes run.
    private let probe: DNSMessage.Question
    private let probeTimeout: Duration
    private let spawner: any TaskSpawner
    /// Whether a lookup asks the next upstream too when one has not answered within its hedge delay.
    private let hedging: Bool
    /// Where hedged lookups' delays wait.
    private let hedgeTimer: HedgeTimer

    package init(
        _ upstreams: [any DNSUpstream], strategy: UpstreamStrategy = .ordered, clock: any ResolverClock,
        failureThreshold: Int = 3, baseBackoff: Duration = .seconds(1), maxBackoff: Duration = .seconds(60),
        probe: DNSMessage.Question = DNSMessage.Question(name: .root, type: .ns), probeTimeout: Duration = .seconds(3),
        spawner: any TaskSpawner = UnstructuredTasks(), hedging: Bool = true, metrics: ResolverMetrics? = nil, logger: Logger = .silent
    ) {
        self.hedging = hedging
        hedgeTimer = HedgeTimer(clock: clock)
        self.probe = probe
        self.probeTimeout = probeTimeout
        self.spawner = spawner
        self.upstreams = upstreams
        // Made only where they can be asked (F60-4: each is a thread and a connection).
        secondConnections = upstreams.map { hedging ? ($0 as? any SecondConnectionUpstream)?.makeSecondConnection() : nil }
        self.metrics = metrics ?? ResolverMetrics(factory: nil, upstreams: upstreams.map(\.identifier))
        self.logger = logger
        self.strategy = strategy
        self.clock = clock
        self.failureThreshold = failureThreshold
        self.baseBackoff = baseBackoff
        self.maxBackoff = maxBackoff
        health = Mutex(Array(repeating: Health(), count: upstreams.count))
    }

    /// A copy of each upstream's health, in configured order.
    package var healthSnapshot: [Health] { health.withLock { $0 } }

    /// Whether upstream `index`'s circuit is open (tried last until a probe closes it).
    package func isOpen(_ index: Int) -> Bool {
        health.withLock { $0[index].isOpen }
    }

    /// The order in which upstreams are tried now; starts the probes that are due.
    package func order() -> [Int] {
        let now = clock.now
        let count = queries.add(1, ordering: .relaxed).newValue
        let (snapshot, due) = health.withLock { all in (all, Self.claimDueProbes(&all, now: now)) }
        for index in due { startProbe(index) }
        var indices = Array(upstreams.indices)
        switch strategy {
        case .ordered:
            break
        case .fastest, .race:
            // Unmeasured upstreams sort first so each gets measured; failures weigh as 1 s each.
            func score(_ index: Int) -> Double {
                guard let rtt = snapshot[index].rtt else { return -1 }
                return rtt + Double(snapshot[index].consecutiveFailures)
            }
            indices.sort { (score($0), $0) < (score($1), $1) }
            if count % 16 == 0, indices.count > 1,
                let stalest = indices.min(by: { (snapshot[$0].lastUsed ?? now) < (snapshot[$1].lastUsed ?? now) }),
                stalest != indices[0]
            {
                indices.removeAll { $0 == stalest }
                indices.insert(stalest, at: 0)
            }
        }
        // Open circuits go last, the one whose probe is due soonest first: tried only when every
        // closed one has failed. (No copies when none is open: this runs once per query.)
        func isOpen(_ index: Int) -> Bool { snapshot[index].isOpen }
        guard indices.contains(where: isOpen) else { return indices }
        let open = indices.filter(isOpen).sorted { (snapshot[$0].openUntil ?? now, $0) < (snapshot[$1].openUntil ?? now, $1) }
        return indices.filter { !isOpen($0) } + open
    }

    /// The open circuits whose probe is due at `now` and not yet running, marked as probing.
    private static func claimDueProbes(_ all: inout [Health], now: ResolverInstant) -> [Int] {
        var due: [Int] = []
        for index in all.indices where all[index].isOpen && !all[index].probing && (all[index].openUntil.map { $0 <= now } ?? true) {
            all[index].probing = true
            due.append(index)
        }
        return due
    }

    /// Starts the probes that are due now: what keeps an open circuit's probes going while no
    /// lookup reaches the pool (the daemon's readiness loop calls it).
    package func probeDue() {
        let now = clock.now
        for index in health.withLock({ Self.claimDueProbes(&$0, now: now) }) { startProbe(index) }
    }

    /// Asks upstream `index` the probe question on the spawner; its outcome opens or closes the
    /// circuit as any exchange's does (a failure doubles the backoff).
    private func startProbe(_ index: Int) {
        metrics.recordProbe(upstream: upstreams[index].identifier)
        spawner.spawn { [self] in
            _ = await ask(index, .lookup(probe), timeout: probeTimeout, probing: true)
            health.withLock { $0[index].probing = false }
        }
    }

    /// Asks the upstreams until one answers or the clock's `deadline` passes. NXDOMAIN and NODATA
    /// are answers and end the search.
    package func query(_ question: DNSMessage.Question, deadline: ResolverInstant) async -> PoolOutcome {
        await attempt(.lookup(question), deadline: deadline)
    }

    /// The attempt loop every upstream exchange goes through — address lookups, forwarded messages,
    /// HTTPS/SVCB lookups and DNSSEC chain fetches alike: the strategy's order with open circuits
    /// last, each upstream's share of what is left of the budget, hedging, and every exchange's
    /// outcome recorded (RTT, circuit, reachability, metrics). A message is sent only to the
    /// upstreams that carry messages. An exchange that throws is that upstream's failure and moves
    /// on to the next one.
    package func attempt(_ request: PoolRequest, deadline: ResolverInstant) async -> PoolOutcome {
        var failures: [DNSError.Attempt] = []
        var order = self.order()
        if case .message = request { order.removeAll { !request.accepts(upstreams[$0]) } }
        let first = order.first.map { upstreams[$0] }
        if strategy == .race, order.count >= 2 {
            let pair = Array(order.prefix(2))
            order.removeFirst(2)
            let share = (deadline - clock.now) * 2 / (order.count + 2)
            if let outcome = await race(request, pair, timeout: share, failures: &failures) { return outcome }
        }
        // One upstream hedges only to its second connection: the lookup holds a query of its budget
        // while it runs (given back unless spent), so at most twenty lookups at a time pay for the
        // hedged path's task group and timer — a burst of 1,024 stalled lookups grew the daemon by
        // 7 MB more than without (the adversarial suite's bound).
        let reserved = order.count == 1 && reserveSecondConnection(order[0]) ? order[0] : nil
        guard hedging, order.count >= 2 || reserved != nil else {
            for (position, index) in order.enumerated() {
                let remaining = deadline - clock.now
                guard remaining > .milliseconds(1), !Task.isCancelled else { break }
                // The remaining budget shared among the upstreams still to try: a blackholed first
                // upstream cannot starve the others.
                let share = remaining / (order.count - position)
                let delay = secondConnections[index] == nil ? nil : hedgeDelay(index)
                let started = clock.now
                switch await ask(index, request, timeout: share) {
                case let .success(value):
                    if let delay, clock.now - started < delay { earnSecondConnection(index) }
                    return PoolOutcome(reply: value, upstream: upstreams[index], failures: failures)
                case let .failure(error):
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                    if error.code == .cancelled { return PoolOutcome(failures: failures) }
                }
            }
            return Self.exhausted(failures, first: first)
        }
        return await hedged(request, order, deadline: deadline, failures: failures, first: first, reserved: reserved)
    }

    private static func exhausted(_ failures: [DNSError.Attempt], first: (any DNSUpstream)?) -> PoolOutcome {
        var failures = failures
        if failures.isEmpty, let first {
            failures.append(.init(upstream: first.identifier, code: .timeout, message: "the time budget ran out"))
        }
        return PoolOutcome(failures: failures)
    }

    private enum HedgeEvent: Sendable {
        /// The attempt started `position`-th ended.
        case finished(position: Int, Result<PoolReply, DNSError>)
        /// The hedge delay of the attempt started `position`-th ran out.
        case timer(position: Int)
    }

    /// Where a hedged lookup's attempts and its timer entries report to, and the lookup waits: a
    /// queue with one waiter. (A task group's `next()` would need the timer to be a child task
    /// that sleeps: see ``HedgeTimer``.) Events after the lookup ended are dropped.
    private final class HedgeEvents: Sendable {
        private struct State {
            var queued: [HedgeEvent] = []
            var waiter: CheckedContinuation<HedgeEvent, Never>?
            var ended = false
        }

        private let state = Mutex(State())

        func post(_ event: HedgeEvent) {
            let waiter = state.withLock { state -> CheckedContinuation<HedgeEvent, Never>? in
                guard !state.ended else { return nil }
                guard let waiter = state.waiter else {
                    state.queued.append(event)
                    return nil
                }
                state.waiter = nil
                return waiter
            }
            waiter?.resume(returning: event)
        }

        func next() async -> HedgeEvent {
            await withCheckedContinuation { (continuation: CheckedContinuation<HedgeEvent, Never>) in
                let ready = state.withLock { state -> HedgeEvent? in
                    guard state.queued.isEmpty else { return state.queued.removeFirst() }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
        }

        func end() { state.withLock { $0.ended = true } }
    }

    /// The upstreams in `order`, each one started when the one before it has failed or has not
    /// answered within its hedge delay (``hedgeDelay(_:)``); the first answer wins. An attempt still
    /// running when another upstream answered counts as a failed one (it did not answer in time):
    /// three in a row open its circuit like any other failures, so a blackholed upstream costs its
    /// hedge delay three times, not its share of the budget on every lookup.
    ///
    /// Attempts are child tasks (cancelled with the lookup); hedge delays are entries in the pool's
    /// one ``HedgeTimer``, cancelled when the lookup ends. The lookup waits only while an attempt
    /// runs, and every attempt reports once, even when cancelled: it cannot wait forever.
    private func hedged(
        _ request: PoolRequest, _ order: [Int], deadline: ResolverInstant, failures: [DNSError.Attempt],
        first: (any DNSUpstream)?, reserved: Int? = nil
    ) async -> PoolOutcome {
        var failures = failures
        let events = HedgeEvents()
        var timers: [HedgeTimer.Entry] = []
        var reservation = reserved
        defer {
            events.end()
            for entry in timers { hedgeTimer.cancel(entry) }
            if let reservation { refundSecondConnection(reservation) }
        }
        return await withDiscardingTaskGroup { group in
            var started: [(index: Int, at: ResolverInstant, late: Bool, secondConnection: Bool)] = []
            var asked = 0  // upstreams of `order` started
            var running = 0
            func startNext() {
                let remaining = deadline - clock.now
                guard order.count > asked, remaining > .milliseconds(1), !Task.isCancelled else { return }
                let index = order[asked]
                let share = remaining / (order.count - asked)
                asked += 1
                let position = started.count
                started.append((index, clock.now, false, false))
                running += 1
                group.addTask { events.post(.finished(position: position, await self.ask(index, request, timeout: share))) }
                let delay = hedgeDelay(index)
                // An open circuit is asked only when every closed one has failed, never as a hedge
                // (R4 of the live red team: an open upstream was hedged to on 1,857 of 3,000 misses).
                if delay < share, hedgesToNext || hedgesToSecondConnection(of: index) {
                    timers.append(hedgeTimer.schedule(at: clock.now + delay) { events.post(.timer(position: position)) })
                }
            }
            /// A closed upstream is left to hedge to.
            var hedgesToNext: Bool { asked < order.count && !isOpen(order[asked]) }
            /// No closed upstream is left to hedge to (none, or only open circuits): the same
            /// server again, on its second connection — unless its hedge delay is at its 1 s bound:
            /// answers that take that long are a slow or busy server's, which a second copy of each
            /// query would only load more (F60-1), not a connection stalled by a lost segment.
            func hedgesToSecondConnection(of index: Int) -> Bool {
                !hedgesToNext && mayAskSecondConnection(index)
            }
            /// The last upstream is late and there is none left: the same server again, on its second
            /// connection, with what is left of the time — when its budget has a query left and the
            /// second connection is not resting.
            func startSecondConnection(after late: Int) {
                let index = started[late].index
                let remaining = deadline - clock.now
                guard remaining > .milliseconds(1), !Task.isCancelled else { return }
                if reservation == index {
                    reservation = nil  // spent
                } else if !takeSecondConnectionToken(index) {
                    return
                }
                metrics.recordSecondConnectionQuery(upstream: upstreams[index].identifier)
                let position = started.count
                started.append((index, clock.now, false, true))
                running += 1
                group.addTask {
                    events.post(.finished(position: position, await self.ask(index, request, timeout: remaining, secondConnection: true)))
                }
            }
            startNext()
            while running > 0 {
                switch await events.next() {
                case let .finished(position, .success(value)):
                    group.cancelAll()
                    let index = started[position].index
                    // An answer on the first connection within its hedge delay earns the second's budget.
                    if !started[position].late, !started[position].secondConnection, secondConnections[index] != nil {
                        earnSecondConnection(index)
                    }
                    let now = clock.now
                    // Only an attempt whose own hedge delay had passed was outrun; one started
                    // later is cancelled uncharged (a late answer from the first must not cost the
                    // second its circuit, F48-3). The same server answering on its second connection
                    // outran nobody: the lateness was the first connection's (a lost segment).
                    for attempt in started
                    where attempt.index != index && attempt.late
                        && !failures.contains(where: { $0.upstream == upstreams[attempt.index].identifier })
                    {
                        let elapsed = now - attempt.at
                        hedgedAway(attempt.index, after: elapsed, question: request.question)
                        failures.append(
                            .init(
                                upstream: upstreams[attempt.index].identifier, code: .timeout,
                                message: "no answer in \(Int(Self.seconds(elapsed) * 1000)) ms, when \(upstreams[index].identifier) answered (hedged)"
                            ))
                    }
                    return PoolOutcome(reply: value, upstream: upstreams[index], failures: failures)
                case let .finished(position, .failure(error)):
                    running -= 1
                    let index = started[position].index
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                    if error.code == .cancelled {
                        group.cancelAll()
                        return PoolOutcome(failures: failures)
                    }
                    // A failure starts the next at once, whatever else is still running (F48-6).
                    if running < 2 { startNext() }
                case let .timer(position):
                    guard position < started.count else { continue }
                    started[position].late = true
                    // The newest attempt's delay ran out and it is still running: ask the next
                    // too — at most two at a time (F48-4); a third waits for one of them to fail.
                    guard position == started.count - 1, running == 1, !started[position].secondConnection else { continue }
                    if hedgesToNext {
                        startNext()
                    } else if hedgesToSecondConnection(of: started[position].index) {
                        startSecondConnection(after: position)
                    }
                }
            }
            return Self.exhausted(failures, first: first)
        }
    }

    /// How long a second connection that failed rests.
    package static let secondConnectionRest = Duration.seconds(10)

    /// Holds a query of upstream `index`'s second-connection budget for a lookup, when it has one,
    /// the second connection is not resting and the hedge delay is under its bound.
    private func reserveSecondConnection(_ index: Int) -> Bool {
        guard hedging, mayAskSecondConnection(index) else { return false }
        return takeSecondConnectionToken(index)
    }

    /// Upstream `index` has a second connection, its circuit is closed, and its hedge delay is under
    /// its bound (at the bound it is a slow or busy server, not a stalled connection: F60-1).
    private func mayAskSecondConnection(_ index: Int) -> Bool {
        secondConnections[index] != nil && !isOpen(index) && hedgeDelay(index) < Self.maxHedgeDelay
    }

    private func refundSecondConnection(_ index: Int) {
        health.withLock { $0[index].secondConnectionBudget.refund() }
    }

    private func earnSecondConnection(_ index: Int) {
        health.withLock { $0[index].secondConnectionBudget.earn() }
    }

    /// Takes a query of upstream `index`'s second-connection budget, unless there is none or the
    /// second connection rests.
    private func takeSecondConnectionToken(_ index: Int) -> Bool {
        let now = clock.now
        return health.withLock { all in
            if let until = all[index].secondConnectionRestsUntil, now < until { return false }
            return all[index].secondConnectionBudget.take()
        }
    }

    /// How long an attempt at upstream `index` may go unanswered before the next upstream is asked
    /// too: the smoothed RTT of its answers plus four mean deviations (RFC 6298's retransmission
    /// timer, a high quantile of its recent latency), at least 50 ms (unbound's
    /// `infra-cache-min-rtt`) and at most 1 s; 200 ms for an upstream that has not answered yet.
    package func hedgeDelay(_ index: Int) -> Duration {
        let (rtt, deviation) = health.withLock { ($0[index].answeredRTT, $0[index].rttDeviation) }
        guard let rtt else { return Self.unmeasuredHedgeDelay }
        let seconds = min(max(rtt + 4 * deviation, 0.05), Self.seconds(Self.maxHedgeDelay))
        return .nanoseconds(Int64(seconds * 1e9))
    }

    /// The hedge delay's upper bound.
    static let maxHedgeDelay = Duration.seconds(1)

    static let unmeasuredHedgeDelay = Duration.milliseconds(200)

    /// An attempt that had not answered when another upstream did: a failed exchange for its
    /// circuit and its RTT (it took at least this long), never an error the caller sees.
    private func hedgedAway(_ index: Int, after elapsed: Duration, question: DNSMessage.Question) {
        let upstream = upstreams[index].identifier
        metrics.recordExchange(upstream: upstream, duration: elapsed, failure: .timeout)
        logger.debug(
            "upstream outrun by a hedged query",
            metadata: [
                "upstream": "\(upstream)", "name": "\(question.name)", "type": "\(question.type)", "after_seconds": "\(Self.seconds(elapsed))",
            ])
        record(index, rtt: Self.seconds(elapsed), success: false)
    }

    private func race(
        _ request: PoolRequest, _ pair: [Int], timeout: Duration,
        failures: inout [DNSError.Attempt]
    ) async -> PoolOutcome? {
        let start = clock.now
        return await withTaskGroup(of: (Int, Result<PoolReply, DNSError>).self) { group in
            for index in pair {
                group.addTask { (index, await self.ask(index, request, timeout: timeout)) }
            }
            for await (index, result) in group {
                switch result {
                case let .success(value):
                    group.cancelAll()
                    // The loser is charged the winner's time, so it does not look faster than it is.
                    let elapsed = Self.seconds(clock.now - start)
                    for loser in pair where loser != index { record(loser, rtt: elapsed, success: nil) }
                    return PoolOutcome(reply: value, upstream: upstreams[index], failures: failures)
                case let .failure(error):
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                }
            }
            return nil
        }
    }

    /// One exchange with upstream `index`, its outcome recorded: metrics, RTT, circuit, reachability.
    /// On its second connection (`secondConnection`) a failure is not charged to the upstream's circuit
    /// or reachability: the attempt on its first connection, still running, is charged by its own end.
    private func ask(
        _ index: Int, _ request: PoolRequest, timeout: Duration, probing: Bool = false, secondConnection: Bool = false
    ) async -> Result<PoolReply, DNSError> {
        let start = clock.now
        let upstream = upstreams[index].identifier
        let question = request.question
        let asked = secondConnection ? secondConnections[index] ?? upstreams[index] : upstreams[index]
        do throws(DNSError) {
            let value: PoolReply
            switch request {
            case .lookup(let question):
                value = .answer(try await asked.lookup(question, timeout: timeout))
            case .message(let wire, let question):
                guard let exchanging = asked as? any MessageExchanging else {
                    throw DNSError(.invalidConfiguration, "\(upstream) does not carry DNS messages")
                }
                let response = try await exchanging.exchange(wire, timeout: timeout)
                try ResolverEngine.check(response, answers: question)
                value = .message(response)
            }
            let elapsed = clock.now - start
            metrics.recordExchange(upstream: upstream, duration: elapsed, failure: nil)
            record(index, rtt: Self.seconds(elapsed), success: true, probe: probing)
            noteReachability(index, responded: true)
            return .success(value)
        } catch {
            guard error.code != .cancelled else { return .failure(error) }
            let elapsed = clock.now - start
            metrics.recordExchange(upstream: upstream, duration: elapsed, failure: error.code)
            logger.debug(
                "upstream query failed",
                metadata: [
                    "upstream": "\(upstream)", "name": "\(question.name)", "type": "\(question.type)",
                    "code": "\(error.code.rawValue)", "error": "\(error.message)",
                ])
            if secondConnection {
                if error.code != .timeout {
                    health.withLock { $0[index].secondConnectionRestsUntil = clock.now + Self.secondConnectionRest }
                }
                return .failure(error)
            }
            if case .message = request, Self.followsFromTheMessage(error) {
                // A relayed message is the client's: what it holds can make a healthy upstream
                // refuse it — a GET URL too long for its HTTP server (414, 431), an option it
                // rejects with a FORMERR that echoes no question, an AXFR a plain DNS server
                // refuses. That says nothing of the upstream's health either way: not charged to
                // its circuit, or one crafted query would open every circuit and turn readiness
                // off (F48-9); and no response for readiness either, or an upstream answering
                // every request 503 would look reachable (R1 of the live red team).
                record(index, rtt: Self.seconds(elapsed), success: nil)
            } else {
                record(index, rtt: Self.seconds(elapsed), success: false, probe: probing)
                noteReachability(index, responded: error.code == .serverFailure || error.code == .refused)
            }
            return .failure(error)
        }
    }

    /// Whether a relayed message's failure is one the message itself can cause.
    private static func followsFromTheMessage(_ error: DNSError) -> Bool {
        switch error.code {
        case .malformedResponse, .mismatchedResponse, .responseTooLarge:
            return true
        case .httpStatus:
            // What an HTTP server answers a request it will not take as sent: bad request, content
            // too large, URI too long, unsupported media type, header fields too large. A 5xx or a
            // 429 is the server unwell or busy, and charged as any failure; so is a wrong content
            // type (a captive portal's page).
            return [400, 413, 414, 415, 431].contains(error.httpStatus)
        case .serverFailure, .refused:
            // Only plain DNS (c-ares) reports a relayed message's RCODE as an error — over DoH and
            // DoT the response is relayed as it came: SERVFAIL, REFUSED or NOTIMP for one message
            // is that server's word on the message (R3). (c-ares also says REFUSED for a closed
            // port: address lookups and probes, which are charged, find that one out.)
            return true
        default:
            return false
        }
    }

    private func noteReachability(_ index: Int, responded: Bool) {
        let now = clock.now
        health.withLock { all in
            if responded { all[index].lastResponse = now } else { all[index].lastTransportFailure = now }
        }
    }

    /// Asks every upstream that has had no exchange for `idle` the question `probe`, at once, each
    /// within `timeout`; the outcomes update health as any query does. What keeps readiness true to
    /// the upstreams while every answer comes from the cache.
    package func probeIdle(_ probe: DNSMessage.Question, idle: Duration, timeout: Duration) async {
        probeDue()
        let now = clock.now
        // Open circuits are left to their own probes (``probeDue()``): one at a time, on their backoff.
        let due = health.withLock { all in
            all.indices.filter { index in !all[index].isOpen && (all[index].lastExchange.map { now - $0 >= idle } ?? true) }
        }
        await withTaskGroup(of: Void.self) { group in
            for index in due {
                group.addTask { _ = await self.ask(index, .lookup(probe), timeout: timeout, probing: true) }
            }
        }
    }

    /// Updates the decayed RTT (EWMA, weight 0.3 for the new sample) and the circuit breaker.
    /// A probe's answer (`probe`) closes an open circuit on probation: its backoff is remembered
    /// until a lookup is answered, and doubles if the circuit opens again before.
    private func record(_ index: Int, rtt: Double, success: Bool?, probe: Bool = false) {
        let now = clock.now
        let (wasOpen, isOpen, backoff) = health.withLock { all in
            var entry = all[index]
            let wasOpen = entry.backoff != .zero
            entry.rtt = entry.rtt.map { $0 * 0.7 + rtt * 0.3 } ?? rtt
            if success == true {
                if let smoothed = entry.answeredRTT {
                    entry.rttDeviation = entry.rttDeviation * 0.7 + abs(smoothed - rtt) * 0.3
                    entry.answeredRTT = smoothed * 0.7 + rtt * 0.3
                } else {
                    entry.answeredRTT = rtt
                    entry.rttDeviation = rtt / 2
                }
            }
            entry.lastUsed = now
            switch success {
            case true?:
                entry.consecutiveFailures = 0
                entry.openUntil = nil
                if probe {
                    if entry.backoff != .zero { entry.probationBackoff = entry.backoff }
                } else {
                    entry.probationBackoff = .zero
                }
                entry.backoff = .zero
            case false?:
                entry.consecutiveFailures += 1
                // An open circuit's backoff moves only with its probes: lookups that fail on it
                // meanwhile (in flight when it opened, or with nothing else left) say nothing new
                // (R4 of the live red team: one burst took it from 1 s to 60 s within a second).
                if wasOpen && !probe { break }
                if entry.consecutiveFailures >= failureThreshold {
                    let previous = entry.backoff == .zero ? entry.probationBackoff : entry.backoff
                    entry.backoff = previous == .zero ? baseBackoff : min(previous * 2, maxBackoff)
                    entry.openUntil = now + entry.backoff
                }
            case nil:
                break
            }
            all[index] = entry
            return (wasOpen, entry.backoff != .zero, entry.backoff)
        }
        // Logged and counted when it opens or closes, and when a failed probe doubles its backoff.
        guard wasOpen != isOpen || (isOpen && success == false && probe) else { return }
        let upstream = upstreams[index].identifier
        metrics.recordCircuit(upstream: upstream, open: isOpen)
        if isOpen {
            logger.warning(
                "upstream circuit opened: tried last until a probe is answered",
                metadata: [
                    "upstream": "\(upstream)", "backoff_seconds": "\(Self.seconds(backoff))",
                ])
        } else {
            logger.notice("upstream circuit closed: answering again", metadata: ["upstream": "\(upstream)"])
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}
