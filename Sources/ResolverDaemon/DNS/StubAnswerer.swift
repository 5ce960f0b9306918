import DNSCore
import DNSStubServer
import Logging
import NIOCore

/// The daemon as the DNS stub and DNS over TLS see it: the rate limit, the health-check name and
/// the engine (``DNSResponder``, as `/dns-query` answers), the query log and the metrics.
struct StubAnswerer: StubAnswering {
    let state: DaemonState

    var logger: Logger { state.logger }

    var logsQueries: Bool { state.queryLog != nil }

    func admission(_ client: SocketAddress?, over transport: StubTransport, query wire: [UInt8]) -> StubAdmission {
        switch transport {
        case .udp: state.admission(client, transport: .udp, query: wire)
        case .tcp: state.admission(client, transport: .tcp, query: wire)
        case .dot: state.admission(client, transport: .dot, query: wire)
        }
    }

    func answerWithoutWaiting(_ query: DNSQuery) -> DNSAnswers.Answer? {
        state.answerWithoutWaiting(query, runtime: state.current)
    }

    func answer(_ query: DNSQuery) async -> DNSAnswers.Answer {
        await DNSResponder.answer(query, resolver: state.current.resolver)
    }

    func logQuery(_ query: DNSQuery, _ answer: DNSAnswers.Answer, client: SocketAddress?, transport: StubTransport, started: UInt64) {
        state.logQuery(query, answer, client: client, transport: transport.rawValue, started: started)
    }

    func count(_ event: StubEvent, over transport: StubTransport) {
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
