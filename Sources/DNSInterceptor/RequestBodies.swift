import CurlSupport
import DNSCore
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// Where a request's body comes from.
enum RequestBody {
    case none
    case data([UInt8])
    /// Read while sending; can be sent again (307/308 redirects, retries).
    case file(URL)
    /// Read while sending, once: a redirect that must resend it fails.
    case stream(InputStream)

    init(_ request: URLRequest) {
        if let data = request.httpBody {
            self = .data([UInt8](data))
        } else if let stream = request.httpBodyStream {
            self = .stream(stream)
        } else {
            self = .none
        }
    }

    var isEmpty: Bool {
        if case .none = self { return true }
        return false
    }
}

/// A file sent as the request body straight from disk (local reads do not block the engine).
final class FileBodySource: CurlBodySource, @unchecked Sendable {
    // Safety: read and rewound only on the curl engine thread; the descriptor is closed in deinit.
    private let descriptor: Int32
    let length: Int64?

    init?(path: String) {
        descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            _ = Glibc.close(descriptor)
            return nil
        }
        length = Int64(info.st_size)
    }

    deinit { _ = Glibc.close(descriptor) }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> CurlSourceAnswer {
        while true {
            let count = Glibc.read(descriptor, buffer.baseAddress, buffer.count)
            if count > 0 { return .bytes(count) }
            if count == 0 { return .end }
            if errno != EINTR { return .abort }
        }
    }

    func rewind() -> Bool { lseek(descriptor, 0, SEEK_SET) == 0 }
}

/// An `InputStream` sent as the request body while it is read, never held whole: a reader thread
/// fills a bounded buffer (a stream's `read` may block, the engine thread must not), the transfer
/// takes from it and pauses while it is empty.
final class StreamBodySource: CurlBodySource, Sendable {
    private struct State {
        var buffer: [UInt8] = []
        var consumed = 0
        var finished = false
        var failed = false
        var cancelled = false
        var paused = false
    }

    private static let capacity = 1 << 20
    private let state = Mutex(State())
    /// Wakes the reader thread when room frees up.
    private let room = NSCondition()
    private let engine: CurlEngine
    let length: Int64? = nil

    init(_ stream: InputStream, engine: CurlEngine) {
        self.engine = engine
        let reader = UnsafeSendable(stream)
        let thread = Thread { [self] in
            Thread.current.name = "httpdns.body-stream"  // set from the thread itself: Linux names it so
            pump(reader.value)
        }
        thread.start()
    }

    /// Stops the reader thread once its current `read` returns.
    func cancel() {
        state.withLock { $0.cancelled = true }
        wakeReader()
    }

    private func pump(_ stream: InputStream) {
        stream.open()
        defer { stream.close() }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            // Wait for room: at most `capacity` bytes are ever buffered.
            room.lock()
            while state.withLock({ !$0.cancelled && $0.buffer.count - $0.consumed >= Self.capacity }) { room.wait() }
            room.unlock()
            if state.withLock({ $0.cancelled }) { return }
            let count = stream.read(&chunk, maxLength: chunk.count)
            let resume = state.withLock { state -> Bool in
                if count > 0 {
                    if state.consumed > 0 {
                        state.buffer.removeFirst(state.consumed)
                        state.consumed = 0
                    }
                    state.buffer.append(contentsOf: chunk[0..<count])
                } else if count == 0 {
                    state.finished = true
                } else {
                    state.failed = true
                }
                defer { state.paused = false }
                return state.paused
            }
            if resume { engine.resume(self) }
            if count <= 0 { return }
        }
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> CurlSourceAnswer {
        let answer = state.withLock { state -> CurlSourceAnswer in
            let available = state.buffer.count - state.consumed
            if available > 0 {
                let count = min(available, buffer.count)
                state.buffer.withUnsafeBytes { bytes in
                    buffer.baseAddress!.copyMemory(from: bytes.baseAddress! + state.consumed, byteCount: count)
                }
                state.consumed += count
                return .bytes(count)
            }
            if state.failed || state.cancelled { return .abort }
            if state.finished { return .end }
            state.paused = true
            return .pause
        }
        if case .bytes = answer { wakeReader() }
        return answer
    }

    /// Under the condition's lock, so the reader cannot miss it between its check and its wait.
    private func wakeReader() {
        room.lock()
        room.broadcast()
        room.unlock()
    }

    /// A stream is read once.
    func rewind() -> Bool { false }

    deinit { cancel() }
}

/// Carries a non-Sendable value to the one thread that uses it from then on.
struct UnsafeSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
