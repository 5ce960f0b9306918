import DNSCore
import HTTPDNS

/// RFC 8484 answers from the engine: the wire side of `/dns-query` (and of a DNS stub).
public enum DoHAnswering {
    /// The largest DNS message accepted (RFC 8484 §6: a DoH message is at most 65,535 octets).
    public static let maxMessageBytes = 65_535

    public enum Failure: Error, Equatable {
        /// Not a DNS query: malformed, a response, not exactly one question. HTTP 400.
        case malformed(String)
    }

    /// Answers `query` (wire bytes). A and AAAA come from the engine, with the remaining TTL and
    /// the CNAME to the canonical name; NXDOMAIN and NODATA as such; upstream failures as SERVFAIL;
    /// other types forwarded as they are to the trusted DoH upstreams, their response returned as it
    /// came but for the ID (SERVFAIL when no upstream answered, NOTIMP with only JSON upstreams).
    /// Returns the response and its smallest TTL.
    public static func answer(_ query: [UInt8], resolver: HTTPDNSResolver,
                              now: ContinuousClock.Instant = .now) async throws(Failure) -> (response: [UInt8], minTTL: UInt32) {
        let message: DNSMessage
        do { message = try DNSMessage(decoding: query) } catch { throw .malformed("not a DNS message: \(error)") }
        guard !message.isResponse, message.opcode == 0 else { throw .malformed("not a standard query") }
        guard message.questions.count == 1, let question = message.questions.first else {
            throw .malformed("a query must have exactly one question, not \(message.questions.count)")
        }
        // QR, RD copied, RA.
        var flags: UInt16 = 0x8000 | (message.flags & 0x0100) | 0x0080
        var answers: [DNSMessage.Record] = []
        var negativeTTL: UInt32 = 0
        let addressType: AddressQuery? = question.recordClass == DNSMessage.classIN
            ? (question.type == .a ? .a : question.type == .aaaa ? .aaaa : nil) : nil
        guard let addressType else {
            return await forward(query, message: message, resolver: resolver)
        }
        do {
            let resolution = try await resolver.resolve(question.name.description, type: addressType)
            let remaining = max(0, (resolution.expiresAt - now).components.seconds)
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
        } catch {
            switch error.code {
            case .nxdomain: flags |= 3
            case .nodata: break
            case .invalidName: flags |= 1  // FORMERR
            case .rejectedPrivate: flags |= 5  // REFUSED: the rebinding guard dropped every answer
            default: flags |= 2  // SERVFAIL
            }
            // The engine keeps the zone's SOA to itself: a negative answer goes without one, and
            // HTTP caches get the configured negative TTL.
            if error.code == .nxdomain || error.code == .nodata {
                negativeTTL = UInt32(clamping: resolver.options.negativeTTL.components.seconds)
            }
        }
        let response = DNSMessage(id: message.id, flags: flags, questions: [question], answers: answers)
        return (response.encode(), answers.map(\.ttl).min() ?? negativeTTL)
    }

    static func forward(_ query: [UInt8], message: DNSMessage, resolver: HTTPDNSResolver) async -> (response: [UInt8], minTTL: UInt32) {
        var flags: UInt16 = 0x8000 | (message.flags & 0x0100) | 0x0080
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
