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

/// What one turn of the pool's attempt loop gives: the value an upstream answered with, or every
/// upstream's failure.
package struct PoolResult<Value: Sendable>: Sendable {
    package var value: Value?
    package var upstream: (any DNSUpstream)?
    package var failures: [DNSError.Attempt]

    package init(value: Value? = nil, upstream: (any DNSUpstream)? = nil, failures: [DNSError.Attempt]) {
        self.value = value
        self.upstream = upstream
        self.failures = failures
    }
}

/// The answer of an address lookup through the pool, or every upstream's failure.
package typealias PoolOutcome = PoolResult<UpstreamAnswer>

extension PoolResult where Value == UpstreamAnswer {
    package var answer: UpstreamAnswer? { value }
}

/// One exchange with one upstream within a timeout: what the pool's attempt loop repeats. A lookup
/// asks for addresses; forwarding sends a whole message and checks the response.
package typealias PoolExchange<Value: Sendable> = @Sendable (any DNSUpstream, Duration) async throws(DNSError) -> Value

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

    package init(
        _ upstreams: [any DNSUpstream], strategy: UpstreamStrategy = .ordered, clock: any ResolverClock,
        failureThreshold: Int = 3, baseBackoff: Duration = .seconds(1), maxBackoff: Duration = .seconds(60),
        probe: DNSMessage.Question = DNSMessage.Question(name: .root, type: .ns), probeTimeout: Duration = .seconds(3),
        spawner: any TaskSpawner = UnstructuredTasks(), hedging: Bool = true, metrics: ResolverMetrics? = nil, logger: Logger = .silent
    ) {
        self.hedging = hedging
        self.probe = probe
        self.probeTimeout = probeTimeout
        self.spawner = spawner
        self.upstreams = upstreams
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
            _ = await ask(index, probe, timeout: probeTimeout, probing: true, Self.lookup(probe))
            health.withLock { $0[index].probing = false }
        }
    }

    /// Asks the upstreams until one answers or the clock's `deadline` passes. NXDOMAIN and NODATA
    /// are answers and end the search.
    package func query(_ question: DNSMessage.Question, deadline: ResolverInstant) async -> PoolOutcome {
        await attempt(question, deadline: deadline, Self.lookup(question))
    }

    /// The exchange of an address lookup (and of a probe): `question` asked of the upstream.
    private static func lookup(_ question: DNSMessage.Question) -> PoolExchange<UpstreamAnswer> {
        { upstream, timeout throws(DNSError) in try await upstream.lookup(question, timeout: timeout) }
    }

    /// The attempt loop every upstream exchange goes through — address lookups, forwarded messages,
    /// HTTPS/SVCB lookups and DNSSEC chain fetches alike: the strategy's order with open circuits
    /// last, each upstream's share of what is left of the budget, hedging, and every exchange's
    /// outcome recorded (RTT, circuit, reachability, metrics). Only the upstreams `eligible` accepts
    /// are asked (forwarding needs one that carries whole messages); `question` names the work in
    /// logs. A thrown error is the upstream's failure and moves on to the next one.
    package func attempt<Value: Sendable>(
        _ question: DNSMessage.Question, deadline: ResolverInstant,
        eligible: (@Sendable (any DNSUpstream) -> Bool)? = nil, _ exchange: @escaping PoolExchange<Value>
    ) async -> PoolResult<Value> {
        var failures: [DNSError.Attempt] = []
        var order = self.order()
        if let eligible { order.removeAll { !eligible(upstreams[$0]) } }
        let first = order.first.map { upstreams[$0] }
        if strategy == .race, order.count >= 2 {
            let pair = Array(order.prefix(2))
            order.removeFirst(2)
            let share = (deadline - clock.now) * 2 / (order.count + 2)
            if let outcome = await race(question, pair, timeout: share, failures: &failures, exchange) { return outcome }
        }
        guard hedging, order.count >= 2 else {
            for (position, index) in order.enumerated() {
                let remaining = deadline - clock.now
                guard remaining > .milliseconds(1), !Task.isCancelled else { break }
                // The remaining budget shared among the upstreams still to try: a blackholed first
                // upstream cannot starve the others.
                let share = remaining / (order.count - position)
                switch await ask(index, question, timeout: share, exchange) {
                case let .success(value):
                    return PoolResult(value: value, upstream: upstreams[index], failures: failures)
                case let .failure(error):
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                    if error.code == .cancelled { return PoolResult(failures: failures) }
                }
            }
            return Self.exhausted(failures, first: first)
        }
        return await hedged(question, order, deadline: deadline, failures: failures, first: first, exchange)
    }

    private static func exhausted<Value>(_ failures: [DNSError.Attempt], first: (any DNSUpstream)?) -> PoolResult<Value> {
        var failures = failures
        if failures.isEmpty, let first {
            failures.append(.init(upstream: first.identifier, code: .timeout, message: "the time budget ran out"))
        }
        return PoolResult(failures: failures)
    }

    private enum HedgeEvent<Value: Sendable>: Sendable {
        case finished(Int, Result<Value, DNSError>)
        /// The hedge delay of the attempt started `position`-th ran out.
        case timer(position: Int)
    }

    /// The upstreams in `order`, each one started when the one before it has failed or has not
    /// answered within its hedge delay (``hedgeDelay(_:)``); the first answer wins. An attempt still
    /// running when another upstream answered counts as a failed one (it did not answer in time):
    /// three in a row open its circuit like any other failures, so a blackholed upstream costs its
    /// hedge delay three times, not its share of the budget on every lookup.
    private func hedged<Value: Sendable>(
        _ question: DNSMessage.Question, _ order: [Int], deadline: ResolverInstant, failures: [DNSError.Attempt],
        first: (any DNSUpstream)?, _ exchange: @escaping PoolExchange<Value>
    ) async -> PoolResult<Value> {
        var failures = failures
        return await withTaskGroup(of: HedgeEvent<Value>.self) { group in
            var started: [(index: Int, at: ResolverInstant, late: Bool)] = []
            var running = 0
            func startNext() -> Bool {
                let position = started.count
                let remaining = deadline - clock.now
                guard order.count > position, remaining > .milliseconds(1), !Task.isCancelled else { return false }
                let index = order[position]
                let share = remaining / (order.count - position)
                started.append((index, clock.now, false))
                running += 1
                group.addTask { .finished(index, await self.ask(index, question, timeout: share, exchange)) }
                let delay = hedgeDelay(index)
                if position + 1 < order.count, delay < share {
                    group.addTask {
                        do { try await self.clock.sleep(for: delay) } catch { return .timer(position: -1) }
                        return .timer(position: position)
                    }
                }
                return true
            }
            _ = startNext()
            while let event = await group.next() {
                switch event {
                case let .finished(index, .success(value)):
                    group.cancelAll()
                    let now = clock.now
                    // Only an attempt whose own hedge delay had passed was outrun; one started
                    // later is cancelled uncharged (a late answer from the first must not cost the
                    // second its circuit, F48-3).
                    for attempt in started
                    where attempt.index != index && attempt.late
                        && !failures.contains(where: { $0.upstream == upstreams[attempt.index].identifier })
                    {
                        let elapsed = now - attempt.at
                        hedgedAway(attempt.index, after: elapsed, question: question)
                        failures.append(
                            .init(
                                upstream: upstreams[attempt.index].identifier, code: .timeout,
                                message: "no answer in \(Int(Self.seconds(elapsed) * 1000)) ms, when \(upstreams[index].identifier) answered (hedged)"
                            ))
                    }
                    return PoolResult(value: value, upstream: upstreams[index], failures: failures)
                case let .finished(index, .failure(error)):
                    running -= 1
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                    if error.code == .cancelled {
                        group.cancelAll()
                        return PoolResult(failures: failures)
                    }
                    // A failure starts the next at once, whatever else is still running (F48-6).
                    if running < 2 { _ = startNext() }
                    if running == 0 {
                        group.cancelAll()
                        return Self.exhausted(failures, first: first)
                    }
                case let .timer(position):
                    guard position >= 0, position < started.count else { continue }
                    started[position].late = true
                    // The newest attempt's delay ran out and it is still running: ask the next
                    // too — at most two at a time (F48-4); a third waits for one of them to fail.
                    if position == started.count - 1, running == 1 { _ = startNext() }
                }
            }
            return Self.exhausted(failures, first: first)
        }
    }

    /// How long an attempt at upstream `index` may go unanswered before the next upstream is asked
    /// too: the smoothed RTT of its answers plus four mean deviations (RFC 6298's retransmission
    /// timer, a high quantile of its recent latency), at least 50 ms (unbound's
    /// `infra-cache-min-rtt`) and at most 1 s; 200 ms for an upstream that has not answered yet.
    package func hedgeDelay(_ index: Int) -> Duration {
        let (rtt, deviation) = health.withLock { ($0[index].answeredRTT, $0[index].rttDeviation) }
        guard let rtt else { return Self.unmeasuredHedgeDelay }
        let seconds = min(max(rtt + 4 * deviation, 0.05), 1)
        return .nanoseconds(Int64(seconds * 1e9))
    }

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

    private func race<Value: Sendable>(
        _ question: DNSMessage.Question, _ pair: [Int], timeout: Duration,
        failures: inout [DNSError.Attempt], _ exchange: @escaping PoolExchange<Value>
    ) async -> PoolResult<Value>? {
        let start = clock.now
        return await withTaskGroup(of: (Int, Result<Value, DNSError>).self) { group in
            for index in pair {
                group.addTask { (index, await self.ask(index, question, timeout: timeout, exchange)) }
            }
            for await (index, result) in group {
                switch result {
                case let .success(value):
                    group.cancelAll()
                    // The loser is charged the winner's time, so it does not look faster than it is.
                    let elapsed = Self.seconds(clock.now - start)
                    for loser in pair where loser != index { record(loser, rtt: elapsed, success: nil) }
                    return PoolResult(value: value, upstream: upstreams[index], failures: failures)
                case let .failure(error):
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                }
            }
            return nil
        }
    }

    /// One exchange with upstream `index`, its outcome recorded: metrics, RTT, circuit, reachability.
    private func ask<Value: Sendable>(
        _ index: Int, _ question: DNSMessage.Question, timeout: Duration, probing: Bool = false,
        _ exchange: PoolExchange<Value>
    ) async -> Result<Value, DNSError> {
        let start = clock.now
        let upstream = upstreams[index].identifier
        do {
            let value = try await exchange(upstreams[index], timeout)
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
            record(index, rtt: Self.seconds(elapsed), success: false)
            noteReachability(index, responded: error.code == .serverFailure || error.code == .refused)
            return .failure(error)
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
                group.addTask { _ = await self.ask(index, probe, timeout: timeout, probing: true, Self.lookup(probe)) }
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
        guard wasOpen != isOpen || (isOpen && success == false) else { return }
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
