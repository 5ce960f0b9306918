import CurlSupport
import DNSCore
import Foundation
import Synchronization

/// An RFC 8484 resolver: each query a stream on one HTTP/2 connection that a worker thread of its
/// own drives (``DoHSession`` on a ``PipelineClient``), the way DoT is driven; the shared libcurl
/// engine carries the queries of a server that does not speak HTTP/2 (RFC 8484 §5.2 only
/// recommends it).
struct DoHUpstream: MessageExchanging, SecondConnectionUpstream {
    static let contentType = DoHWire.mediaType

    let endpoint: UpstreamEndpoint
    let method: UpstreamEndpoint.DoHMethod
    let transport: HTTPTransport
    let client: PipelineClient<DoHSession>
    var flaggedAliases: (@Sendable (DomainName) -> Bool)?

    init(endpoint: UpstreamEndpoint, method: UpstreamEndpoint.DoHMethod, transport: HTTPTransport) {
        self.endpoint = endpoint
        self.method = method
        self.transport = transport
        let target = DoHSession.Target(endpoint: endpoint, method: method == .post ? .post : .get)
        let maxResponseBytes = min(transport.maxResponseBytes, DNSMessage.maxSize)
        self.client = PipelineClient(endpoint: endpoint, trust: transport.trust, threadName: "httpdns.doh", http2: true) {
            DoHSession(target: target, maxResponseBytes: maxResponseBytes)
        }
    }

    var identifier: String { endpoint.url }
    var source: Resolution.Source { .doh }

    func makeSecondConnection() -> any DNSUpstream {
        var second = DoHUpstream(endpoint: endpoint, method: method, transport: transport)
        second.flaggedAliases = flaggedAliases
        return second
    }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await lookup(question, timeout: timeout).answer
    }

    func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer {
        try await queryByExchange(question, timeout: timeout, flagging: flaggedAliases)
    }

    /// Sends a whole message and returns the response's bytes, checked only for HTTP status and
    /// content type. A message with an OPT record goes padded to a multiple of 128 bytes (RFC 8467
    /// §4.1, ``/DNSCore/EDNSPadding``).
    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        let wire = EDNSPadding.padded(query, toMultipleOf: EDNSPadding.queryBlock)
        if client.usesOwnProtocol() {
            do {
                return try await client.exchange(wire, timeout: timeout)
            } catch {
                // The query that found out the server has no HTTP/2 goes again over HTTP/1.1.
                guard !client.usesOwnProtocol() else { throw error }
            }
        }
        guard !endpoint.checksChainOnConnection else {
            // libcurl's pooled transfers do not show the chain of a reused connection: refused
            // rather than asked without the check the hashes (or the designation) promise.
            let what = endpoint.certificateHashes.isEmpty ? "the address its certificate must name (DDR)" : "its certificate hashes (a DNS stamp's)"
            throw DNSError(
                .tlsFailed,
                "\(endpoint.host) does not speak HTTP/2, and \(what) is checked on this client's own HTTP/2 connection only; refused over HTTP/1.1"
            )
        }
        return try await exchangeOverHTTP1(wire, timeout: timeout)
    }

    /// The same exchange as a libcurl transfer, for a server that refused HTTP/2.
    func exchangeOverHTTP1(_ wire: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        var request = transport.request(for: endpoint, timeout: timeout)
        request.allowsHTTP2 = false
        request.headers.append("Accept: \(Self.contentType)")
        switch method {
        case .get:
            let separator = endpoint.url.contains("?") ? "&" : "?"
            request.url = endpoint.url + separator + "dns=" + DoHWire.encodeBase64URL(wire)
        case .post:
            request.method = "POST"
            request.body = wire
            request.headers.append("Content-Type: \(Self.contentType)")
        }
        let response = try await transport.perform(request, endpoint: endpoint)
        try HTTPTransport.check(response, accepting: [Self.contentType])
        return response.body
    }
}

extension DoHSession.Target {
    /// The `:authority` and `:path` a request for `endpoint` carries, as libcurl would write them.
    init(endpoint: UpstreamEndpoint, method: Method) {
        let components = URLComponents(string: endpoint.url)
        let host = IPAddress(endpoint.host)?.urlHost ?? endpoint.host
        var path = components?.percentEncodedPath ?? "/"
        if path.isEmpty { path = "/" }
        if let query = components?.percentEncodedQuery { path += "?" + query }
        self.init(authority: Array((endpoint.port == 443 ? host : "\(host):\(endpoint.port)").utf8), path: Array(path.utf8), method: method)
    }
}

extension MessageExchanging {
    /// An address question as one whole-message exchange: a padded query with ID 0 (RFC 8484 §4.1:
    /// identical queries are identical HTTP requests; DoT puts its own ID on the wire), the answer
    /// checked for ID, question and CNAME chain; a negative answer with its zone's SOA.
    func queryByExchange(
        _ question: DNSMessage.Question, timeout: Duration, flagging: (@Sendable (DomainName) -> Bool)? = nil
    ) async throws(DNSError) -> UpstreamAnswer {
        let wire = DNSMessage.query(name: question.name, type: question.type, id: 0)
        let response = try await exchange(wire, timeout: timeout)
        return try DNSMessage.upstreamAnswer(decoding: response, to: question, id: 0, flagging: flagging)
    }
}

/// A resolver speaking the JSON API (`application/dns-json`), as Cloudflare and Google serve it.
///
/// The JSON is turned into a ``/DNSCore/DNSMessage`` and checked by the same code as wire answers: the
/// question must be echoed, the CNAME chain is followed inside the answer, and records for other
/// names are ignored.
struct JSONUpstream: DNSUpstream {
    static let contentTypes = ["application/dns-json", "application/json"]

    let endpoint: UpstreamEndpoint
    let transport: HTTPTransport
    var flaggedAliases: (@Sendable (DomainName) -> Bool)?

    var identifier: String { endpoint.url }
    var source: Resolution.Source { .json }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await lookup(question, timeout: timeout).answer
    }

    func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer {
        var request = transport.request(for: endpoint, timeout: timeout)
        let separator = endpoint.url.contains("?") ? "&" : "?"
        let name = question.name.description
        request.url = endpoint.url + separator + "name=\(name)&type=\(question.type)"
        request.headers.append("Accept: application/dns-json")
        let response = try await transport.perform(request, endpoint: endpoint)
        try HTTPTransport.check(response, accepting: Self.contentTypes)
        let message = try Self.message(fromJSON: response.body)
        let answer = try message.answer(to: question, id: 0, flagging: flaggedAliases)
        return UpstreamAnswer(answer, authority: message.negativeAuthority(for: question, answer: answer))
    }

    /// The JSON API's shape; unknown members (`Comment`, `edns_client_subnet`) are ignored.
    private struct Body: Decodable {
        struct Question: Decodable {
            var name: String
            var type: Int
        }

        struct Record: Decodable {
            var name: String
            var type: Int
            var TTL: Int
            var data: String
        }

        var Status: Int
        var Question: [Question]?
        var Answer: [Record]?
        var Authority: [Record]?
    }

    /// Decodes a JSON API body into a response message with ID 0.
    static func message(fromJSON bytes: [UInt8]) throws(DNSError) -> DNSMessage {
        func malformed(_ why: String) -> DNSError { DNSError(.malformedResponse, "JSON answer: \(why)") }
        let body: Body
        do {
            body = try JSONDecoder().decode(Body.self, from: Data(bytes))
        } catch DecodingError.dataCorrupted {
            throw malformed("not valid JSON")
        } catch {
            throw malformed("unexpected structure (\(Self.describe(error)))")
        }
        guard (0...4095).contains(body.Status) else { throw malformed("Status \(body.Status) is out of range") }
        guard let questions = body.Question else { throw malformed("missing Question") }
        var message = DNSMessage(id: 0, flags: 0x8180 | UInt16(body.Status & 0xf), questions: [])
        for entry in questions {
            guard (0...65535).contains(entry.type) else { throw malformed("question type \(entry.type)") }
            message.questions.append(.init(name: try domain(entry.name), type: RecordType(rawValue: UInt16(entry.type))))
        }
        message.answers = try records(body.Answer ?? [], section: "Answer")
        message.authorities = try records(body.Authority ?? [], section: "Authority")
        if body.Status > 15 {
            // Extended RCODEs travel in an OPT record, as on the wire.
            message.additionals = [
                .init(
                    name: .root, type: .opt, recordClass: 1232,
                    ttl: UInt32(body.Status >> 4) << 24, data: .opaque([]))
            ]
        }
        return message

        func domain(_ text: String) throws(DNSError) -> DomainName {
            do { return try DomainName(text) } catch { throw malformed("bad name '\(text)'") }
        }

        func records(_ entries: [Body.Record], section: String) throws(DNSError) -> [DNSMessage.Record] {
            var result: [DNSMessage.Record] = []
            result.reserveCapacity(entries.count)
            for entry in entries {
                guard (0...65535).contains(entry.type), entry.TTL >= 0 else {
                    throw malformed("invalid record in \(section)")
                }
                let type = RecordType(rawValue: UInt16(entry.type))
                let data: DNSMessage.RecordData
                switch type {
                case .a, .aaaa:
                    guard let ip = IPAddress(entry.data), (ip.family == .ipv4) == (type == .a) else {
                        throw malformed("\(type) record with data '\(entry.data)'")
                    }
                    data = .address(ip)
                case .cname:
                    data = .cname(try domain(entry.data))
                case .soa:
                    let fields = entry.data.split(separator: " ")
                    let numbers = fields.dropFirst(2).compactMap { UInt32($0) }
                    guard fields.count == 7, numbers.count == 5 else {
                        throw malformed("SOA record with data '\(entry.data)'")
                    }
                    data = .soa(
                        .init(
                            primary: try domain(String(fields[0])), mailbox: try domain(String(fields[1])),
                            serial: numbers[0], refresh: numbers[1], retry: numbers[2],
                            expire: numbers[3], minimum: numbers[4]))
                default:
                    data = .opaque(Array(entry.data.utf8))
                }
                result.append(
                    .init(
                        name: try domain(entry.name), type: type,
                        ttl: UInt32(min(entry.TTL, Int(Int32.max))), data: data))
            }
            return result
        }
    }

    private static func describe(_ error: Error) -> String {
        switch error {
        case let DecodingError.keyNotFound(key, _): return "missing \(key.stringValue)"
        case let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context):
            return "wrong type at \(context.codingPath.map(\.stringValue).joined(separator: "."))"
        default: return "\(error)"
        }
    }
}

/// The HTTP side shared by both transports: bootstrap pinning, trust, status and type checks.
struct HTTPTransport: Sendable {
    let engine: CurlEngine
    let trust: TLSTrust
    let maxResponseBytes: Int
    /// The bootstrap address that last worked, per resolver URL, tried first next time.
    let preferred = PreferredAddresses()

    func request(for endpoint: UpstreamEndpoint, timeout: Duration) -> CurlRequest {
        var trust = self.trust
        trust.pinnedPublicKey = endpoint.pinnedPublicKey
        return CurlRequest(
            url: endpoint.url, timeout: timeout, trust: trust,
            maxResponseBytes: maxResponseBytes, protocols: "https")
    }

    /// Sends `request` pinned to the endpoint's bootstrap addresses (``Pinning``), the one that
    /// answered last first: libcurl moves to the next address when one refuses or does not connect
    /// in its share of the time; an answer, a TLS failure or the budget running out is final.
    func perform(_ request: CurlRequest, endpoint: UpstreamEndpoint) async throws(DNSError) -> CurlResponse {
        guard !endpoint.hostIsLiteral, !endpoint.bootstrap.isEmpty else {
            return try await send(request)
        }
        let addresses = preferred.order(endpoint.bootstrap, for: endpoint.url)
        var pinned = request
        (pinned.connectTo, pinned.resolve) = Pinning.pin(host: endpoint.host, port: endpoint.port, to: addresses.map(\.urlHost))
        let response = try await send(pinned)
        if let remote = response.remoteIP.flatMap({ IPAddress($0) }) { preferred.remember(remote, for: endpoint.url) }
        return response
    }

    /// Sends `request` as it is, with libcurl's failures as ``/DNSCore/DNSError``s.
    func send(_ request: CurlRequest) async throws(DNSError) -> CurlResponse {
        do {
            return try await engine.perform(request)
        } catch let error as CurlError {
            throw DNSError(Self.code(for: error.code), error.message)
        } catch is CancellationError {
            throw DNSError(.cancelled, "cancelled")
        } catch {
            throw DNSError(.internalError, "the transfer failed: \(error)")
        }
    }

    static func check(_ response: CurlResponse, accepting types: [String]) throws(DNSError) {
        if let failure = DoHWire.failure(status: response.status, contentType: response.contentType, accepting: types) { throw failure }
    }

    static func code(for code: CurlError.Code) -> DNSError.Code {
        switch code {
        case .connectFailed: return .connectFailed
        case .timeout: return .timeout
        case .untrustedCertificate, .nameMismatch, .pinMismatch, .tlsFailed: return .tlsFailed
        case .responseTooLarge: return .responseTooLarge
        case .cancelled: return .cancelled
        case .invalidRequest, .bodySourceFailed: return .invalidConfiguration
        case .protocolError: return .malformedResponse
        }
    }
}

/// Remembers which bootstrap address of each resolver answered last.
final class PreferredAddresses: Sendable {
    private let lastGood = Mutex<[String: IPAddress]>([:])

    func order(_ addresses: [IPAddress], for url: String) -> [IPAddress] {
        guard let good = lastGood.withLock({ $0[url] }), let index = addresses.firstIndex(of: good), index > 0 else {
            return addresses
        }
        var ordered = addresses
        ordered.swapAt(0, index)
        return ordered
    }

    func remember(_ address: IPAddress, for url: String) {
        lastGood.withLock { $0[url] = address }
    }
}
