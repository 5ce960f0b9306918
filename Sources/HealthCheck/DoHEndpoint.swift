import DNSCore
import Foundation
import HTTPDNS

/// RFC 8484 answers from the engine: the wire side of `/dns-query` (and of a DNS stub).
public enum DoHAnswering {
    /// The largest DNS message accepted (RFC 8484 §6: a DoH message is at most 65,535 octets).
    public static let maxMessageBytes = 65_535

    public enum Failure: Error, Equatable {
        /// Not a DNS query: malformed, a response, not exactly one question. HTTP 400.
        case malformed(String)
    }

    /// A query taken apart: the message and its one question; `addressType` when the engine
    /// answers it (A or AAAA in class IN), nil when it is forwarded.
    public struct Query: Sendable {
        let message: DNSMessage
        let question: DNSMessage.Question
        let addressType: AddressQuery?
        let wire: [UInt8]

        /// Checks `wire` is one standard query with exactly one question.
        public init(_ wire: [UInt8]) throws(Failure) {
            do { message = try DNSMessage(decoding: wire) } catch { throw .malformed("not a DNS message: \(error)") }
            guard !message.isResponse, message.opcode == 0 else { throw .malformed("not a standard query") }
            guard message.questions.count == 1, let question = message.questions.first else {
                throw .malformed("a query must have exactly one question, not \(message.questions.count)")
            }
            self.question = question
            self.wire = wire
            addressType = question.recordClass == DNSMessage.classIN
                ? (question.type == .a ? .a : question.type == .aaaa ? .aaaa : nil) : nil
        }
    }

    /// Answers `query` (wire bytes). A and AAAA come from the engine, with the remaining TTL and
    /// the CNAME to the canonical name; NXDOMAIN and NODATA as such; upstream failures as SERVFAIL;
    /// other types forwarded as they are to the trusted DoH upstreams, their response returned as it
    /// came but for the ID (SERVFAIL when no upstream answered, NOTIMP with only JSON upstreams).
    /// Returns the response and its smallest TTL.
    public static func answer(_ query: [UInt8], resolver: HTTPDNSResolver,
                              now: ContinuousClock.Instant = .now) async throws(Failure) -> (response: [UInt8], minTTL: UInt32) {
        await answer(try Query(query), resolver: resolver, now: now)
    }

    /// `answer` for a query already checked.
    public static func answer(_ query: Query, resolver: HTTPDNSResolver,
                              now: ContinuousClock.Instant = .now) async -> (response: [UInt8], minTTL: UInt32) {
        guard let addressType = query.addressType else {
            return await forward(query.wire, message: query.message, resolver: resolver)
        }
        if let ready = answerWithoutWaiting(query, resolver: resolver, now: now) { return ready }
        do {
            let resolution = try await resolver.resolve(query.question.name.description, type: addressType)
            return response(to: query, resolution, now: now)
        } catch {
            return response(to: query, error, resolver: resolver)
        }
    }

    /// The answer when the engine has it without a lookup (a fresh cached A or AAAA), built
    /// without suspending; nil when `answer` has to be awaited. For the event loop.
    public static func answerWithoutWaiting(_ query: Query, resolver: HTTPDNSResolver,
                                            now: ContinuousClock.Instant = .now) -> (response: [UInt8], minTTL: UInt32)? {
        guard let addressType = query.addressType,
              let resolution = resolver.resolveWithoutWaiting(query.question.name.description, type: addressType) else { return nil }
        return response(to: query, resolution, now: now)
    }

    private static func response(to query: Query, _ resolution: Resolution, now: ContinuousClock.Instant) -> (response: [UInt8], minTTL: UInt32) {
        let question = query.question
        let remaining = max(0, (resolution.expiresAt - now).components.seconds)
        var answers: [DNSMessage.Record] = []
        var owner = question.name
        if let canonical = resolution.canonicalName, let target = try? DomainName(canonical), target != question.name {
            let ttl = UInt32(clamping: min(remaining, Int64(resolution.addresses.map(\.ttl).min() ?? 0)))
            answers.append(DNSMessage.Record(name: question.name, type: .cname, ttl: ttl, data: .cname(target)))
            owner = target
        }
        for address in resolution.addresses {
            answers.append(DNSMessage.Record(name: owner, type: question.type,
                                             ttl: UInt32(clamping: min(Int64(address.ttl), remaining)), data: .address(address.ip)))
        }
        let message = DNSMessage(id: query.message.id, flags: responseFlags(query.message), questions: [question], answers: answers)
        return (message.encode(), answers.map(\.ttl).min() ?? 0)
    }

    private static func response(to query: Query, _ error: DNSError, resolver: HTTPDNSResolver) -> (response: [UInt8], minTTL: UInt32) {
        var flags = responseFlags(query.message)
        switch error.code {
        case .nxdomain: flags |= 3
        case .nodata: break
        case .invalidName: flags |= 1  // FORMERR
        case .rejectedPrivate: flags |= 5  // REFUSED: the rebinding guard dropped every answer
        default: flags |= 2  // SERVFAIL
        }
        // The engine keeps the zone's SOA to itself: a negative answer goes without one, and
        // HTTP caches get the configured negative TTL.
        let negativeTTL = error.code == .nxdomain || error.code == .nodata
            ? UInt32(clamping: resolver.options.negativeTTL.components.seconds) : 0
        return (DNSMessage(id: query.message.id, flags: flags, questions: [query.question]).encode(), negativeTTL)
    }

    /// QR, RD copied, RA.
    private static func responseFlags(_ query: DNSMessage) -> UInt16 {
        0x8000 | (query.flags & 0x0100) | 0x0080
    }

    static func forward(_ query: [UInt8], message: DNSMessage, resolver: HTTPDNSResolver) async -> (response: [UInt8], minTTL: UInt32) {
        var flags = responseFlags(message)
        guard resolver.canForward else {
            flags |= 4  // NOTIMP
            return (DNSMessage(id: message.id, flags: flags, questions: message.questions).encode(), 0)
        }
        do {
            let response = try await resolver.forward(query)
            return (response, minTTL(of: response))
        } catch {
            flags |= 2  // SERVFAIL
            return (DNSMessage(id: message.id, flags: flags, questions: message.questions).encode(), 0)
        }
    }

    /// The smallest TTL of a response's answers (OPT aside); for a negative answer, the SOA's
    /// negative TTL (RFC 2308 §5); 0 when neither says.
    static func minTTL(of response: [UInt8]) -> UInt32 {
        guard let message = try? DNSMessage(decoding: response) else { return 0 }
        let ttls = message.answers.filter { $0.type != .opt }.map(\.ttl)
        if let smallest = ttls.min() { return smallest }
        for record in message.authorities {
            if case .soa(let soa) = record.data { return min(record.ttl, soa.minimum) }
        }
        return 0
    }

    /// The query in a GET's `dns` parameter, or nil when it is longer than a DNS message can be
    /// or not base64url.
    public static func queryFromGETParameter(_ parameter: Substring) -> [UInt8]? {
        guard parameter.utf8.count <= maxMessageBytes * 4 / 3 + 4 else { return nil }
        return decodeBase64URL(parameter)
    }

    /// Whether a POST's `Content-Type` is `application/dns-message` (parameters and case aside).
    public static func isDNSMessage(contentType: String?) -> Bool {
        contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() == "application/dns-message"
    }

    /// Decodes the `dns` parameter of a GET: base64url without padding (RFC 8484 §4.1).
    public static func decodeBase64URL(_ text: Substring) -> [UInt8]? {
        var values: [UInt8] = []
        values.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"): values.append(byte - 65)
            case UInt8(ascii: "a")...UInt8(ascii: "z"): values.append(byte - 97 + 26)
            case UInt8(ascii: "0")...UInt8(ascii: "9"): values.append(byte - 48 + 52)
            case UInt8(ascii: "-"): values.append(62)
            case UInt8(ascii: "_"): values.append(63)
            case UInt8(ascii: "="): continue
            default: return nil
            }
        }
        if values.count % 4 == 1 { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(values.count * 3 / 4)
        var index = 0
        while index + 1 < values.count {
            let a = values[index], b = values[index + 1]
            bytes.append(a << 2 | b >> 4)
            if index + 2 < values.count {
                let c = values[index + 2]
                bytes.append((b & 0x0f) << 4 | c >> 2)
                if index + 3 < values.count { bytes.append((c & 0x03) << 6 | values[index + 3]) }
            }
            index += 4
        }
        return bytes
    }
}
