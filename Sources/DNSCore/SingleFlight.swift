import Synchronization

/// Collapses concurrent work for the same key into one execution.
///
/// N concurrent callers of ``run(_:_:)`` with one key cause one call of the work; all N get its
/// result. The first caller (the leader) runs the work in its own task, so the common path costs no
/// extra task or hop. A follower that is cancelled stops waiting at once with
/// ``DNSError/Code/cancelled``. If the leader is cancelled while followers wait, the work is started
/// again in a task of its own for them: cancelling one caller never cancels the others (at the price
/// of a second query in that rare case).
package final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    /// Resumed with the result, or nil when the flight ended before the waiter joined (try again).
    private typealias Waiter = CheckedContinuation<Result<Value, DNSError>?, Never>
    private let flights = Mutex<[Key: [UInt64: Waiter]]>([:])
    private let nextWaiter = Atomic<UInt64>(0)

    package init() {}

    /// Whether work for `key` is under way.
    package func isRunning(_ key: Key) -> Bool {
        flights.withLock { $0[key] != nil }
    }

    /// Callers waiting on the work for `key` (its leader aside).
    package func followers(_ key: Key) -> Int {
        flights.withLock { $0[key]?.count ?? 0 }
    }

    package func run(_ key: Key, _ work: @escaping @Sendable () async -> Result<Value, DNSError>) async -> Result<Value, DNSError> {
        while true {
            if Task.isCancelled { return .failure(DNSError(.cancelled, "cancelled")) }
            let leads = flights.withLock { flights -> Bool in
                guard flights[key] == nil else { return false }
                flights[key] = [:]
                return true
            }
            if leads {
                let result = await work()
                finish(key, result, work)
                return result
            }
            if let result = await follow(key) { return result }
        }
    }

    private func follow(_ key: Key) async -> Result<Value, DNSError>? {
        let id = nextWaiter.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: Waiter) in
                let joined = flights.withLock { flights -> Bool in
                    guard flights[key] != nil else { return false }
                    flights[key]![id] = continuation
                    return true
                }
                if !joined { continuation.resume(returning: nil) }
            }
        } onCancel: {
            let waiter = flights.withLock { $0[key]?.removeValue(forKey: id) }
            waiter?.resume(returning: .failure(DNSError(.cancelled, "cancelled")))
        }
    }

    private func finish(
        _ key: Key, _ result: Result<Value, DNSError>,
        _ work: @escaping @Sendable () async -> Result<Value, DNSError>
    ) {
        if case let .failure(error) = result, error.code == .cancelled,
            flights.withLock({ !($0[key]?.isEmpty ?? true) })
        {
            // The leader was cancelled, its followers were not: run the work again for them.
            Task {
                let retried = await work()
                let waiters = flights.withLock { $0.removeValue(forKey: key) ?? [:] }
                for waiter in waiters.values { waiter.resume(returning: retried) }
            }
            return
        }
        let waiters = flights.withLock { $0.removeValue(forKey: key) ?? [:] }
        for waiter in waiters.values { waiter.resume(returning: result) }
    }
}
