import DNSCore

/// How queries and answers travel on one connection of a ``PipelineClient``: the part that DNS over
/// TLS (RFC 7858, ``DoTFraming``) and DNS over HTTP/2 (RFC 8484, ``DoHSession``) do not share. Pure:
/// bytes and queries in, bytes and events out; one value per connection.
protocol PipelineFraming: Sendable {
    /// Queries that may be in flight on the connection now (0 once it takes no more).
    var capacity: Int { get }
    /// The connection takes no more queries (GOAWAY, stream IDs spent): it is closed once what is
    /// in flight is answered, and a new one carries the rest.
    var isDraining: Bool { get }
    /// Whether the answers come back with the connection's own IDs, to be replaced by the query's
    /// (DoT), or as the server wrote them (DoH: the query went out as it was).
    static var rewritesIDs: Bool { get }
    /// The bytes a new connection starts with.
    mutating func start(into output: inout [UInt8])
    /// Writes `query` and returns the key its answer comes back under; `isTaken` tells which keys
    /// are in flight.
    mutating func send(_ query: [UInt8], into output: inout [UInt8], isTaken: (UInt32) -> Bool) -> UInt32
    /// Gives up the query under `key` (its deadline passed): HTTP/2 resets its stream.
    mutating func abandon(_ key: UInt32, into output: inout [UInt8])
    /// Consumes what can be read of `input`; what it carries goes to `events`, what must be answered
    /// at once (acknowledgements, window updates) to `output`.
    mutating func receive(_ input: inout [UInt8], into output: inout [UInt8], events: inout [PipelineEvent])
}

enum PipelineEvent: Equatable {
    /// The answer to the query sent under the key.
    case answer(UInt32, [UInt8])
    /// The query under the key failed, and sending it again would fail the same way.
    case failed(UInt32, DNSError)
    /// The server did not process the query under the key (REFUSED_STREAM, past a GOAWAY's last
    /// stream): it goes out again.
    case unprocessed(UInt32)
    /// A query given up on under the key (``PipelineFraming/abandon(_:into:)``) has come to its
    /// end on the wire: a late answer, or the server's reset. Nobody waits for it; it counts as an
    /// answer for the bytes a connection may send without one.
    case late(UInt32)
    /// The connection broke its protocol: every query on it fails with the error.
    case broken(DNSError)
    /// The server does not speak the protocol on this connection (an HTTP/1.1-only server): every
    /// query fails, and the client says so for a while (``PipelineClient/noteProtocolRefused(at:)``).
    case refused(DNSError)
}
