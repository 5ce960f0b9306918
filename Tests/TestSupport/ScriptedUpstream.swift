import DNSCore
import Synchronization

/// The scripted address upstream of the test suites: answers what it is told, records every question
/// (``ScriptedExchanger`` is its twin for whole messages).
///
/// ```swift
/// let upstream = ScriptedUpstream(.addresses(["198.18.0.1", "2001:2::1"], ttl: 300))
/// upstream.reply(.fail(.timeout))          // from now on
/// #expect(upstream.queries == 2)
/// ```
public final class ScriptedUpstream: DNSUpstream, @unchecked Sendable {
    // Safety: the mutable state (the reply and the log) is behind one Mutex; the rest is immutable.
    public enum Reply: Sendable {
        /// The addresses of the asked family (A: the IPv4 ones, AAAA: the IPv6 ones); NODATA when
        /// there are none.
        case addresses([String], ttl: UInt32 = 300)
        case nxdomain(soaMinimum: UInt32? = 60)
        case nodata
        case fail(DNSError.Code)
        /// Waits this long (bounded by the granted timeout, which then fails as `timeout`), then
        /// answers with the addresses.
        case slow(Duration, [String])
        /// NXDOMAIN (or NODATA) with the zone's SOA, as a DNS-message upstream returns it.
        case denied(nxdomain: Bool, NegativeAuthority)
    }

    public struct Event: Sendable, Equatable {
        public var name: String
        public var type: RecordType
        public var timeout: Duration
    }

    public let identifier: String
    public let source: Resolution.Source
    /// The clock `.slow` sleeps on: a test's manual clock, or real time when nil.
    private let clock: (any ResolverClock)?
    private let state: Mutex<(script: @Sendable (RecordType) -> Reply, log: [Event])>

    public init(_ identifier: String, source: Resolution.Source = .doh, clock: (any ResolverClock)? = nil, _ reply: Reply) {
        self.identifier = identifier
        self.source = source
        self.clock = clock
        state = Mutex(({ _ in reply }, []))
    }

    /// An upstream named `https://fake.test/dns-query`.
    public convenience init(clock: (any ResolverClock)? = nil, _ reply: Reply) {
        self.init("https://fake.test/dns-query", clock: clock, reply)
    }

    /// Answers by record type.
    public init(_ identifier: String, source: Resolution.Source = .doh, replies: @escaping @Sendable (RecordType) -> Reply) {
        self.identifier = identifier
        self.source = source
        self.clock = nil
        state = Mutex((replies, []))
    }

    /// Answers every later question with `reply`.
    public func reply(_ reply: Reply) { state.withLock { $0.script = { _ in reply } } }

    public var events: [Event] { state.withLock { $0.log } }
    public var queries: Int { state.withLock { $0.log.count } }

    public func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await lookup(question, timeout: timeout).answer
    }

    public func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer {
        let reply = state.withLock { state -> Reply in
            state.log.append(Event(name: question.name.description, type: question.type, timeout: timeout))
            return state.script(question.type)
        }
        switch reply {
        case let .addresses(ips, ttl):
            return UpstreamAnswer(Self.answer(ips, ttl: ttl, question: question))
        case let .nxdomain(minimum):
            return UpstreamAnswer(.nxdomain(negativeTTL: minimum))
        case .nodata:
            return UpstreamAnswer(.nodata(negativeTTL: nil))
        case let .denied(nxdomain, authority):
            return UpstreamAnswer(nxdomain ? .nxdomain(negativeTTL: authority.ttl) : .nodata(negativeTTL: authority.ttl), authority: authority)
        case let .fail(code):
            throw DNSError(code, "scripted \(code.rawValue)")
        case let .slow(delay, ips):
            do {
                if let clock { try await clock.sleep(for: min(delay, timeout)) } else { try await Task.sleep(for: min(delay, timeout)) }
            } catch {
                throw DNSError(.cancelled, "cancelled")
            }
            if delay > timeout { throw DNSError(.timeout, "no answer within \(timeout)") }
            return UpstreamAnswer(Self.answer(ips, ttl: 300, question: question))
        }
    }

    private static func answer(_ ips: [String], ttl: UInt32, question: DNSMessage.Question) -> AddressAnswer {
        let wanted = ips.compactMap(IPAddress.init).filter { ($0.family == .ipv4) == (question.type == .a) }
        if wanted.isEmpty { return .nodata(negativeTTL: 60) }
        return .addresses(wanted.map { ResolvedAddress(ip: $0, ttl: ttl) }, canonicalName: question.name)
    }
}
