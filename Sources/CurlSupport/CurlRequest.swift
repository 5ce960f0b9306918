import Foundation

/// One HTTP transfer for ``CurlEngine``: what to send, where to connect, and how to trust the peer.
package struct CurlRequest: Sendable {
    package var url: String
    /// `GET`, `POST`, or any other token sent as the request method.
    package var method: String
    /// Header lines, `Name: value`.
    package var headers: [String]
    package var body: [UInt8]?
    /// A body read as the transfer goes (`CURLOPT_READFUNCTION`), for files and streams that should
    /// not be read into memory first. Wins over `body`.
    package var bodySource: (any CurlBodySource)?
    /// Whether libcurl may resolve a name itself (the system's DNS). Never, by default: every
    /// transfer is pinned (``Pinning``), and one that would need a lookup fails instead.
    package var allowsNameResolution = false
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
    /// Offers every content coding libcurl can decode (gzip, deflate, br, zstd) and hands the body
    /// over decoded, as URLSession does (`CURLOPT_ACCEPT_ENCODING ""`).
    package var decodesContent = false
    /// Fails the transfer when no byte moved for this long (URLSession's request timeout), with
    /// ``CurlError/Code/timeout``; `timeout` still bounds the whole transfer.
    package var idleTimeout: Duration?
    /// Offer HTTP/2 in TLS (ALPN); false keeps the transfer on HTTP/1.1.
    package var allowsHTTP2 = true
    /// Stop once connected (TCP, and the TLS handshake for `https`), sending no request
    /// (`CURLOPT_CONNECT_ONLY`): what a probe measures.
    package var connectOnly = false
    /// Offer application protocols in the TLS handshake (ALPN); off for a connection that carries
    /// no HTTP (DNS over TLS, ``CurlConnection``).
    package var offersALPN = true
    /// Offer `h2`, then `http/1.1`, in ALPN, set on the TLS context, with libcurl's own offer off: a
    /// connection libcurl opens (``connectOnly``) and the owner speaks HTTP/2 on itself
    /// (``CurlConnection``), reading what the server picked (``CurlConnection/negotiatedProtocol``).
    package var offersHTTP2OwnALPN = false
    /// Keep the certificate chain OpenSSL verified (``CurlConnection/certificates``), for checks
    /// beyond the CA's; connections only (``CurlConnection/open(_:http2:)``).
    package var collectsCertificates = false
    /// Open a connection of its own and close it afterwards (`CURLOPT_FRESH_CONNECT`,
    /// `CURLOPT_FORBID_REUSE`), so that what is measured is this connection and nothing is pooled.
    package var freshConnection = false

    package init(
        url: String, method: String = "GET", headers: [String] = [], body: [UInt8]? = nil,
        resolve: [String] = [], connectTo: [String] = [], timeout: Duration = .seconds(5),
        connectTimeout: Duration? = nil, trust: TLSTrust = TLSTrust(),
        maxResponseBytes: Int = 64 * 1024, protocols: String = "https"
    ) {
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

/// Receives a response as it arrives, on the engine thread: it must not block.
package protocol CurlBodySink: AnyObject, Sendable {
    /// The final response head (after any 1xx), once, before the first body byte.
    func receive(head: CurlResponseHead)
    /// Takes the next bytes, or asks libcurl to hold them (`.pause`) until the sink calls
    /// ``CurlEngine/resume(_:)``; libcurl then hands the same bytes over again.
    func write(_ bytes: UnsafeRawBufferPointer) -> CurlSinkAnswer
}

extension CurlBodySink {
    package func receive(head: CurlResponseHead) {}
}

package enum CurlSinkAnswer: Sendable {
    case accepted
    /// Hold the data: back-pressure on the connection (TCP window, HTTP/2 flow control).
    case pause
    /// Stop the transfer (reported as a protocol error).
    case abort
}

/// Supplies a request body while the transfer runs, on the engine thread: it must not block.
package protocol CurlBodySource: AnyObject, Sendable {
    /// The body's length when known up front; nil sends it chunked (HTTP/1.1) or as it comes (HTTP/2).
    var length: Int64? { get }
    /// Fills `buffer` from the start.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> CurlSourceAnswer
    /// Starts over from the first byte, when libcurl must send the body again; false if it cannot.
    func rewind() -> Bool
}

package enum CurlSourceAnswer: Sendable, Equatable {
    case bytes(Int)
    case end
    /// Nothing available yet: the source calls ``CurlEngine/resume(_:)`` when there is.
    case pause
    /// The body cannot be produced (reported as ``CurlError/Code/invalidRequest``).
    case abort
}

/// The status line and header fields of a response, known before its body.
package struct CurlResponseHead: Sendable {
    package var status: Int
    package var headers: [(name: String, value: String)]
    package var remoteIP: String?
    package var httpVersion: Int

    package init(status: Int, headers: [(name: String, value: String)], remoteIP: String?, httpVersion: Int) {
        self.status = status
        self.headers = headers
        self.remoteIP = remoteIP
        self.httpVersion = httpVersion
    }
}

/// How a transfer verifies its peer. Verification itself is never optional.
package struct TLSTrust: Sendable, Hashable {
    /// Extra trust anchors (PEM), added to the system's.
    package var caFile: String?
    /// `caFile`'s bytes, read when the trust was made: given to libcurl from memory
    /// (`CURLOPT_CAINFO_BLOB`), so that connections opened later need not read the file — a daemon
    /// that switched to `user:` may no longer be able to (a root-only file under /etc: F28). Nil when
    /// the file could not be read then (libcurl is given the path, and says what fails).
    package var caBundle: [UInt8]?
    /// The system's hashed certificate directory, kept when `caFile` is set so that the extra file
    /// adds to the system roots instead of replacing them.
    package var systemCAPath: String?
    /// `sha256//BASE64` SPKI pins (`CURLOPT_PINNEDPUBLICKEY`), `;`-separated.
    package var pinnedPublicKey: String?

    package init(
        caFile: String? = nil, pinnedPublicKey: String? = nil,
        systemCAPath: String? = "/etc/ssl/certs"
    ) {
        self.caFile = caFile
        self.caBundle = caFile.flatMap { FileManager.default.contents(atPath: $0) }.map { Array($0) }
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
    /// How long the connection's phases took.
    package var timings = CurlTimings()

    package func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.last { $0.name.lowercased() == wanted }?.value
    }
}

/// Seconds a transfer spent in each connection phase, when the phase happened on a connection of
/// its own (`CURLINFO_CONNECT_TIME`, `CURLINFO_APPCONNECT_TIME`).
package struct CurlTimings: Sendable, Hashable {
    /// From the start to the TCP connection.
    package var connect: Double?
    /// From the TCP connection to the end of the TLS handshake.
    package var handshake: Double?

    package init(connect: Double? = nil, handshake: Double? = nil) {
        self.connect = connect
        self.handshake = handshake
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
        /// The request body could not be read (a failing stream or file).
        case bodySourceFailed = "body_source_failed"
        case protocolError = "protocol_error"
    }

    package var code: Code
    package var message: String
    /// libcurl's own code, for logs only.
    package var curlCode: Int32
    /// The phases libcurl recorded before the failure (7.88 records none unless the whole
    /// connection, TLS included, was set up).
    package var timings = CurlTimings()

    package init(_ code: Code, _ message: String, curlCode: Int32 = 0) {
        self.code = code
        self.message = message
        self.curlCode = curlCode
    }

    package var description: String { message }
}
