import DNSCore
import Dispatch
import Synchronization

extension HTTPDNSResolver {
    /// ``resolve(_:type:)`` for code that is not async — a thread of its own, a C callback, a
    /// synchronous API being adapted.
    ///
    /// A kept answer (fresh in the cache, local data, an IP literal) is returned on the calling
    /// thread, without a task or a thread hop: what ``resolveWithoutWaiting(_:type:)`` costs (a few
    /// hundred nanoseconds; BENCHMARKS.md "Cache hits and memory"). Otherwise the lookup runs as a
    /// task and the calling thread blocks until it ends, within ``/DNSCore/ResolverOptions/timeout``.
    ///
    /// - Important: never call it from async code or from a Swift concurrency executor's thread:
    ///   blocking those threads can starve the lookup it waits for. Use ``resolve(_:type:)`` there,
    ///   or ``resolve(_:type:completion:)``.
    /// - Throws: ``/DNSCore/DNSError``, as ``resolve(_:type:)``.
    public func resolveBlocking(_ host: String, type: AddressQuery = .both) throws(DNSError) -> Resolution {
        if let hit = resolveWithoutWaiting(host, type: type) { return hit }
        let outcome = Mutex<Result<Resolution, DNSError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            let result: Result<Resolution, DNSError>
            do throws(DNSError) { result = .success(try await resolve(host, type: type)) } catch { result = .failure(error) }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0 }!.get()
    }

    /// ``resolve(_:type:)`` with a completion handler: called on the calling thread, before this
    /// returns, when the answer is kept (no task is made); otherwise once, from a task, when the
    /// lookup ends.
    public func resolve(
        _ host: String, type: AddressQuery = .both, completion: @escaping @Sendable (Result<Resolution, DNSError>) -> Void
    ) {
        if let hit = resolveWithoutWaiting(host, type: type) { return completion(.success(hit)) }
        Task {
            do throws(DNSError) { completion(.success(try await resolve(host, type: type))) } catch { completion(.failure(error)) }
        }
    }
}
