import NIOCore

/// An HTTP answer as both HTTP versions write it: status, fields, a whole body.
package struct HTTPAnswer: Sendable {
    package var status: Int
    package var headers: [(String, String)]
    package var body: ByteBuffer

    package init(status: Int, headers: [(String, String)], body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    package static func text(_ status: Int, _ message: String, headers: [(String, String)] = []) -> HTTPAnswer {
        HTTPAnswer(status: status, headers: [("content-type", "text/plain; charset=utf-8")] + headers, body: ByteBuffer(string: message))
    }

    /// The 413's words, the same from the policy and from both HTTP versions.
    package static func bodyOverLimit(declared: Int?, limit: Int) -> String {
        "the body\(declared.map { " (\($0) bytes)" } ?? "") is over the limit of \(limit) bytes\n"
    }

    /// The 408's words, the same from both HTTP versions.
    package static func incompleteRequest(within timeout: TimeAmount) -> String {
        "the request was not complete within \(timeout.nanoseconds / 1_000_000_000) s\n"
    }
}
