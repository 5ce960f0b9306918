import Synchronization

extension CurlEngine {
    /// Starts `request` and returns at once; the head and the body chunks are read from the
    /// returned stream as they arrive. At most about `bufferLimit` bytes wait in memory: beyond
    /// that the transfer is paused (the server sees TCP or HTTP/2 flow control) until the reader
    /// catches up.
    package func stream(_ request: CurlRequest, bufferLimit: Int = 1 << 20) -> CurlStream {
        let stream = CurlStream(engine: self, bufferLimit: bufferLimit)
        var request = request
        request.bodySink = stream
        let task = Task { [self] in
            do {
                stream.finish(.success(try await perform(request)))
            } catch let error as CurlError {
                stream.finish(.failure(error))
            } catch {
                stream.finish(.failure(CurlError(.protocolError, "\(error)")))
            }
        }
        stream.attach(task)
        return stream
    }
}

/// A response read while it arrives: ``head()`` first, then ``next()`` until nil.
///
/// One reader at a time. Dropping the last reference to a stream does not stop the transfer:
/// call ``cancel()`` (the DNSInterceptor body types do so when they are released).
package final class CurlStream: CurlBodySink, Sendable {
    fileprivate struct State {
        var head: CurlResponseHead?
        var chunks: [[UInt8]] = []
        var buffered = 0
        var end: Result<CurlResponse, CurlError>?
        /// The engine paused the transfer on our `.pause`; the reader resumes it.
        var paused = false
        var cancelled = false
        var waiter: CheckedContinuation<Void, Never>?
        var task: Task<Void, Never>?
        /// Counts arrivals (head, bytes, end) so that a reader never sleeps through one.
        var version = 0
    }

    private let engine: CurlEngine
    private let bufferLimit: Int
    private let state = Mutex(State())

    fileprivate init(engine: CurlEngine, bufferLimit: Int) {
        self.engine = engine
        self.bufferLimit = max(16 * 1024, bufferLimit)
    }

    fileprivate func attach(_ task: Task<Void, Never>) {
        let cancelled = state.withLock { state in
            state.task = task
            return state.cancelled
        }
        if cancelled { task.cancel() }
    }

    /// The final response head.
    /// - Throws: ``CurlError`` when the transfer failed before a head arrived.
    package func head() async throws(CurlError) -> CurlResponseHead {
        while true {
            let (outcome, version): (Result<CurlResponseHead, CurlError>?, Int) = state.withLock { state in
                if let head = state.head { return (.success(head), state.version) }
                switch state.end {
                case .failure(let error): return (.failure(error), state.version)
                case .success(let response):
                    return (
                        .success(
                            CurlResponseHead(
                                status: response.status, headers: response.headers,
                                remoteIP: response.remoteIP, httpVersion: response.httpVersion)),
                        state.version
                    )
                case nil: return (nil, state.version)
                }
            }
            if let outcome { return try outcome.get() }
            await waitForChange(after: version)
        }
    }

    /// The next bytes of the body (whatever has arrived, joined), or nil at its end.
    /// - Throws: ``CurlError`` when the transfer failed, cancellation included.
    package func next() async throws(CurlError) -> [UInt8]? {
        while true {
            let (outcome, resume, version): (Result<[UInt8]?, CurlError>?, Bool, Int) = state.withLock { state in
                if !state.chunks.isEmpty {
                    let bytes = state.chunks.count == 1 ? state.chunks[0] : state.joinedChunks()
                    state.chunks.removeAll(keepingCapacity: true)
                    state.buffered = 0
                    let resume = state.paused
                    state.paused = false
                    return (.success(bytes), resume, state.version)
                }
                switch state.end {
                case .failure(let error): return (.failure(error), false, state.version)
                case .success: return (.success(nil), false, state.version)
                case nil: return (nil, false, state.version)
                }
            }
            if resume { engine.resume(self) }
            if let outcome { return try outcome.get() }
            await waitForChange(after: version)
        }
    }

    /// Stops the transfer; a waiting reader gets ``CurlError/Code/cancelled``.
    package func cancel() {
        let task = state.withLock { state in
            state.cancelled = true
            return state.task
        }
        task?.cancel()
    }

    /// The last reader's wait; cancelling the reading task cancels the transfer.
    private func waitForChange(after version: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let ready = state.withLock { state -> Bool in
                    if state.version != version { return true }
                    state.waiter = continuation
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            cancel()
        }
    }

    fileprivate func finish(_ result: Result<CurlResponse, CurlError>) {
        let waiter = state.withLock { state in
            state.end = state.cancelled ? .failure(CurlError(.cancelled, "cancelled")) : result
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    // MARK: CurlBodySink (engine thread)

    package func receive(head: CurlResponseHead) {
        let waiter = state.withLock { state in
            state.head = head
            return state.takeWaiter()
        }
        waiter?.resume()
    }

    package func write(_ bytes: UnsafeRawBufferPointer) -> CurlSinkAnswer {
        let (answer, waiter): (CurlSinkAnswer, CheckedContinuation<Void, Never>?) = state.withLock { state in
            // The cancelled task removes the transfer; until then it just waits.
            if state.cancelled { return (.pause, nil) }
            if state.buffered >= bufferLimit {
                state.paused = true
                return (.pause, nil)
            }
            state.chunks.append(
                [UInt8](unsafeUninitializedCapacity: bytes.count) { buffer, count in
                    buffer.baseAddress!.initialize(from: bytes.bindMemory(to: UInt8.self).baseAddress!, count: bytes.count)
                    count = bytes.count
                })
            state.buffered += bytes.count
            return (.accepted, state.takeWaiter())
        }
        waiter?.resume()
        return answer
    }
}

extension CurlStream.State {
    /// The waiting chunks as one array, copied block by block.
    fileprivate func joinedChunks() -> [UInt8] {
        var joined: [UInt8] = []
        joined.reserveCapacity(buffered)
        for chunk in chunks { joined.append(contentsOf: chunk) }
        return joined
    }

    /// Records an arrival and hands back the reader to wake, if one waits.
    fileprivate mutating func takeWaiter() -> CheckedContinuation<Void, Never>? {
        version &+= 1
        defer { waiter = nil }
        return waiter
    }
}
