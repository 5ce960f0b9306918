import NIOCore

/// What the HTTP listeners serve: all they see of whatever answers requests (the daemon's
/// `RequestGateway`). The connection handlers parse, bound and time requests; deciding what a
/// request may do and what it is answered is the handling's, and so is counting.
package protocol HTTPRequestHandling: Sendable {
    /// The refusal of a request head before its body is read (HTTP/1.1 reads bodies only of requests
    /// that may go on), or nil.
    func refusal(method: String, target: String, contentLength: Int?, authorization: String?) -> HTTPAnswer?

    /// The answer to a complete request: at once, or later on `channel`'s event loop.
    func respond(to request: HTTPRequest, on channel: any Channel) -> HTTPReply

    /// Records an answer a connection handler gave itself (an early 413, a 408).
    func recordEarly(_ answer: HTTPAnswer, target: String, method: String)

    /// A connection ended by the listener: `reason` is `limit`, `timeout` or `error`.
    func connectionRejected(reason: String)

    /// The number of connections the listener holds open, after each change.
    func connectionsOpen(_ count: Int)
}

/// An answer now, or one that will come on the connection's event loop.
package enum HTTPReply {
    case ready(HTTPAnswer)
    case pending(EventLoopFuture<HTTPAnswer>)
}
