import NIOCore
import Synchronization

@testable import DaemonHTTP

/// An `HTTPRequestHandling` that answers every request 200 with `answer to TARGET` — at once, or
/// after `delay` from another thread as a lookup would — and records what the connection handler
/// handed it: the requests, the answers it gave itself (an early 413, a 408) and its rejections.
final class RecordingHTTPHandler: HTTPRequestHandling {
    let delay: Duration?
    private let recorded = Mutex<(requests: [String], early: [String], rejected: [String], answered: Int)>(([], [], [], 0))

    init(delay: Duration? = nil) {
        self.delay = delay
    }

    /// `METHOD TARGET` of every complete request, in the order the handler passed them on.
    var requests: [String] { recorded.withLock { $0.requests } }
    /// `STATUS TARGET` of the answers the connection handler gave itself.
    var early: [String] { recorded.withLock { $0.early } }
    /// Delayed answers given so far.
    var answered: Int { recorded.withLock { $0.answered } }

    static func body(for target: String) -> String { "answer to \(target)" }

    func refusal(method: String, target: String, contentLength: Int?, authorization: String?) -> HTTPAnswer? { nil }

    func respond(to request: HTTPRequest, on channel: any Channel) -> HTTPReply {
        recorded.withLock { $0.requests.append("\(request.method) \(request.target)") }
        let answer = HTTPAnswer(
            status: 200, headers: [("content-type", "application/dns-message")], body: ByteBuffer(string: Self.body(for: request.target)))
        guard let delay else { return .ready(answer) }
        let promise = channel.eventLoop.makePromise(of: HTTPAnswer.self)
        Task {
            try? await Task.sleep(for: delay)
            recorded.withLock { $0.answered += 1 }
            promise.succeed(answer)
        }
        return .pending(promise.futureResult)
    }

    func recordEarly(_ answer: HTTPAnswer, target: String, method: String) {
        recorded.withLock { $0.early.append("\(answer.status) \(target)") }
    }

    func connectionRejected(reason: String) {
        recorded.withLock { $0.rejected.append(reason) }
    }

    func connectionsOpen(_ count: Int) {}
}
