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

    func allows(_ client: SocketAddress?, over transport: StubTransport) -> Bool {
        switch transport {
        case .udp: state.allows(client, transport: .udp)
        case .tcp: state.allows(client, transport: .tcp)
        case .dot: state.allows(client, transport: .dot)
        }
    }

    func limitedReply(to wire: [UInt8]) -> [UInt8]? { state.limitedReply(to: wire) }

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
