import CCurl
import Foundation

/// A connection that libcurl opens — with the trust, pins and bootstrap pinning of every transfer
/// (``CurlRequest``, ``Pinning``) — and then hands over as a byte stream
/// (`CURLOPT_CONNECT_ONLY`, `curl_easy_send`, `curl_easy_recv`): what DNS over TLS runs on.
///
/// Non-blocking after ``open(_:)``: ``send(_:)`` and ``receive(into:)`` return at once, and the
/// owner polls ``socket``. OpenSSL reads ahead (one recv(2) takes every record that has arrived),
/// so bytes may wait inside TLS that poll(2) does not show: the owner calls ``receive(into:)`` until
/// it returns nil before it polls — once right after ``open(_:)`` too, as the handshake's last read
/// may have taken the server's first bytes. Used by one thread at a time.
package final class CurlConnection: @unchecked Sendable {
    // Safety: the owner (one worker thread) is the only user; nothing is shared.
    private let transfer: Transfer
    private let easy: UnsafeMutableRawPointer
    /// The connected socket, for poll(2); libcurl closes it with the connection.
    package let socket: Int32
    /// The address the connection reached.
    package let remoteIP: String?
    /// The certificate chain OpenSSL verified, as DER, leaf first and the trust anchor last, when
    /// the request asked for it (``CurlRequest/collectsCertificates``); empty when it cannot be read.
    /// Not what the server sent: a server may append any certificate to its chain (F20 of
    /// redteam-4), and a root the server does not send is in this one.
    package private(set) var certificates: [[UInt8]] = []
    /// The application protocol the server picked in the handshake (ALPN), when one was offered and
    /// it picked one: said inside a handshake the client verified, unlike an alert.
    package private(set) var negotiatedProtocol: String?

    private init(transfer: Transfer, easy: UnsafeMutableRawPointer, socket: Int32, remoteIP: String?) {
        self.transfer = transfer
        self.easy = easy
        self.socket = socket
        self.remoteIP = remoteIP
    }

    /// Connects and completes the TLS handshake, blocking the calling thread for at most the
    /// request's connect budget. The request's URL names the host the certificate is checked
    /// against; no HTTP is sent. ALPN offers `h2` then `http/1.1` when `http2` (the owner speaks
    /// HTTP/2 on the stream, RFC 9113 §3.2, and learns from ``negotiatedProtocol`` when the server
    /// does not), else nothing.
    package static func open(_ request: CurlRequest, http2: Bool = false) throws(CurlError) -> CurlConnection {
        var request = request
        request.connectOnly = true
        request.allowsHTTP2 = false
        request.offersALPN = false
        request.offersHTTP2OwnALPN = http2
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
        if let record = transfer.tlsRecord?.pointee {
            if request.collectsCertificates { connection.certificates = Self.verifiedChain(record) }
            if http2 { connection.negotiatedProtocol = Self.selectedProtocol(record) }
        }
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

    /// Whether the DER certificate `der` names the IP address `address` (4 or 16 bytes) among its
    /// subject alternative names (OpenSSL's `X509_check_ip`). Bound: `d2i_X509` reads at most
    /// `der.count` bytes; a certificate that does not decode names nothing.
    package static func certificate(_ der: [UInt8], namesAddress address: [UInt8]) -> Bool {
        guard !der.isEmpty, der.count <= 64 * 1024, address.count == 4 || address.count == 16 else { return false }
        let certificate = der.withUnsafeBufferPointer { buffer -> UnsafeMutableRawPointer? in
            var cursor = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let certificate else { return false }
        defer { X509_free(certificate) }
        return address.withUnsafeBufferPointer { X509_check_ip(certificate, $0.baseAddress, $0.count, 0) } == 1
    }

    /// The DER certificates of the chain OpenSSL verified, as the handshake recorded it (see
    /// shim.h). Bound: each certificate is written by `i2d_X509` into an array of the length the same
    /// call reported first; a chain or certificate that cannot be read leaves the chain empty (the
    /// caller fails closed).
    static func verifiedChain(_ record: httpdns_tls_record) -> [[UInt8]] {
        guard let chain = record.chain else { return [] }
        let count = OPENSSL_sk_num(chain)
        guard count > 0, count <= 16 else { return [] }
        var result: [[UInt8]] = []
        for index in 0..<count {
            guard let certificate = OPENSSL_sk_value(chain, index) else { return [] }
            let length = i2d_X509(certificate, nil)
            guard length > 0, length <= 64 * 1024 else { return [] }
            var der = [UInt8](repeating: 0, count: Int(length))
            let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
                var cursor = buffer.baseAddress
                return i2d_X509(certificate, &cursor)
            }
            guard written == length else { return [] }
            result.append(der)
        }
        return result
    }

    /// ALPN's pick as the handshake recorded it (at most the record's 32 bytes).
    static func selectedProtocol(_ record: httpdns_tls_record) -> String? {
        let length = Int(min(record.alpn_length, 32))
        guard length > 0 else { return nil }
        return withUnsafeBytes(of: record.alpn) { String(decoding: $0.prefix(length), as: UTF8.self) }
    }
}
