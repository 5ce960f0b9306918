import DNSCore
import Synchronization

/// A fake upstream that carries whole DNS messages (as DoH and DoT do), answering by script and
/// recording what it was asked: the forwarding path's recording fake.
public final class ScriptedExchanger: MessageExchanging, @unchecked Sendable {
    // Safety: the mutable state (the reply and the log) is behind one Mutex; the rest is immutable.
    public enum Reply: Sendable {
        /// A response echoing the question, with this RCODE and (for NOERROR) one TXT record.
        case respond(rcode: UInt8 = 0)
        case fail(DNSError.Code)
        /// An HTTP answer with this status instead of a DNS message (`http_status`).
        case status(UInt16)
        /// Waits this long on the clock (bounded by the granted timeout, which then fails as
        /// `timeout`), then responds.
        case slow(Duration)
        /// A response to another question.
        case mismatched
        /// Bytes that are no DNS message.
        case garbage
    }

    public struct Event: Sendable, Equatable {
        public var name: String
        public var type: RecordType
        public var timeout: Duration
        /// Whether it came as a message (forwarded) rather than as an address lookup (a probe).
        public var forwarded: Bool
    }

    public let identifier: String
    public let source = Resolution.Source.doh
    private let clock: (any ResolverClock)?
    private let state: Mutex<(reply: Reply, log: [Event])>

    public init(_ identifier: String, clock: (any ResolverClock)? = nil, _ reply: Reply) {
        self.identifier = identifier
        self.clock = clock
        state = Mutex((reply, []))
    }

    /// Answers every later exchange with `reply`.
    public func reply(_ reply: Reply) { state.withLock { $0.reply = reply } }

    public var events: [Event] { state.withLock { $0.log } }
    /// Messages it was sent (probes aside).
    public var exchanges: Int { state.withLock { $0.log.filter(\.forwarded).count } }

    public func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await perform(question, timeout: timeout, forwarded: false)
        return .nodata(negativeTTL: 60)
    }

    public func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        let message: DNSMessage
        do { message = try DNSMessage(decoding: query) } catch { throw DNSError(.invalidQuery, "not a query") }
        guard let question = message.questions.first else { throw DNSError(.invalidQuery, "no question") }
        switch try await perform(question, timeout: timeout, forwarded: true) {
        case .mismatched:
            let other = DNSMessage.Question(name: try DomainName("other.hd.test"), type: question.type)
            return DNSMessage(id: message.id, flags: 0x8180, questions: [other]).encode()
        case .garbage:
            return [0xde, 0xad]
        case let .respond(rcode):
            return Self.response(to: message, rcode: rcode)
        default:
            return Self.response(to: message, rcode: 0)
        }
    }

    private static func response(to query: DNSMessage, rcode: UInt8) -> [UInt8] {
        let question = query.questions[0]
        let answers: [DNSMessage.Record] =
            rcode == 0 ? [.init(name: question.name, type: .txt, ttl: 300, data: .opaque([2] + Array("ok".utf8)))] : []
        return DNSMessage(id: query.id, flags: 0x8180 | UInt16(rcode & 0x0f), questions: query.questions, answers: answers).encode()
    }

    /// Logs the exchange, then fails, sleeps or hands back the reply to build.
    @discardableResult
    private func perform(_ question: DNSMessage.Question, timeout: Duration, forwarded: Bool) async throws(DNSError) -> Reply {
        let reply = state.withLock { state -> Reply in
            state.log.append(Event(name: question.name.description, type: question.type, timeout: timeout, forwarded: forwarded))
            return state.reply
        }
        switch reply {
        case let .fail(code):
            throw DNSError(code, "scripted \(code.rawValue)")
        case let .status(status):
            var error = DNSError(.httpStatus, "HTTP status \(status)")
            error.httpStatus = status
            throw error
        case let .slow(delay):
            do {
                if let clock { try await clock.sleep(for: min(delay, timeout)) } else { try await Task.sleep(for: min(delay, timeout)) }
            } catch {
                throw DNSError(.cancelled, "cancelled")
            }
            if delay > timeout { throw DNSError(.timeout, "no answer within \(timeout)") }
        default:
            break
        }
        return reply
    }
}
