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

/// The answer of a pool query, or every upstream's failure.
package struct PoolOutcome: Sendable {
    package var answer: UpstreamAnswer?
    package var upstream: (any DNSUpstream)?
    package var failures: [DNSError.Attempt]
}

/// Trusted upstreams with a selection strategy and a circuit breaker per upstream.
///
/// An upstream that fails `failureThreshold` times in a row is skipped (tried last) for a backoff
/// that starts at `baseBackoff` and doubles up to `maxBackoff`; after it, one query re-probes it.
package final class UpstreamPool: Sendable {
    package struct Health: Sendable {
        package var rtt: Double? = nil
        package var consecutiveFailures = 0
        package var openUntil: ResolverInstant? = nil
        package var backoff: Duration = .zero
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

    package init(
        _ upstreams: [any DNSUpstream], strategy: UpstreamStrategy = .ordered, clock: any ResolverClock,
        failureThreshold: Int = 3, baseBackoff: Duration = .seconds(1), maxBackoff: Duration = .seconds(60),
        metrics: ResolverMetrics? = nil, logger: Logger = .silent
    ) {
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

    /// Whether upstream `index`'s circuit is open (skipped) now.
    package func isOpen(_ index: Int) -> Bool {
        let now = clock.now
        return health.withLock { $0[index].openUntil.map { now < $0 } ?? false }
    }

    /// The order in which upstreams are tried now.
    package func order() -> [Int] {
        let now = clock.now
        let count = queries.add(1, ordering: .relaxed).newValue
        let snapshot = health.withLock { $0 }
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
        // Open circuits go last: tried only when every closed one has failed. (No copies when none
        // is open: this runs once per query.)
        func isOpen(_ index: Int) -> Bool { snapshot[index].openUntil.map { now < $0 } ?? false }
        guard indices.contains(where: isOpen) else { return indices }
        return indices.filter { !isOpen($0) } + indices.filter(isOpen)
    }

    /// Asks the upstreams until one answers or the clock's `deadline` passes. NXDOMAIN and NODATA
    /// are answers and end the search.
    package func query(_ question: DNSMessage.Question, deadline: ResolverInstant) async -> PoolOutcome {
        var failures: [DNSError.Attempt] = []
        var order = self.order()
        if strategy == .race, order.count >= 2 {
            let pair = Array(order.prefix(2))
            order.removeFirst(2)
            let share = (deadline - clock.now) * 2 / (order.count + 2)
            if let outcome = await race(question, pair, timeout: share, failures: &failures) { return outcome }
        }
        for (position, index) in order.enumerated() {
            let remaining = deadline - clock.now
            guard remaining > .milliseconds(1), !Task.isCancelled else { break }
            // The remaining budget shared among the upstreams still to try: a blackholed first
            // upstream cannot starve the others.
            let share = remaining / (order.count - position)
            switch await ask(index, question, timeout: share) {
            case let .success(answer):
                return PoolOutcome(answer: answer, upstream: upstreams[index], failures: failures)
            case let .failure(error):
                failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                if error.code == .cancelled { return PoolOutcome(failures: failures) }
            }
        }
        if failures.isEmpty, let first = upstreams.first {
            failures.append(.init(upstream: first.identifier, code: .timeout, message: "the time budget ran out"))
        }
        return PoolOutcome(failures: failures)
    }

    private func race(
        _ question: DNSMessage.Question, _ pair: [Int], timeout: Duration,
        failures: inout [DNSError.Attempt]
    ) async -> PoolOutcome? {
        let start = clock.now
        return await withTaskGroup(of: (Int, Result<UpstreamAnswer, DNSError>).self) { group in
            for index in pair {
                group.addTask { (index, await self.ask(index, question, timeout: timeout)) }
            }
            for await (index, result) in group {
                switch result {
                case let .success(answer):
                    group.cancelAll()
                    // The loser is charged the winner's time, so it does not look faster than it is.
                    let elapsed = Self.seconds(clock.now - start)
                    for loser in pair where loser != index { record(loser, rtt: elapsed, success: nil) }
                    return PoolOutcome(answer: answer, upstream: upstreams[index], failures: failures)
                case let .failure(error):
                    failures.append(.init(upstream: upstreams[index].identifier, code: error.code, message: error.message))
                }
            }
            return nil
        }
    }

    private func ask(_ index: Int, _ question: DNSMessage.Question, timeout: Duration) async -> Result<UpstreamAnswer, DNSError> {
        let start = clock.now
        let upstream = upstreams[index].identifier
        do {
            let answer = try await upstreams[index].lookup(question, timeout: timeout)
            let elapsed = clock.now - start
            metrics.recordExchange(upstream: upstream, duration: elapsed, failure: nil)
            record(index, rtt: Self.seconds(elapsed), success: true)
            noteReachability(index, responded: true)
            return .success(answer)
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
        let now = clock.now
        let due = health.withLock { all in all.indices.filter { index in all[index].lastExchange.map { now - $0 >= idle } ?? true } }
        await withTaskGroup(of: Void.self) { group in
            for index in due {
                group.addTask { _ = await self.ask(index, probe, timeout: timeout) }
            }
        }
    }

    /// Updates the decayed RTT (EWMA, weight 0.3 for the new sample) and the circuit breaker.
    private func record(_ index: Int, rtt: Double, success: Bool?) {
        let now = clock.now
        let (wasOpen, isOpen, backoff) = health.withLock { all in
            var entry = all[index]
            let wasOpen = entry.backoff != .zero
            entry.rtt = entry.rtt.map { $0 * 0.7 + rtt * 0.3 } ?? rtt
            entry.lastUsed = now
            switch success {
            case true?:
                entry.consecutiveFailures = 0
                entry.openUntil = nil
                entry.backoff = .zero
            case false?:
                entry.consecutiveFailures += 1
                if entry.consecutiveFailures >= failureThreshold {
                    entry.backoff = entry.backoff == .zero ? baseBackoff : min(entry.backoff * 2, maxBackoff)
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
                "upstream circuit opened: skipped until re-probed",
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
