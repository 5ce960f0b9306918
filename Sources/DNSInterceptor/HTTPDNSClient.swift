import AddressProbing
import CurlSupport
import DNSCore
import Foundation
import HTTPDNS

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An HTTP client whose host names are resolved through ``/HTTPDNS/HTTPDNSResolver`` and never the system's DNS.
///
/// The URL keeps its host name; only the socket goes to the resolved addresses (`Pinning`:
/// libcurl's `CURLOPT_CONNECT_TO` to a name standing for them), so TLS SNI, the `Host` header and certificate validation all use the
/// original name. A certificate for another name, or from an unknown CA, fails the request before
/// any byte of the body reaches the caller.
///
/// ```swift
/// let client = HTTPDNSClient(resolver: resolver)
/// let (data, response) = try await client.data(for: URLRequest(url: URL(string: "https://api.example.com/v1")!))
/// ```
///
/// All requests share the process's one libcurl engine with the resolver's own DoH queries, so
/// connections (HTTP/2, keep-alive) are reused across requests.
public final class HTTPDNSClient: Sendable {
    /// How the client connects, follows redirects and keeps bodies; every default is URLSession's
    /// behaviour where it has one.
    public struct Options: Sendable {
        /// Extra trust anchors (PEM) for origins, added to the system's. Default: none.
        public var caFile: String?
        /// Follow 301/302/303/307/308 redirects, resolving each new host through HTTPDNS. Default true.
        public var followRedirects = true
        /// Redirects followed at most before failing with `URLError.httpTooManyRedirects`. Default 20.
        public var maxRedirects = 20
        /// The budget of one hop (connect, request, response) when the request has no timeout
        /// interval of its own. Default 60 s.
        public var timeout: Duration = .seconds(60)
        /// Between connection attempts to a host's addresses of different families (RFC 8305
        /// Happy Eyeballs). Default 250 ms.
        public var happyEyeballsDelay: Duration = .milliseconds(250)
        /// The cap on a body kept in memory (``HTTPDNSClient/data(for:)``). Default 100 MiB;
        /// downloads to a file have no cap.
        public var maxBodyBytes = 100 * 1024 * 1024
        /// Offer gzip, deflate, br and zstd and hand bodies over decoded, as URLSession does. Default true.
        public var decodesContent = true
        /// Cookies sent from and stored into this storage when a request's `httpShouldHandleCookies`
        /// is true. Default none: no cookies are sent or kept.
        public nonisolated(unsafe) var cookieStorage: HTTPCookieStorage?
        /// Orders each host's addresses by measured connect latency before connecting, healthy ones
        /// first (measurements are remembered per the ranker's `memory`). Default none: the
        /// resolver's order, families interleaved (RFC 8305).
        public var ranker: AddressRanker?
        /// The address families connected to: `.a` IPv4 only, `.aaaa` IPv6 only (like curl's `-4`
        /// and `-6`), `.both` either (the default).
        public var addressFamilies: AddressQuery = .both

        public init() {}
    }

    public let resolver: HTTPDNSResolver
    public let options: Options

    /// A client that resolves every origin (and every redirect's) through `resolver`.
    public init(resolver: HTTPDNSResolver, options: Options = Options()) {
        self.resolver = resolver
        self.options = options
    }

    /// Sends `request` and returns the body and response, like `URLSession.data(for:)`.
    /// - Throws: `URLError` (see ``HTTPDNSClientError`` for the reason it carries).
    public func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        let exchange = try await send(request)
        return (exchange.body, exchange.response)
    }

    /// Sends `request` and tells everything about the exchange: the final response, the address
    /// used, the resolution behind it, the redirects followed. A body stream
    /// (`httpBodyStream`) is sent as it is read, never held whole.
    public func send(_ request: URLRequest) async throws -> HTTPDNSExchange {
        try await exchange(request, body: RequestBody(request), sinkPath: nil, context: CallContext())
    }

    /// Sends `request` with the file at `file` as its body, read from disk as it is sent
    /// (constant memory whatever its size; `Content-Length` is the file's size).
    /// With `path`, the response body goes to that file as in ``download(_:to:)``.
    public func upload(_ request: URLRequest, fromFile file: URL, downloadTo path: String? = nil) async throws -> HTTPDNSExchange {
        try await exchange(request, body: .file(file), sinkPath: path, context: CallContext())
    }

    /// Sends `request`, writing the body to the file at `path` as it arrives (constant memory).
    /// The file is created or truncated; on failure it may hold a partial body.
    public func download(_ request: URLRequest, to path: String) async throws -> HTTPDNSExchange {
        try await exchange(request, body: RequestBody(request), sinkPath: path, context: CallContext())
    }

    /// Sends `request` and returns as soon as the final response head has arrived; the body is
    /// read from the returned stream as it comes, with back-pressure: when the reader falls
    /// behind by `bufferLimit` bytes the transfer pauses, so memory stays bounded whatever the size.
    ///
    /// ```swift
    /// let stream = try await client.stream(for: request)
    /// for try await chunk in stream { try handle.write(contentsOf: chunk) }
    /// ```
    public func stream(for request: URLRequest, bufferLimit: Int = 1 << 20) async throws -> HTTPDNSResponseStream {
        try await openStream(request, body: RequestBody(request), context: CallContext(), bufferLimit: bufferLimit)
    }

    // MARK: The exchange

    /// What a caller such as the URLProtocol adds to a request: its session's settings.
    struct CallContext: @unchecked Sendable {
        // Safety: HTTPCookieStorage is thread-safe (it locks internally), as URLSession relies on.
        /// Overrides ``Options/cookieStorage`` when set.
        var cookieStorage: HTTPCookieStorage?
        /// Header fields sent when the request has none of that name (`httpAdditionalHeaders`).
        var additionalHeaders: [String: String] = [:]
        /// Overrides the per-request timeout (the whole transfer's budget).
        var timeout: Duration?
        /// Fails a transfer idle for this long.
        var idleTimeout: Duration?
    }

    func exchange(_ original: URLRequest, body: RequestBody, sinkPath: String?, context: CallContext) async throws -> HTTPDNSExchange {
        try await followingRedirects(original, body: body, context: context) { request, url, body in
            let hop = try await perform(request, url: url, body: body, sinkPath: sinkPath, context: context)
            return (
                hop.response,
                { redirects in
                    HTTPDNSExchange(
                        response: hop.response, body: hop.body, remoteAddress: hop.remoteAddress,
                        resolution: hop.resolution, httpVersion: hop.httpVersion, redirects: redirects)
                }, {}
            )
        }
    }

    func openStream(_ original: URLRequest, body: RequestBody, context: CallContext, bufferLimit: Int = 1 << 20) async throws -> HTTPDNSResponseStream
    {
        try await followingRedirects(original, body: body, context: context) { request, url, body in
            let prepared = try await prepare(request, url: url, body: body, context: context, sink: false)
            let stream = CurlEngine.shared.stream(prepared.curl, bufferLimit: bufferLimit)
            let head: CurlResponseHead
            do throws(CurlError) {
                head = try await stream.head()
            } catch {
                prepared.source?.cancel()
                throw Self.error(for: error, url: url, host: prepared.host)
            }
            let response = try Self.response(
                url: url, status: head.status, headers: head.headers,
                version: head.httpVersion, host: prepared.host)
            return (
                response,
                { redirects in
                    HTTPDNSResponseStream(
                        response: response, remoteAddress: head.remoteIP, resolution: prepared.resolution,
                        httpVersion: head.httpVersion, redirects: redirects, stream: stream,
                        source: prepared.source, host: prepared.host)
                },
                {
                    // A redirect's own body is small; past 64 KiB the connection is not worth keeping.
                    var drained = 0
                    while drained < 64 * 1024, let bytes = try? await stream.next() { drained += bytes.count }
                    stream.cancel()
                    prepared.source?.cancel()
                }
            )
        }
    }

    /// One hop's outcome: its response, how to finish with it (given the redirects followed so
    /// far), and how to drop it when it redirects.
    private typealias HopOutcome<Final> = (response: HTTPURLResponse, finish: ([URL]) -> Final, discard: () async -> Void)

    /// Runs `hop` for the request and for every redirect it leads to, storing cookies on the way.
    private func followingRedirects<Final>(
        _ original: URLRequest, body: RequestBody, context: CallContext,
        hop: (URLRequest, URL, RequestBody) async throws -> HopOutcome<Final>
    ) async throws -> Final {
        guard let firstURL = original.url else { throw URLError(.badURL) }
        var request = original
        var body = body
        var redirects: [URL] = []
        while true {
            let url = try Self.validated(request.url ?? firstURL)
            let outcome = try await hop(request, url, body)
            storeCookies(outcome.response, for: request, url: url, context: context)
            guard let next = try nextHop(after: request, url: url, response: outcome.response, body: body, redirects: &redirects) else {
                return outcome.finish(redirects)
            }
            await outcome.discard()
            (request, body) = next
        }
    }

    /// The request and body of the redirect `response` asks for, or nil when it is final.
    private func nextHop(
        after request: URLRequest, url: URL, response: HTTPURLResponse, body: RequestBody,
        redirects: inout [URL]
    ) throws -> (URLRequest, RequestBody)? {
        guard options.followRedirects, let (next, keepsBody) = Self.redirect(from: request, url: url, response: response) else {
            return nil
        }
        redirects.append(url)
        guard redirects.count <= options.maxRedirects else {
            throw Self.error(
                .httpTooManyRedirects, url,
                HTTPDNSClientError(.tooManyRedirects, "more than \(options.maxRedirects) redirects, last to \(next.url!.absoluteString)"))
        }
        guard keepsBody else { return (next, .none) }
        if case .stream = body {
            // Apple's URLSession asks its delegate for a new stream here; a stream read once cannot be resent.
            throw Self.error(
                .requestBodyStreamExhausted, url,
                HTTPDNSClientError(
                    .bodySource, "a \(response.statusCode) redirect needs the body again, and a body stream is read once; send Data or a file"))
        }
        return (next, body)
    }

    private struct Hop {
        var response: HTTPURLResponse
        var body: Data
        var remoteAddress: String?
        var resolution: Resolution?
        var httpVersion: Int
    }

    private struct PreparedHop {
        var curl: CurlRequest
        var resolution: Resolution?
        var host: String
        var source: StreamBodySource?
    }

    private func perform(_ request: URLRequest, url: URL, body: RequestBody, sinkPath: String?, context: CallContext) async throws -> Hop {
        var prepared = try await prepare(request, url: url, body: body, context: context, sink: sinkPath != nil)
        defer { prepared.source?.cancel() }
        let sink: FileSink?
        if let sinkPath {
            guard let opened = FileSink(path: sinkPath) else {
                throw Self.error(.cannotCreateFile, url, HTTPDNSClientError(.io, "cannot write '\(sinkPath)'"))
            }
            sink = opened
            prepared.curl.bodySink = opened
        } else {
            sink = nil
        }
        let response: CurlResponse
        do {
            response = try await CurlEngine.shared.perform(prepared.curl)
        } catch let error as CurlError {
            throw Self.error(for: error, url: url, host: prepared.host)
        }
        try sink?.close()
        let http = try Self.response(
            url: url, status: response.status, headers: response.headers,
            version: response.httpVersion, host: prepared.host)
        return Hop(
            response: http, body: Data(response.body), remoteAddress: response.remoteIP,
            resolution: prepared.resolution, httpVersion: response.httpVersion)
    }

    /// Resolves the host and builds the transfer: the URL unchanged, the socket pinned to the
    /// resolved addresses.
    private func prepare(_ request: URLRequest, url: URL, body: RequestBody, context: CallContext, sink: Bool) async throws -> PreparedHop {
        let host = url.host ?? ""
        let port = url.port ?? (url.scheme?.lowercased() == "http" ? 80 : 443)
        let bareHost = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        let headers = try headers(for: request, url: url, context: context)
        var resolution: Resolution?
        var pin: (connectTo: [String], resolve: [String]) = ([], [])
        // An IP literal (an IPv6 one possibly with a zone, `fe80::1%eth0`) is connected to as it is.
        if let literal = IPAddress(bareHost.split(separator: "%", maxSplits: 1).first.map(String.init) ?? bareHost) {
            let wanted: IPAddress.Family? = options.addressFamilies == .a ? .ipv4 : options.addressFamilies == .aaaa ? .ipv6 : nil
            if let wanted, literal.family != wanted {
                throw Self.error(
                    .cannotFindHost, url,
                    HTTPDNSClientError(.resolution, "\(bareHost) is an \(literal.family.rawValue) address and only \(wanted.rawValue) is allowed"))
            }
        } else {
            do {
                let resolved = try await resolver.resolve(bareHost, type: options.addressFamilies)
                resolution = resolved
                var order = Self.interleaved(resolved.addresses).map(\.ip)
                if let ranker = options.ranker {
                    order = await ranker.rank(order, host: bareHost, port: port).map(\.ip)
                }
                pin = Pinning.pin(host: bareHost, port: port, to: order.map(\.urlHost))
            } catch {
                throw Self.error(
                    .cannotFindHost, url,
                    HTTPDNSClientError(.resolution, "cannot resolve \(bareHost): \(error.message)", dnsCode: error.code.rawValue))
            }
        }
        let method = request.httpMethod ?? "GET"
        guard Self.isValidMethod(method) else {
            throw Self.error(.badURL, url, HTTPDNSClientError(.invalidRequest, "the method '\(method)' is not an HTTP token"))
        }
        var curl = CurlRequest(
            url: url.absoluteString, method: method, headers: headers,
            resolve: pin.resolve, connectTo: pin.connectTo, timeout: context.timeout ?? timeout(for: request),
            trust: TLSTrust(caFile: options.caFile),
            maxResponseBytes: sink ? Int.max : options.maxBodyBytes, protocols: "http,https")
        curl.happyEyeballsDelay = options.happyEyeballsDelay
        curl.idleTimeout = context.idleTimeout
        if let idle = context.idleTimeout { curl.connectTimeout = idle }
        curl.decodesContent = options.decodesContent
        var streamSource: StreamBodySource?
        switch body {
        case .none: break
        case .data(let bytes): curl.body = bytes
        case .file(let file):
            guard let source = FileBodySource(path: file.path) else {
                throw Self.error(.fileDoesNotExist, url, HTTPDNSClientError(.bodySource, "cannot read the body file '\(file.path)'"))
            }
            curl.bodySource = source
        case .stream(let stream):
            let source = StreamBodySource(stream, engine: .shared)
            curl.bodySource = source
            streamSource = source
        }
        return PreparedHop(curl: curl, resolution: resolution, host: bareHost, source: streamSource)
    }

    static func response(url: URL, status: Int, headers: [(name: String, value: String)], version: Int, host: String) throws -> HTTPURLResponse {
        var fields: [String: String] = [:]
        for (name, value) in headers {
            fields[name] = fields[name].map { "\($0), \(value)" } ?? value
        }
        let versionText = version == 20 ? "HTTP/2" : version == 10 ? "HTTP/1.0" : "HTTP/1.1"
        guard let http = HTTPURLResponse(url: url, statusCode: status, httpVersion: versionText, headerFields: fields) else {
            throw error(.badServerResponse, url, HTTPDNSClientError(.protocolError, "unusable response from \(host)"))
        }
        return http
    }

    /// RFC 8305 §4: alternate the families, starting with the resolver's preferred one.
    static func interleaved(_ addresses: [ResolvedAddress]) -> [ResolvedAddress] {
        guard let first = addresses.first else { return [] }
        let preferred = addresses.filter { $0.ip.family == first.ip.family }
        let other = addresses.filter { $0.ip.family != first.ip.family }
        var result: [ResolvedAddress] = []
        for index in 0..<max(preferred.count, other.count) {
            if index < preferred.count { result.append(preferred[index]) }
            if index < other.count { result.append(other[index]) }
        }
        return result
    }

    private func timeout(for request: URLRequest) -> Duration {
        // URLRequest's default interval is 60 s; an explicit one wins over the client's default.
        request.timeoutInterval > 0 && request.timeoutInterval != 60
            ? .milliseconds(Int64(request.timeoutInterval * 1000)) : options.timeout
    }

    private func headers(for request: URLRequest, url: URL, context: CallContext) throws -> [String] {
        var lines: [String] = []
        var fields = request.allHTTPHeaderFields ?? [:]
        let present = Set(fields.keys.map { $0.lowercased() })
        for (name, value) in context.additionalHeaders where !present.contains(name.lowercased()) { fields[name] = value }
        var explicitCookie: String?
        for (name, value) in fields {
            // A line break in a field would let a caller's data inject headers or a second request.
            guard !name.isEmpty, !(name + value).utf8.contains(where: { $0 == 0x0d || $0 == 0x0a }) else {
                throw Self.error(.badURL, url, HTTPDNSClientError(.invalidRequest, "header '\(name)' is empty or contains a line break"))
            }
            if name.lowercased() == "cookie" {
                explicitCookie = value
                continue
            }
            lines.append("\(name): \(value)")
        }
        // The caller's own Cookie header is sent, with the stored cookies for the URL after it.
        var cookie = explicitCookie
        if let storage = context.cookieStorage ?? options.cookieStorage, request.httpShouldHandleCookies,
            let cookies = storage.cookies(for: url), !cookies.isEmpty,
            let header = HTTPCookie.requestHeaderFields(with: cookies)["Cookie"]
        {
            cookie = cookie.map { "\($0); \(header)" } ?? header
        }
        if let cookie { lines.append("Cookie: \(cookie)") }
        // No "Expect: 100-continue" round trip before a body.
        lines.append("Expect:")
        return lines
    }

    private func storeCookies(_ response: HTTPURLResponse, for request: URLRequest, url: URL, context: CallContext) {
        guard request.httpShouldHandleCookies, let storage = context.cookieStorage ?? options.cookieStorage else { return }
        var fields: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name] = value }
        }
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: fields, for: url)
        if !cookies.isEmpty { storage.setCookies(cookies, for: url, mainDocumentURL: nil) }
    }

    static func validated(_ url: URL) throws -> URL {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw error(
                .unsupportedURL, url, HTTPDNSClientError(.invalidRequest, "only http and https URLs are supported, not '\(url.absoluteString)'"))
        }
        guard let host = url.host, !host.isEmpty else {
            throw error(.badURL, url, HTTPDNSClientError(.invalidRequest, "'\(url.absoluteString)' has no host"))
        }
        if let port = url.port, !(1...65535).contains(port) {
            throw error(.badURL, url, HTTPDNSClientError(.invalidRequest, "port \(port) of '\(url.absoluteString)' is not in 1...65535"))
        }
        return url
    }

    /// Whether `method` is an HTTP method token (RFC 9110 §9.1): no space, CR or LF can reach the
    /// request line.
    public static func isValidMethod(_ method: String) -> Bool {
        !method.isEmpty
            && method.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
                default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
            }
    }

    /// The origin of a URL (RFC 6454): scheme, host and port, the default port filled in.
    static func origin(of url: URL) -> (scheme: String, host: String, port: Int) {
        let scheme = url.scheme?.lowercased() ?? ""
        return (scheme, url.host?.lowercased() ?? "", url.port ?? (scheme == "http" ? 80 : 443))
    }

    /// The next request of a redirect, with the method and body rules of RFC 9110 §15.4 as browsers
    /// and URLSession apply them; nil when `response` is not a redirect to follow.
    static func redirect(from request: URLRequest, url: URL, response: HTTPURLResponse) -> (request: URLRequest, keepsBody: Bool)? {
        let status = response.statusCode
        guard [301, 302, 303, 307, 308].contains(status),
            let location = response.value(forHTTPHeaderField: "Location"),
            let target = URL(string: location, relativeTo: url)?.absoluteURL,
            let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https"
        else { return nil }
        var next = request
        next.url = target
        let method = (request.httpMethod ?? "GET").uppercased()
        var keepsBody = true
        if (status == 303 && method != "HEAD") || ((status == 301 || status == 302) && method == "POST") {
            keepsBody = false
            next.httpMethod = "GET"
            next.httpBody = nil
            next.httpBodyStream = nil
            next.setValue(nil, forHTTPHeaderField: "Content-Type")
            next.setValue(nil, forHTTPHeaderField: "Content-Length")
        }
        if origin(of: target) != origin(of: url) {
            // Credentials for one origin are not sent to another: another host, another port, or
            // https to http, where they would cross the network in clear (as curl does since
            // CVE-2022-27776).
            next.setValue(nil, forHTTPHeaderField: "Authorization")
            next.setValue(nil, forHTTPHeaderField: "Cookie")
            next.setValue(nil, forHTTPHeaderField: "Proxy-Authorization")
        }
        return (next, keepsBody)
    }

    // MARK: Errors

    static func error(_ code: URLError.Code, _ url: URL, _ reason: HTTPDNSClientError) -> URLError {
        URLError(
            code,
            userInfo: [
                NSLocalizedDescriptionKey: reason.message, NSUnderlyingErrorKey: reason,
                NSURLErrorFailingURLErrorKey: url,
            ])
    }

    static func error(for error: CurlError, url: URL, host: String) -> URLError {
        switch error.code {
        case .untrustedCertificate:
            return Self.error(
                .serverCertificateHasUnknownRoot, url,
                HTTPDNSClientError(.untrustedCertificate, "\(host): certificate not trusted: \(error.message)"))
        case .nameMismatch:
            return Self.error(
                .serverCertificateUntrusted, url,
                HTTPDNSClientError(.nameMismatch, "\(host): the certificate is not valid for \(host): \(error.message)"))
        case .pinMismatch:
            return Self.error(.serverCertificateUntrusted, url, HTTPDNSClientError(.tlsFailed, "\(host): public key pin mismatch"))
        case .tlsFailed:
            return Self.error(.secureConnectionFailed, url, HTTPDNSClientError(.tlsFailed, "\(host): TLS handshake failed: \(error.message)"))
        case .connectFailed:
            return Self.error(.cannotConnectToHost, url, HTTPDNSClientError(.connectFailed, "\(host): cannot connect: \(error.message)"))
        case .timeout:
            return Self.error(.timedOut, url, HTTPDNSClientError(.timeout, "\(host): timed out: \(error.message)"))
        case .cancelled:
            return Self.error(.cancelled, url, HTTPDNSClientError(.cancelled, "the request to \(host) was cancelled"))
        case .responseTooLarge:
            return Self.error(.dataLengthExceedsMaximum, url, HTTPDNSClientError(.protocolError, "\(host): \(error.message)"))
        case .invalidRequest:
            return Self.error(.badURL, url, HTTPDNSClientError(.invalidRequest, error.message))
        case .bodySourceFailed:
            return Self.error(.requestBodyStreamExhausted, url, HTTPDNSClientError(.bodySource, "\(host): \(error.message)"))
        case .protocolError:
            return Self.error(.networkConnectionLost, url, HTTPDNSClientError(.protocolError, "\(host): \(error.message)"))
        }
    }
}

/// One finished exchange of ``HTTPDNSClient``.
public struct HTTPDNSExchange: Sendable {
    public var response: HTTPURLResponse
    /// The body; empty when it went to a file.
    public var body: Data
    /// The address the final request was sent to.
    public var remoteAddress: String?
    /// How the final host was resolved; nil for an IP-literal URL.
    public var resolution: Resolution?
    /// 10, 11, 20 or 30.
    public var httpVersion: Int
    /// The URLs that redirected, in order.
    public var redirects: [URL]
}

/// Why a request failed, kept as the `NSUnderlyingErrorKey` of the `URLError` thrown.
public struct HTTPDNSClientError: Error, Sendable, CustomStringConvertible {
    public enum Reason: String, Sendable {
        case resolution, connectFailed = "connect_failed", timeout, untrustedCertificate = "untrusted_certificate"
        case nameMismatch = "name_mismatch", tlsFailed = "tls_failed", cancelled, protocolError = "protocol_error"
        case tooManyRedirects = "too_many_redirects", invalidRequest = "invalid_request", io
        /// The request body could not be read, or had to be sent again and could not be.
        case bodySource = "body_source"
        /// The interception policy does not let this host through HTTPDNS.
        case notIntercepted = "not_intercepted"
    }

    public var reason: Reason
    public var message: String
    /// The resolver's error code (`nxdomain`, `timeout`, …) when resolution failed.
    public var dnsCode: String?

    public init(_ reason: Reason, _ message: String, dnsCode: String? = nil) {
        self.reason = reason
        self.message = message
        self.dnsCode = dnsCode
    }

    public var description: String { message }

    /// The reason behind a `URLError` thrown by ``HTTPDNSClient``, if it is one.
    public static func reason(of error: any Error) -> HTTPDNSClientError? {
        (error as? URLError)?.userInfo[NSUnderlyingErrorKey] as? HTTPDNSClientError
    }
}

/// Writes a response body to a file as it arrives.
final class FileSink: CurlBodySink, @unchecked Sendable {
    // Safety: written only on the curl engine thread, closed after the transfer ended.
    private var descriptor: Int32

    init?(path: String) {
        descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        if descriptor < 0 { return nil }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> CurlSinkAnswer {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return .abort
            }
            offset += written
        }
        return .accepted
    }

    func close() throws {
        guard descriptor >= 0 else { return }
        let status = Glibc.close(descriptor)
        descriptor = -1
        if status != 0 { throw URLError(.cannotCloseFile) }
    }

    deinit { if descriptor >= 0 { _ = Glibc.close(descriptor) } }
}
