import DNSStubServer
import DNSWire
import DaemonHTTP
import DaemonListening
import Dispatch
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP1

/// Where every complete request goes, whichever HTTP version brought it: the policy first
/// (``RequestPolicy``), then
/// - `/dns-query`: parsed, and answered at once when the engine has the answer cached (on the
///   event loop, holding nothing), else in a task counted against the daemon's one admission
///   budget (`max_concurrent_requests`, shared with the stub and DoT);
/// - anything else: the API (``Routes``), in a task: `/v1/resolve` in the same budget, the routes
///   that look nothing up (metrics, health, status) counted apart, so a full budget never hides them.
/// Both versions record the same metrics through here.
final class RequestGateway: HTTPRequestHandling {
    let state: DaemonState
    /// The DNS service the stub and DoT listeners ask too.
    let service: DNSService
    /// The Prometheus text `/metrics` serves.
    private let exposition: @Sendable () -> [UInt8]

    init(state: DaemonState, exposition: @escaping @Sendable () -> [UInt8]) {
        self.state = state
        self.service = DNSService(state: state)
        self.exposition = exposition
    }

    var metrics: DaemonMetrics { state.metrics }

    func connectionRejected(reason: String) { metrics.connectionRejected(.http, reason: reason) }

    func connectionsOpen(_ count: Int) { metrics.connectionsOpen(.http, count) }

    /// The policy's refusal of a request head, before its body is read (HTTP/1.1 reads bodies only
    /// of requests that may go on).
    func refusal(method: String, target: String, contentLength: Int?, authorization: String?) -> HTTPAnswer? {
        state.current.policy.check(method: method, target: target, contentLength: contentLength, authorization: authorization)
    }

    func respond(to request: HTTPRequest, on channel: any Channel) -> HTTPReply {
        let started = DispatchTime.now().uptimeNanoseconds
        let runtime = state.current
        let route = Self.route(of: request.target)
        if let refused = runtime.policy.check(
            method: request.method, target: request.target, contentLength: request.contentLength,
            authorization: request.fields.first("authorization"))
        {
            return .ready(record(refused, route: route, method: request.method, started: started))
        }
        if (request.body?.readableBytes ?? 0) > runtime.config.daemon.limits.maxBodyBytes {
            return .ready(record(runtime.policy.bodyTooLarge(), route: route, method: request.method, started: started))
        }
        if route == DoHRequest.path {
            return dns(request, runtime: runtime, channel: channel, started: started)
        }
        // `/v1/resolve` looks names up: a place in the DNS listeners' budget. The other routes do
        // not, and have places of their own, so that /metrics and the health checks still answer
        // while lookups fill the budget.
        let looksUp = route == "/v1/resolve"
        guard looksUp ? enter(runtime) : enterRoute(runtime) else {
            return .ready(record(busy(runtime), route: route, method: request.method, started: started))
        }
        let promise = channel.eventLoop.makePromise(of: HTTPAnswer.self)
        let state = self.state, exposition = self.exposition
        Task {
            let answer = await Routes.answer(request, state: state, exposition: exposition)
            if looksUp { self.leave() } else { self.leaveRoute() }
            promise.succeed(self.record(answer, route: route, method: request.method, started: started))
        }
        return .pending(promise.futureResult)
    }

    /// Records a response that did not come through ``respond(to:on:)`` (an early 413, a 408).
    func recordEarly(_ answer: HTTPAnswer, target: String, method: String) {
        _ = record(answer, route: Self.route(of: target), method: method, started: DispatchTime.now().uptimeNanoseconds)
    }

    // MARK: DoH

    private func dns(_ request: HTTPRequest, runtime: Runtime, channel: any Channel, started: UInt64) -> HTTPReply {
        let route = DoHRequest.path, method = request.method
        let wire: [UInt8]
        switch DoHRequest.query(
            method: method, target: request.target, contentType: request.fields.first("content-type"),
            body: request.body.map { Array(buffer: $0) } ?? [])
        {
        case .success(let bytes): wire = bytes
        case .failure(let refusal):
            if refusal.status == 400 { metrics.dohMalformed.increment() }
            return .ready(record(.text(refusal.status, refusal.message), route: route, method: method, started: started))
        }
        let query: DNSQuery
        do {
            query = try DNSQuery(wire)
        } catch {
            if case .badVersion = error, let reply = DNSAnswers.reply(to: error) {
                return .ready(record(Self.dnsAnswer(.init(bytes: reply, minTTL: 0)), route: route, method: method, started: started))
            }
            metrics.dohMalformed.increment()
            return .ready(record(.text(400, "not a DNS query: \(error.reason)\n"), route: route, method: method, started: started))
        }
        // The client a trusted proxy named (PROXY v2), else the connection's peer.
        let peer = request.proxiedClient ?? channel.remoteAddress
        if case .limited(let reply) = service.admission(peer, over: .doh, query: wire) {
            guard let refused = reply else {
                return .ready(record(.text(429, "rate limited\n", headers: [("retry-after", "1")]), route: route, method: method, started: started))
            }
            return .ready(record(Self.dnsAnswer(.init(bytes: refused, minTTL: 0)), route: route, method: method, started: started))
        }
        if let answer = service.answerWithoutWaiting(query, runtime: runtime) {
            metrics.dohAnswered(post: method == "POST", nanoseconds: DispatchTime.now().uptimeNanoseconds - started)
            service.logQuery(query, answer, client: peer, transport: .doh, started: started)
            return .ready(Self.dnsAnswer(answer, to: query))
        }
        guard enter(runtime) else { return .ready(record(busy(runtime), route: route, method: method, started: started)) }
        let promise = channel.eventLoop.makePromise(of: HTTPAnswer.self)
        let client = service.logsQueries ? peer : nil
        let service = self.service, resolver = runtime.resolver
        // On the connection's loop, where the answer is written (EventLoopTaskExecutor).
        Task(executorPreference: EventLoopTaskExecutor.forCurrentLoop()) {
            let answer = await service.answer(query, resolver: resolver)
            self.leave()
            service.logQuery(query, answer, client: client, transport: .doh, started: started)
            promise.succeed(self.record(Self.dnsAnswer(answer, to: query), route: route, method: method, started: started))
        }
        return .pending(promise.futureResult)
    }

    /// `answer` as a DoH response; padded (``/DNSWire/DNSTransport/outgoing(_:answering:)``) when it
    /// answers `query` and that query was padded.
    static func dnsAnswer(_ answer: DNSResponder.Answer, to query: DNSQuery? = nil) -> HTTPAnswer {
        var body = ByteBuffer()
        body.writeBytes(query.map { DNSTransport.doh.outgoing(answer.bytes, answering: $0) } ?? answer.bytes)
        return HTTPAnswer(
            status: 200, headers: [("content-type", "application/dns-message"), ("cache-control", "max-age=\(answer.minTTL)")],
            body: body)
    }

    // MARK: Bookkeeping

    /// A place in the daemon's one admission budget, which the DNS listeners share.
    private func enter(_ runtime: Runtime) -> Bool { state.lookups.enter() }

    private func leave() { state.lookups.leave() }

    /// A place for a route that looks nothing up (`limits.max_concurrent_requests` of them).
    private func enterRoute(_ runtime: Runtime) -> Bool {
        let running = state.routesInFlight.add(1, ordering: .relaxed).newValue
        guard running <= runtime.config.daemon.limits.maxConcurrentRequests else {
            state.routesInFlight.subtract(1, ordering: .relaxed)
            return false
        }
        return true
    }

    private func leaveRoute() { state.routesInFlight.subtract(1, ordering: .relaxed) }

    private func busy(_ runtime: Runtime) -> HTTPAnswer {
        .text(503, "too many requests in flight (limit \(state.lookups.limit))\n", headers: [("retry-after", "1")])
    }

    private func record(_ answer: HTTPAnswer, route: Substring, method: String, started: UInt64) -> HTTPAnswer {
        let label = RequestPolicy.routes[String(route)] != nil ? String(route) : "NotFound"
        metrics.request(route: label, method: method, status: answer.status, nanoseconds: DispatchTime.now().uptimeNanoseconds - started)
        return answer
    }

    private static func route(of target: String) -> Substring { RequestPolicy.path(of: target) }
}
