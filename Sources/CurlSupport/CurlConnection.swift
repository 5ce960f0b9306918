import CCurl
import Foundation

/// A connection that libcurl opens — with the trust, pins and bootstrap pinning of every transfer
/// (``CurlRequest``, ``Pinning``) — and then hands over as a byte stream
/// (`CURLOPT_CONNECT_ONLY`, `curl_easy_send`, `curl_easy_recv`): what DNS over TLS runs on.
///
/// Non-blocking after ``open(_:)``: ``send(_:)`` and ``receive(into:)`` return at once, and the
/// owner polls ``socket``. Used by one thread at a time.
package final class CurlConnection: @unchecked Sendable {
    // Safety: the owner (one worker thread) is the only user; nothing is shared.
    private let transfer: Transfer
    private let easy: UnsafeMutableRawPointer
    /// The connected socket, for poll(2); libcurl closes it with the connection.
    package let socket: Int32
    /// The address the connection reached.
    package let remoteIP: String?
    /// The peer's certificate chain as DER, leaf first, when the request asked for it
    /// (``CurlRequest/collectsCertificates``).
    package private(set) var certificates: [[UInt8]] = []

    private init(transfer: Transfer, easy: UnsafeMutableRawPointer, socket: Int32, remoteIP: String?) {
        self.transfer = transfer
        self.easy = easy
        self.socket = socket
        self.remoteIP = remoteIP
    }

    /// Connects and completes the TLS handshake, blocking the calling thread for at most the
    /// request's connect budget. The request's URL names the host the certificate is checked
    /// against; no HTTP is sent. ALPN offers `h2` alone when `http2` (the owner speaks HTTP/2 on the
    /// stream, RFC 9113 §3.2), else nothing.
    package static func open(_ request: CurlRequest, http2: Bool = false) throws(CurlError) -> CurlConnection {
        var request = request
        request.connectOnly = true
        request.allowsHTTP2 = false
        request.offersALPN = false
        request.offersOnlyHTTP2 = http2
        let transfer = Transfer(request: request)
        let easy: UnsafeMutableRawPointer
        do {
            easy = try transfer.configure(curl_easy_init())
        } catch let error as CurlError {
            throw error
        } catch {
            throw CurlError(.invalidRequest, "\(error)")
        }
        let code = curl_easy_perform(easy)
        let response: CurlResponse
        switch transfer.outcome(code) {
        case .failure(let error): throw error
        case .success(let value): response = value
        }
        var socket: curl_socket_t = -1
        guard httpdns_easy_getinfo_socket(easy, CURLINFO_ACTIVESOCKET, &socket) == CURLE_OK, socket >= 0 else {
            throw CurlError(.protocolError, "libcurl kept no socket for the connection")
        }
        let connection = CurlConnection(transfer: transfer, easy: easy, socket: socket, remoteIP: response.remoteIP)
        if request.collectsCertificates { connection.certificates = Self.chain(easy) }
        return connection
    }

    /// Sends from the start of `bytes`.
    /// - Returns: how many bytes were taken; 0 when the socket cannot take more now (poll for
    ///   `POLLOUT`, then send the same bytes again: TLS requires the retry to repeat them).
    package func send(_ bytes: UnsafeRawBufferPointer) throws(CurlError) -> Int {
        var sent = 0
        let code = curl_easy_send(easy, bytes.baseAddress, bytes.count, &sent)
        switch code {
        case CURLE_OK: return sent
        case CURLE_AGAIN: return 0
        default: throw CurlError(.protocolError, "send failed: \(String(cString: curl_easy_strerror(code)))", curlCode: Int32(code.rawValue))
        }
    }

    /// Reads what has arrived into `buffer`.
    /// - Returns: the byte count; 0 when the peer closed the connection; nil when nothing is
    ///   waiting (poll for `POLLIN`).
    package func receive(into buffer: UnsafeMutableRawBufferPointer) throws(CurlError) -> Int? {
        var received = 0
        let code = curl_easy_recv(easy, buffer.baseAddress, buffer.count, &received)
        switch code {
        case CURLE_OK: return received
        case CURLE_AGAIN: return nil
        default:
            throw CurlError(.protocolError, "receive failed: \(String(cString: curl_easy_strerror(code)))", curlCode: Int32(code.rawValue))
        }
    }

    /// The DER certificates of `CURLINFO_CERTINFO` (OpenSSL gives each as a PEM `Cert:` field).
    private static func chain(_ easy: UnsafeMutableRawPointer) -> [[UInt8]] {
        var raw: UnsafeMutableRawPointer?
        guard httpdns_easy_getinfo_pointer(easy, CURLINFO_CERTINFO, &raw) == CURLE_OK, let raw else { return [] }
        let info = raw.assumingMemoryBound(to: curl_certinfo.self).pointee
        guard info.num_of_certs > 0, let lists = info.certinfo else { return [] }
        var result: [[UInt8]] = []
        for index in 0..<Int(info.num_of_certs) {
            var node = lists[index]
            while let entry = node {
                if let data = entry.pointee.data {
                    let field = String(cString: data)
                    if field.hasPrefix("Cert:"), let der = pemBody(field.dropFirst(5)) { result.append(der) }
                }
                node = entry.pointee.next
            }
        }
        return result
    }

    private static func pemBody(_ text: Substring) -> [UInt8]? {
        let base64 = text.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        return Data(base64Encoded: base64).map { Array($0) }
    }
}
