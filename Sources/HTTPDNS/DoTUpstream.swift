import CurlSupport
import DNSCore
import Foundation

/// An RFC 7858 resolver: DNS messages, each after its 2-byte length, over one TLS connection.
///
/// Queries are pipelined on the connection and answers matched by ID, in whatever order they
/// come (RFC 7766 §6.2.1.1), on a ``PipelineClient``: the connection is opened by libcurl with the
/// same trust, SPKI pins and bootstrap pinning as every DoH transfer (``CurlConnection``), so
/// `import HTTPDNS` stays free of NIO, and it is kept while queries keep coming.
struct DoTUpstream: MessageExchanging, SecondConnectionUpstream {
    let endpoint: UpstreamEndpoint
    let client: PipelineClient<DoTFraming>
    var flaggedAliases: (@Sendable (DomainName) -> Bool)?

    init(endpoint: UpstreamEndpoint, trust: TLSTrust) {
        self.endpoint = endpoint
        self.client = PipelineClient(endpoint: endpoint, trust: trust, threadName: "httpdns.dot", http2: false) { DoTFraming() }
    }

    var identifier: String { endpoint.url }
    var source: Resolution.Source { .dot }

    func makeSecondConnection() -> any DNSUpstream {
        var second = DoTUpstream(endpoint: endpoint, trust: client.trust)
        second.flaggedAliases = flaggedAliases
        return second
    }

    func query(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> AddressAnswer {
        try await lookup(question, timeout: timeout).answer
    }

    func lookup(_ question: DNSMessage.Question, timeout: Duration) async throws(DNSError) -> UpstreamAnswer {
        try await queryByExchange(question, timeout: timeout, flagging: flaggedAliases)
    }

    /// Sends a whole message and returns the response's bytes with the query's ID; the ID on the
    /// wire is the connection's own. A message with an OPT record goes padded to a multiple of 128
    /// bytes (RFC 8467 §4.1, ``/DNSCore/EDNSPadding``).
    func exchange(_ query: [UInt8], timeout: Duration) async throws(DNSError) -> [UInt8] {
        try await client.exchange(EDNSPadding.padded(query, toMultipleOf: EDNSPadding.queryBlock), timeout: timeout)
    }
}

/// RFC 7858 on the wire: each message after its 2-byte length, with an ID of the connection's own so
/// that answers are matched in whatever order they come.
struct DoTFraming: PipelineFraming {
    /// Queries in flight on one connection; more wait their turn (unbound's and BIND's limits for a
    /// client's pipeline are in the hundreds).
    static let maxInFlight = 128
    static var rewritesIDs: Bool { true }

    var capacity: Int { Self.maxInFlight }
    var isDraining: Bool { false }

    /// The next ID to try: drawn at random when the connection starts, then counted up. Inside TLS
    /// an ID only has to be unique among the queries whose answers may still come (`isTaken`); a
    /// random draw per query cost a `getrandom(2)` each.
    var nextID = UInt16.random(in: 0...UInt16.max)

    func start(into output: inout [UInt8]) {}

    mutating func send(_ query: [UInt8], into output: inout [UInt8], isTaken: (UInt32) -> Bool) -> UInt32 {
        var id = nextID
        while isTaken(UInt32(id)) { id &+= 1 }
        nextID = id &+ 1
        let length = query.count
        output.append(UInt8(length >> 8))
        output.append(UInt8(length & 0xff))
        output.append(UInt8(id >> 8))
        output.append(UInt8(id & 0xff))
        output.append(contentsOf: query[2...])
        return UInt32(id)
    }

    func abandon(_ key: UInt32, into output: inout [UInt8]) {}

    func receive(_ input: inout [UInt8], into output: inout [UInt8], events: inout [PipelineEvent]) {
        var start = 0
        defer { input.removeFirst(start) }
        while input.count - start >= 2 {
            let length = Int(input[start]) << 8 | Int(input[start + 1])
            guard length >= 12 else {
                events.append(.broken(DNSError(.malformedResponse, "a \(length)-byte message is not a DNS response")))
                start = input.count
                return
            }
            guard input.count - start - 2 >= length else { break }
            let message = Array(input[start + 2..<start + 2 + length])
            start += 2 + length
            events.append(.answer(UInt32(message[0]) << 8 | UInt32(message[1]), message))
        }
    }
}
