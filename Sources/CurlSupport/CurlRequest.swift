/// One HTTP transfer for ``CurlEngine``: what to send, where to connect, and how to trust the peer.
package struct CurlRequest: Sendable {
    package var url: String
    /// `GET`, `POST`, or any other token sent as the request method.
    package var method: String
    /// Header lines, `Name: value`.
    package var headers: [String]
    package var body: [UInt8]?
    /// `CURLOPT_RESOLVE` entries, `host:port:ip[,ip]`: the URL keeps its host for SNI, Host and
    /// certificate checks while the socket goes to the given address.
    package var resolve: [String]
    /// `CURLOPT_CONNECT_TO` entries, `host:port:connect-host:connect-port`.
    package var connectTo: [String]
    /// The whole transfer's budget.
    package var timeout: Duration
    /// The connect phase's budget (TCP and TLS); the whole budget when nil.
    package var connectTimeout: Duration?
    package var trust: TLSTrust
    /// The body cap: a larger response fails with ``CurlError/Code/responseTooLarge``.
    package var maxResponseBytes: Int
    /// Protocols the transfer may use, as `CURLOPT_PROTOCOLS_STR` (`https`, or `http,https`).
    package var protocols: String
    /// Where the body goes instead of memory (a file, a stream): the response's `body` is then empty
    /// and memory stays constant whatever the size. `maxResponseBytes` still caps it.
    package var bodySink: (any CurlBodySink)?
    /// Between connection attempts of different families (`CURLOPT_HAPPY_EYEBALLS_TIMEOUT_MS`);
    /// libcurl's default (200 ms) when nil.
    package var happyEyeballsDelay: Duration?

    package init(url: String, method: String = "GET", headers: [String] = [], body: [UInt8]? = nil,
                 resolve: [String] = [], connectTo: [String] = [], timeout: Duration = .seconds(5),
                 connectTimeout: Duration? = nil, trust: TLSTrust = TLSTrust(),
                 maxResponseBytes: Int = 64 * 1024, protocols: String = "https") {
        self.url = url
        self.method = method
        self.headers = headers
        self.body = body
        self.resolve = resolve
        self.connectTo = connectTo
        self.timeout = timeout
        self.connectTimeout = connectTimeout
        self.trust = trust
        self.maxResponseBytes = maxResponseBytes
        self.protocols = protocols
    }
}

/// Receives a response body as it arrives, on the engine thread: it must not block for long.
package protocol CurlBodySink: AnyObject, Sendable {
    /// Takes the next bytes; false aborts the transfer (reported as a protocol error).
    func write(_ bytes: UnsafeRawBufferPointer) -> Bool
}

/// How a transfer verifies its peer. Verification itself is never optional.
package struct TLSTrust: Sendable, Hashable {
    /// Extra trust anchors (PEM), added to the system's.
    package var caFile: String?
    /// The system's hashed certificate directory, kept when `caFile` is set so that the extra file
    /// adds to the system roots instead of replacing them.
    package var systemCAPath: String?
    /// `sha256//BASE64` SPKI pins (`CURLOPT_PINNEDPUBLICKEY`), `;`-separated.
    package var pinnedPublicKey: String?

    package init(caFile: String? = nil, pinnedPublicKey: String? = nil,
                 systemCAPath: String? = "/etc/ssl/certs") {
        self.caFile = caFile
        self.pinnedPublicKey = pinnedPublicKey
        self.systemCAPath = systemCAPath
    }
}

/// A completed HTTP exchange.
package struct CurlResponse: Sendable {
    package var status: Int
    /// Header fields of the final response, in order, names as sent.
    package var headers: [(name: String, value: String)]
    package var body: [UInt8]
    /// The `Content-Type` value, lower-cased, parameters included.
    package var contentType: String?
    /// The address the connection went to.
    package var remoteIP: String?
    /// 1.0, 1.1, 2 or 3 as reported by libcurl (`CURLINFO_HTTP_VERSION`).
    package var httpVersion: Int
    /// Seconds from start to the end of the transfer.
    package var totalTime: Double
    /// New connections this transfer had to open (0 when it reused one).
    package var newConnections: Int

    package func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.last { $0.name.lowercased() == wanted }?.value
    }
}

/// CurlSupport's one error type: what went wrong, in terms callers map to their own codes.
package struct CurlError: Error, Sendable, CustomStringConvertible {
    package enum Code: String, Sendable {
        case connectFailed = "connect_failed"
        case timeout
        /// The peer's certificate chain does not lead to a trusted root.
        case untrustedCertificate = "untrusted_certificate"
        /// The certificate is valid but not for the requested host name.
        case nameMismatch = "name_mismatch"
        /// The SPKI pin did not match.
        case pinMismatch = "pin_mismatch"
        /// Any other TLS handshake failure.
        case tlsFailed = "tls_failed"
        case responseTooLarge = "response_too_large"
        case cancelled
        case invalidRequest = "invalid_request"
        case protocolError = "protocol_error"
    }

    package var code: Code
    package var message: String
    /// libcurl's own code, for logs only.
    package var curlCode: Int32

    package init(_ code: Code, _ message: String, curlCode: Int32 = 0) {
        self.code = code
        self.message = message
        self.curlCode = curlCode
    }

    package var description: String { message }
}
