import DNSCore
import Synchronization

/// A scripted upstream that records every question it is asked.
public final class FakeUpstream: DNSUpstream, @unchecked Sendable {
    // Safety: `log` is a Mutex; the rest is immutable after init.
    public enum Behaviour: Sendable {
        case answer([String], ttl: UInt32 = 300)
        case nxdomain
        case nodata
        case fail(DNSError.Code)
        /// Sleeps this long (bounded by the timeout the resolver grants), then answers.
        case slow(Duration, then: [String])
    }

    public struct Event: Sendable, Equatable {
        public var name: String
        public var type: RecordType
        public var timeout: Duration
    }

    public let identifier: String
    public let source: Resolution.Source
    private let behaviour: @Sendable (RecordType) -> Behaviour
    private let log = Mutex<[Event]>([])

    public init(_ identifier: String, source: Resolution.Source = .doh, _ behaviour: @escaping @Sendable (RecordType) -> Behaviour) {
        self.identifier = identifier
        self.source = source
        self.behaviour = behaviour
    }

    public convenience init(_ identifier: String, always behaviour: Behaviour) {
        self.init(identifier) { _ in behaviour }
    }

    public var events: [Event] { log.withLock { $0 } }

    public func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        log.withLock { $0.append(Event(name: question.name.description, type: question.type, timeout: timeout)) }
        switch behaviour(question.type) {
        case let .answer(ips, ttl):
            return .addresses(ips.map { ResolvedAddress(ip: IPAddress($0)!, ttl: ttl) }, canonicalName: question.name)
        case .nxdomain:
            return .nxdomain(negativeTTL: 60)
        case .nodata:
            return .nodata(negativeTTL: 60)
        case let .fail(code):
            throw DNSError(code, "scripted \(code.rawValue)")
        case let .slow(delay, ips):
            do {
                try await Task.sleep(for: min(delay, timeout))
            } catch {
                throw DNSError(.cancelled, "cancelled")
            }
            if delay > timeout { throw DNSError(.timeout, "no answer within \(timeout)") }
            return .addresses(ips.map { ResolvedAddress(ip: IPAddress($0)!, ttl: 300) }, canonicalName: question.name)
        }
    }
}
