import CurlSupport
import Foundation
import HTTPDNS
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// An HTTP client whose host names are resolved through ``HTTPDNSResolver`` and never the system's DNS.
///
/// The URL keeps its host name; only the socket goes to the resolved address (libcurl's
/// `CURLOPT_RESOLVE`), so TLS SNI, the `Host` header and certificate validation all use the
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
        /// Cookies sent from and stored into this storage when a request's `httpShouldHandleCookies`
        /// is true. Default none: no cookies are sent or kept.
        public nonisolated(unsafe) var cookieStorage: HTTPCookieStorage?

        public init() {}
    }

    public let resolver: HTTPDNSResolver
    public let options: Options

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

    /// Sends `request`, writing the body to the file at `path` as it arrives (constant memory).
    /// The file is created or truncated; on failure it may hold a partial body.
    public func download(_ request: URLRequest, to path: String) async throws -> HTTPDNSExchange {
        try await send(request, sinkPath: path)
    }

    /// Sends `request` and tells everything about the exchange: the final response, the address
    /// used, the resolution behind it, the redirects followed.
    public func send(_ request: URLRequest) async throws -> HTTPDNSExchange {
        try await send(request, sinkPath: nil)
    }

    // MARK: The exchange

    private func send(_ original: URLRequest, sinkPath: String?) async throws -> HTTPDNSExchange {
        guard let firstURL = original.url else { throw URLError(.badURL) }
        var request = original
        var redirects: [URL] = []
        while true {
            let url = try Self.validated(request.url ?? firstURL)
            let hop = try await perform(request, url: url, sinkPath: sinkPath)
            if options.cookieStorage != nil, request.httpShouldHandleCookies { storeCookies(hop.response, for: url) }
            guard options.followRedirects, let next = Self.redirect(from: request, url: url, response: hop.response) else {
                return HTTPDNSExchange(response: hop.response, body: hop.body, remoteAddress: hop.remoteAddress,
                                       resolution: hop.resolution, httpVersion: hop.httpVersion, redirects: redirects)
            }
            redirects.append(url)
            guard redirects.count <= options.maxRedirects else {
                throw Self.error(.httpTooManyRedirects, url,
                                 HTTPDNSClientError(.tooManyRedirects, "more than \(options.maxRedirects) redirects, last to \(next.url!.absoluteString)"))
            }
            request = next
        }
    }

    private struct Hop {
        var response: HTTPURLResponse
        var body: Data
        var remoteAddress: String?
        var resolution: Resolution?
        var httpVersion: Int
    }

    private func perform(_ request: URLRequest, url: URL, sinkPath: String?) async throws -> Hop {
        let host = url.host ?? ""
        let port = url.port ?? (url.scheme?.lowercased() == "http" ? 80 : 443)
        let bareHost = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        var resolution: Resolution?
        var resolve: [String] = []
        if IPAddress(bareHost) == nil {
            do {
                let resolved = try await resolver.resolve(bareHost)
                resolution = resolved
                resolve = ["\(bareHost):\(port):" + Self.interleaved(resolved.addresses).map { $0.ip.urlHost }.joined(separator: ",")]
            } catch {
                throw Self.error(.cannotFindHost, url, HTTPDNSClientError(.resolution, "cannot resolve \(bareHost): \(error.message)", dnsCode: error.code.rawValue))
            }
        }
        let sink: FileSink?
        if let sinkPath {
            guard let opened = FileSink(path: sinkPath) else {
                throw Self.error(.cannotCreateFile, url, HTTPDNSClientError(.io, "cannot write '\(sinkPath)'"))
            }
            sink = opened
        } else {
            sink = nil
        }
        var curlRequest = CurlRequest(url: url.absoluteString, method: request.httpMethod ?? "GET",
                                      headers: try headers(for: request, url: url), body: try Self.body(of: request),
                                      resolve: resolve, timeout: timeout(for: request),
                                      trust: TLSTrust(caFile: options.caFile),
                                      maxResponseBytes: sink == nil ? options.maxBodyBytes : Int.max,
                                      protocols: "http,https")
        curlRequest.bodySink = sink
        curlRequest.happyEyeballsDelay = options.happyEyeballsDelay
        let response: CurlResponse
        do {
            response = try await CurlEngine.shared.perform(curlRequest)
        } catch let error as CurlError {
            throw Self.error(for: error, url: url, host: bareHost)
        }
        try sink?.close()
        var fields: [String: String] = [:]
        for (name, value) in response.headers {
            fields[name] = fields[name].map { "\($0), \(value)" } ?? value
        }
        let version = response.httpVersion == 20 ? "HTTP/2" : response.httpVersion == 10 ? "HTTP/1.0" : "HTTP/1.1"
        guard let http = HTTPURLResponse(url: url, statusCode: response.status, httpVersion: version, headerFields: fields) else {
            throw Self.error(.badServerResponse, url, HTTPDNSClientError(.protocolError, "unusable response from \(bareHost)"))
        }
        return Hop(response: http, body: Data(response.body), remoteAddress: response.remoteIP, resolution: resolution,
                   httpVersion: response.httpVersion)
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

    private func headers(for request: URLRequest, url: URL) throws -> [String] {
        var lines: [String] = []
        for (name, value) in request.allHTTPHeaderFields ?? [:] where name.lowercased() != "cookie" || !request.httpShouldHandleCookies {
            // A line break in a field would let a caller's data inject headers or a second request.
            guard !name.isEmpty, !(name + value).utf8.contains(where: { $0 == 0x0d || $0 == 0x0a }) else {
                throw Self.error(.badURL, url, HTTPDNSClientError(.invalidRequest, "header '\(name)' is empty or contains a line break"))
            }
            lines.append("\(name): \(value)")
        }
        if let storage = options.cookieStorage, request.httpShouldHandleCookies,
           let cookies = storage.cookies(for: url), !cookies.isEmpty,
           let header = HTTPCookie.requestHeaderFields(with: cookies)["Cookie"] {
            lines.append("Cookie: \(header)")
        }
        // No "Expect: 100-continue" round trip before a body.
        lines.append("Expect:")
        return lines
    }

    private func storeCookies(_ response: HTTPURLResponse, for url: URL) {
        guard let storage = options.cookieStorage else { return }
        var fields: [String: String] = [:]
        for (name, value) in response.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name] = value }
        }
        let cookies = HTTPCookie.cookies(withResponseHeaderFields: fields, for: url)
        if !cookies.isEmpty { storage.setCookies(cookies, for: url, mainDocumentURL: nil) }
    }

    static func body(of request: URLRequest) throws -> [UInt8]? {
        if let body = request.httpBody { return [UInt8](body) }
        guard let stream = request.httpBodyStream else { return nil }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        stream.open()
        defer { stream.close() }
        while true {
            let count = stream.read(&buffer, maxLength: buffer.count)
            if count < 0 {
                throw URLError(.cannotDecodeRawData, userInfo: [NSLocalizedDescriptionKey: "the request body stream failed"])
            }
            if count == 0 { return bytes }
            bytes.append(contentsOf: buffer[0..<count])
        }
    }

    static func validated(_ url: URL) throws -> URL {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw error(.unsupportedURL, url, HTTPDNSClientError(.invalidRequest, "only http and https URLs are supported, not '\(url.absoluteString)'"))
        }
        guard let host = url.host, !host.isEmpty else {
            throw error(.badURL, url, HTTPDNSClientError(.invalidRequest, "'\(url.absoluteString)' has no host"))
        }
        return url
    }

    /// The next request of a redirect, with the method and body rules of RFC 9110 §15.4 as browsers
    /// and URLSession apply them; nil when `response` is not a redirect to follow.
    static func redirect(from request: URLRequest, url: URL, response: HTTPURLResponse) -> URLRequest? {
        let status = response.statusCode
        guard [301, 302, 303, 307, 308].contains(status),
              let location = response.value(forHTTPHeaderField: "Location"),
              let target = URL(string: location, relativeTo: url)?.absoluteURL,
              let scheme = target.scheme?.lowercased(), scheme == "http" || scheme == "https" else { return nil }
        var next = request
        next.url = target
        let method = (request.httpMethod ?? "GET").uppercased()
        if (status == 303 && method != "HEAD") || ((status == 301 || status == 302) && method == "POST") {
            next.httpMethod = "GET"
            next.httpBody = nil
            next.httpBodyStream = nil
            next.setValue(nil, forHTTPHeaderField: "Content-Type")
            next.setValue(nil, forHTTPHeaderField: "Content-Length")
        }
        if target.host?.lowercased() != url.host?.lowercased() {
            // Credentials for one host are not sent to another.
            next.setValue(nil, forHTTPHeaderField: "Authorization")
            next.setValue(nil, forHTTPHeaderField: "Cookie")
        }
        return next
    }

    // MARK: Errors

    static func error(_ code: URLError.Code, _ url: URL, _ reason: HTTPDNSClientError) -> URLError {
        URLError(code, userInfo: [NSLocalizedDescriptionKey: reason.message, NSUnderlyingErrorKey: reason,
                                  NSURLErrorFailingURLErrorKey: url])
    }

    static func error(for error: CurlError, url: URL, host: String) -> URLError {
        switch error.code {
        case .untrustedCertificate:
            return Self.error(.serverCertificateHasUnknownRoot, url,
                              HTTPDNSClientError(.untrustedCertificate, "\(host): certificate not trusted: \(error.message)"))
        case .nameMismatch:
            return Self.error(.serverCertificateUntrusted, url,
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

    func write(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += written
        }
        return true
    }

    func close() throws {
        guard descriptor >= 0 else { return }
        let status = Glibc.close(descriptor)
        descriptor = -1
        if status != 0 { throw URLError(.cannotCloseFile) }
    }

    deinit { if descriptor >= 0 { _ = Glibc.close(descriptor) } }
}
