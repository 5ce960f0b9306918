import DNSWire
import Logging
import NIOCore

/// What the DNS stub (UDP, TCP) and DNS over TLS serve: all they see of the daemon. The listeners
/// frame, bound and time queries; whether a client may ask, what a query is answered, what is
/// logged and counted is the answering's.
package protocol StubAnswering: Sendable {
    var logger: Logger { get }
    /// Whether answered queries are logged (each query's start is taken only then).
    var logsQueries: Bool { get }
    /// Whether the question in `wire` from `client` may be answered now (the rate limit), and if
    /// not, what the client gets.
    func admission(_ client: SocketAddress?, over transport: DNSTransport, query wire: [UInt8]) -> StubAdmission
    /// The answer when there is one without a lookup (local data, a fresh cached address), built
    /// without suspending; nil when ``answer(_:)`` has to be awaited.
    func answerWithoutWaiting(_ query: DNSQuery) -> DNSAnswers.Answer?
    /// Answers `query`, looking up or forwarding as needed.
    func answer(_ query: DNSQuery) async -> DNSAnswers.Answer
    func logQuery(_ query: DNSQuery, _ answer: DNSAnswers.Answer, client: SocketAddress?, transport: DNSTransport, started: UInt64)
    func count(_ event: StubEvent, over transport: DNSTransport)
}

/// What the rate limit lets a question have.
package enum StubAdmission: Sendable, Equatable {
    /// Answered as usual.
    case answer
    /// Past the limit: this reply (REFUSED, or a truncated one that sends the client to TCP), or
    /// none.
    case limited(reply: [UInt8]?)
}

/// What the stub's listeners count.
package enum StubEvent: Sendable {
    case query
    case malformed
    /// An answer cut to fit a UDP client (TC set).
    case truncated
    /// A query dropped: the lookups in flight were at their limit.
    case dropped
    /// A connection closed by the listener: `limit`, `timeout` or `error`.
    case connectionRejected(reason: String)
    /// The connections open now, after a change.
    case connectionsOpen(Int)
}
