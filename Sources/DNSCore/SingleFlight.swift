import Synchronization

/// Collapses concurrent work for the same key into one execution.
///
/// N concurrent callers of ``run(_:_:)`` with one key cause exactly one call of the work; all N get
/// its result. The work runs in its own task: a caller that is cancelled stops waiting at once (with
/// ``DNSError/Code/cancelled``) without cancelling the work for the others.
package final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private typealias Waiter = CheckedContinuation<Result<Value, DNSError>, Never>
    private let flights = Mutex<[Key: [UInt64: Waiter]]>([:])
    private let nextWaiter = Atomic<UInt64>(0)

    package init() {}

    /// Whether work for `key` is under way.
    package func isRunning(_ key: Key) -> Bool {
        flights.withLock { $0[key] != nil }
    }

    package func run(_ key: Key, _ work: @escaping @Sendable () async -> Result<Value, DNSError>) async -> Result<Value, DNSError> {
        if Task.isCancelled { return .failure(DNSError(.cancelled, "cancelled")) }
        let id = nextWaiter.add(1, ordering: .relaxed).newValue
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: Waiter) in
                let leads = flights.withLock { flights -> Bool in
                    if flights[key] != nil {
                        flights[key]![id] = continuation
                        return false
                    }
                    flights[key] = [id: continuation]
                    return true
                }
                guard leads else { return }
                // Unstructured on purpose: the work must outlive a cancelled first caller.
                Task {
                    let result = await work()
                    let waiters = flights.withLock { $0.removeValue(forKey: key) ?? [:] }
                    for waiter in waiters.values { waiter.resume(returning: result) }
                }
            }
        } onCancel: {
            let waiter = flights.withLock { $0[key]?.removeValue(forKey: id) }
            waiter?.resume(returning: .failure(DNSError(.cancelled, "cancelled")))
        }
    }
}
