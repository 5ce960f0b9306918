import DNSCore
import DNSStubServer
import DNSWire
import HTTPDNS
import Logging
import NIOCore

/// The daemon's one DNS service: what every transport — the stub over UDP and TCP, DNS over TLS,
/// and DoH through the HTTP gateway — asks, the same way: may this client ask now (the rate
/// limit: answer, refuse or drop), the answer when there is one without a lookup (the health-check
/// name, local data, a fresh cached address; built on the event loop), else `answer` awaited
/// within the daemon's one admission budget (``DaemonState/lookups``); then the query log and the
/// counters. Transports differ only in framing and in what they send for a refusal.
struct DNSService: StubAnswering {
    let state: DaemonState

    var logger: Logger { state.logger }

    var logsQueries: Bool { state.queryLog != nil }

    func admission(_ client: SocketAddress?, over transport: DNSTransport, query wire: [UInt8]) -> StubAdmission {
        state.admission(client, transport: transport, query: wire)
    }

    func answerWithoutWaiting(_ query: DNSQuery) -> DNSAnswers.Answer? {
        answerWithoutWaiting(query, runtime: state.current)
    }

    /// The answer without a lookup under `runtime` (the one the caller read: ``DaemonState/current``
    /// takes a lock): the health-check name's, local data, a fresh cached address.
    func answerWithoutWaiting(_ query: DNSQuery, runtime: Runtime) -> DNSAnswers.Answer? {
        state.answerWithoutWaiting(query, runtime: runtime)
    }

    func answer(_ query: DNSQuery) async -> DNSAnswers.Answer {
        await DNSResponder.answer(query, resolver: state.current.resolver)
    }

    /// `answer` with the resolver of the runtime the caller read when the query came.
    func answer(_ query: DNSQuery, resolver: HTTPDNSResolver) async -> DNSAnswers.Answer {
        await DNSResponder.answer(query, resolver: resolver)
    }

    func logQuery(_ query: DNSQuery, _ answer: DNSAnswers.Answer, client: SocketAddress?, transport: DNSTransport, started: UInt64) {
        state.logQuery(query, answer, client: client, transport: transport, started: started)
    }

    func count(_ event: StubEvent, over transport: DNSTransport) {
        let metrics = state.metrics
        switch event {
        case .query: metrics.stubQuery(transport)
        case .malformed: metrics.stubMalformed(transport)
        case .truncated: metrics.stubTruncated.increment()
        case .dropped: metrics.stubDropped(transport)
        case .connectionRejected(let reason): metrics.connectionRejected(transport == .dot ? .dot : .dnsTCP, reason: reason)
        case .connectionsOpen(let count): metrics.connectionsOpen(transport == .dot ? .dot : .dnsTCP, count)
        }
    }
}
