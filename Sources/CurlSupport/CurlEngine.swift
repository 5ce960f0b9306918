import CCurl
import Foundation
import IOScheduling
import Synchronization

/// One libcurl multi handle driven on its own thread, serving every transfer of the process.
///
/// Sharing one multi handle means HTTP/2 connections, TLS sessions and keep-alive are reused across
/// DoH queries and intercepted requests alike. Callers use `async` ``perform(_:)``; cancelling the
/// calling task removes the transfer at once.
package final class CurlEngine: @unchecked Sendable {
    // Safety: the multi handle and every easy handle are used only on `thread`, except
    // curl_multi_wakeup, which libcurl documents as callable from any thread. The hand-over queues
    // are guarded by `queue`. A Transfer is touched by callers only before it is enqueued.

    /// The process-wide engine.
    package static let shared = CurlEngine()

    private struct Queue {
        var adds: [Transfer] = []
        var cancels: [Transfer] = []
        var resumes: [ObjectIdentifier] = []
        var running = true
    }

    private let multi: UnsafeMutableRawPointer
    private let queue = Mutex(Queue())
    private var active: [UnsafeMutableRawPointer: Transfer] = [:]
    /// Finished easy handles, reset and kept for the next transfers: creating one per transfer
    /// costs more than the transfer itself on a warm HTTP/2 connection.
    private var idleHandles: [UnsafeMutableRawPointer] = []
    private static let maxIdleHandles = 128
    /// Connections open at once to one host and port (the rest of a burst waits its turn).
    package static let maxConnectionsPerHost = 16
    private let opened = Atomic<Int>(0)

    /// Connections this engine has opened so far (`CURLINFO_NUM_CONNECTS` summed over finished
    /// transfers, failed ones included): what a benchmark counts.
    package var connectionsOpened: Int { opened.load(ordering: .relaxed) }

    package init() {
        _ = Self.globalInit
        multi = curl_multi_init()
        // Multiplex over HTTP/2 where the server offers it (the default since 7.62; made explicit).
        _ = httpdns_multi_setopt_long(multi, CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX))
        _ = httpdns_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, 256)
        // A burst of transfers to one server (thousands of uncached names at once) queues for the
        // connections it has rather than opening hundreds of TLS connections to it, and only so
        // many idle ones are kept.
        _ = httpdns_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, Self.maxConnectionsPerHost)
        _ = httpdns_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, 64)
        IOThread.start(name: "httpdns.curl") { [self] in run() }
    }

    private static let globalInit: Void = {
        curl_global_init(Int(CURL_GLOBAL_ALL))
    }()

    /// Runs `request` to completion.
    /// - Throws: ``CurlError`` (cancellation included, as ``CurlError/Code/cancelled``).
    package func perform(_ request: CurlRequest) async throws -> CurlResponse {
        let transfer = Transfer(request: request)
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<CurlResponse, Error>) in
                transfer.continuation = continuation
                // Only the transfer that finds no other waiting wakes the engine: it takes every
                // waiting one when it wakes, so a burst costs one wake.
                let accepted = queue.withLock { state -> Bool? in
                    guard state.running else { return nil }
                    state.adds.append(transfer)
                    return state.adds.count == 1
                }
                if let wake = accepted {
                    if wake { curl_multi_wakeup(multi) }
                } else {
                    transfer.finish(.failure(CurlError(.invalidRequest, "the transfer engine has stopped")))
                }
            }
        } onCancel: {
            transfer.cancelRequested.store(true, ordering: .relaxed)
            queue.withLock { $0.cancels.append(transfer) }
            curl_multi_wakeup(multi)
        }
    }

    /// Lets a paused transfer go on; called by its body sink or source, from any thread, after
    /// it answered `.pause`.
    package func resume(_ party: AnyObject) {
        queue.withLock { $0.resumes.append(ObjectIdentifier(party)) }
        curl_multi_wakeup(multi)
    }

    // MARK: Engine thread

    private func run() {
        var stillRunning: Int32 = 0
        var scheduling = BatchWhileBusy()
        while true {
            let (adds, cancels, resumes, running) = queue.withLock { state in
                defer {
                    state.adds.removeAll()
                    state.cancels.removeAll()
                    state.resumes.removeAll()
                }
                return (state.adds, state.cancels, state.resumes, state.running)
            }
            for transfer in adds { start(transfer) }
            for transfer in cancels { cancel(transfer) }
            for party in resumes {
                // Unpausing may call the transfer's callbacks at once; they may pause it again.
                for (easy, transfer) in active where transfer.involves(party) { _ = httpdns_easy_unpause(easy) }
            }
            if !running && active.isEmpty { break }
            scheduling.update(underWay: active.count)

            curl_multi_perform(multi, &stillRunning)
            var queued: Int32 = 0
            while let message = curl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
                let result = message.pointee.data.result
                complete(easy: easy, result: result)
            }
            curl_multi_poll(multi, nil, 0, 1000, nil)
        }
    }

    private func start(_ transfer: Transfer) {
        if transfer.cancelRequested.load(ordering: .relaxed) {
            transfer.finish(.failure(CurlError(.cancelled, "cancelled")))
            return
        }
        do {
            let easy = try transfer.configure(idleHandles.popLast() ?? curl_easy_init())
            active[easy] = transfer
            curl_multi_add_handle(multi, easy)
        } catch let error as CurlError {
            transfer.finish(.failure(error))
        } catch {
            transfer.finish(.failure(CurlError(.invalidRequest, "\(error)")))
        }
    }

    private func cancel(_ transfer: Transfer) {
        guard let easy = transfer.easy, active.removeValue(forKey: easy) != nil else { return }
        curl_multi_remove_handle(multi, easy)
        transfer.finish(.failure(CurlError(.cancelled, "cancelled")))
        recycle(transfer)
    }

    private func complete(easy: UnsafeMutableRawPointer, result: CURLcode) {
        guard let transfer = active.removeValue(forKey: easy) else { return }
        curl_multi_remove_handle(multi, easy)
        var connects = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
        opened.add(connects, ordering: .relaxed)
        transfer.finish(transfer.outcome(result))
        recycle(transfer)
    }

    /// Takes the handle back from a finished transfer; reset keeps connections, TLS sessions and
    /// caches, and clears every option (including the callbacks' pointer to the transfer).
    private func recycle(_ transfer: Transfer) {
        guard let easy = transfer.releaseHandle() else { return }
        if idleHandles.count < Self.maxIdleHandles {
            curl_easy_reset(easy)
            idleHandles.append(easy)
        } else {
            curl_easy_cleanup(easy)
        }
    }
}
