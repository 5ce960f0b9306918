import DNSCore
import Logging
import NIOCore
import Synchronization

@testable import DNSStubServer
@testable import DNSWire

/// A `StubAnswering` that answers every question NXDOMAIN — at once from "the cache" or after a
/// lookup of `delay` — and records what the listener asked of it: the names it looked up, in order,
/// and the events it counted.
final class RecordingStubAnswerer: StubAnswering {
    let logger = Logger(label: "test.stub")
    let logsQueries = false
    let answersWithoutWaiting: Bool
    let delay: Duration
    private let recorded = Mutex<(lookups: [String], events: [String])>(([], []))

    init(answersWithoutWaiting: Bool = true, delay: Duration = .zero) {
        self.answersWithoutWaiting = answersWithoutWaiting
        self.delay = delay
    }

    /// The names looked up (``answer(_:)`` called), in the order the listener asked.
    var lookups: [String] { recorded.withLock { $0.lookups } }
    /// The events counted, as `"\(event)"`.
    var events: [String] { recorded.withLock { $0.events } }

    func admission(_ client: SocketAddress?, over transport: DNSTransport, query wire: [UInt8]) -> StubAdmission { .answer }

    func answerWithoutWaiting(_ query: DNSQuery) -> DNSAnswers.Answer? {
        answersWithoutWaiting ? Self.reply(query) : nil
    }

    func answer(_ query: DNSQuery) async -> DNSAnswers.Answer {
        recorded.withLock { $0.lookups.append(query.question.name.description) }
        if delay > .zero { try? await Task.sleep(for: delay) }
        return Self.reply(query)
    }

    func logQuery(_ query: DNSQuery, _ answer: DNSAnswers.Answer, client: SocketAddress?, transport: DNSTransport, started: UInt64) {}

    func count(_ event: StubEvent, over transport: DNSTransport) {
        recorded.withLock { $0.events.append("\(event)") }
    }

    static func reply(_ query: DNSQuery) -> DNSAnswers.Answer {
        DNSAnswers.response(to: query, DNSError(.nxdomain, "no such name"), negativeTTL: 60)
    }
}
