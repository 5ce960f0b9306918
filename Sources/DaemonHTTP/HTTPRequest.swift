import NIOCore
import NIOHPACK
import NIOHTTP1

/// The fields of a request as its HTTP version delivered them (no copy into a common form).
package enum RequestFields: Sendable {
    case http1(HTTPHeaders)
    case http2(HPACKHeaders)

    package func first(_ name: String) -> String? {
        switch self {
        case .http1(let headers): headers.first(name: name)
        case .http2(let headers): headers.first(name: name)
        }
    }
}

/// A complete request from either HTTP version.
package struct HTTPRequest: Sendable {
    package var method: String
    package var target: String
    package var scheme: String?
    package var authority: String?
    package var fields: RequestFields
    package var body: ByteBuffer?
    package var contentLength: Int?
    /// The client a trusted proxy's PROXY v2 header named for this connection; nil when there was
    /// none (the connection's peer is the client).
    package var proxiedClient: SocketAddress?

    package init(
        method: String, target: String, scheme: String?, authority: String?, fields: RequestFields, body: ByteBuffer?, contentLength: Int?
    ) {
        self.method = method
        self.target = target
        self.scheme = scheme
        self.authority = authority
        self.fields = fields
        self.body = body
        self.contentLength = contentLength
    }
}
