import CCurl
import Foundation
import Synchronization

/// The state of one transfer: its easy handle, the C lists it must keep alive, and what arrived.
///
/// Owned by ``CurlEngine``; after enqueueing, only the engine thread touches it, except
/// `cancelRequested`, which is atomic.
final class Transfer: @unchecked Sendable {
    // Safety: every mutable field but `cancelRequested` is used on the engine thread only once the
    // transfer is enqueued; the caller sets `continuation` before enqueueing.
    let request: CurlRequest
    var continuation: CheckedContinuation<CurlResponse, Error>?
    let cancelRequested = Atomic<Bool>(false)

    private(set) var easy: UnsafeMutableRawPointer?
    private var lists: [UnsafeMutablePointer<curl_slist>] = []
    private let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
    /// What the TLS handshake of a connect-only connection records (ALPN's pick, the verified chain),
    /// when the request asks for either; freed with the transfer, after the easy handle (which the
    /// TLS context's callback points into).
    private(set) var tlsRecord: UnsafeMutablePointer<httpdns_tls_record>?
    fileprivate var body: [UInt8] = []
    fileprivate var headers: [(name: String, value: String)] = []
    fileprivate var exceededLimit = false
    fileprivate var sinkFailed = false
    fileprivate var sourceFailed = false
    fileprivate var headDelivered = false
    fileprivate var received = 0

    init(request: CurlRequest) {
        self.request = request
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
    }

    deinit {
        if let easy { curl_easy_cleanup(easy) }
        for list in lists { curl_slist_free_all(list) }
        errorBuffer.deallocate()
        if let tlsRecord {
            httpdns_tls_record_clear(tlsRecord)
            tlsRecord.deallocate()
        }
    }

    /// Resumes the caller exactly once.
    func finish(_ result: Result<CurlResponse, CurlError>) {
        guard let continuation else { return }
        self.continuation = nil
        continuation.resume(with: result.mapError { $0 as Error })
    }

    /// Hands the easy handle back to the engine; the transfer no longer frees it.
    func releaseHandle() -> UnsafeMutableRawPointer? {
        defer { easy = nil }
        return easy
    }

    /// Sets every option of this transfer on `handle` (a new or a reset one) and takes ownership.
    func configure(_ handle: UnsafeMutableRawPointer?) throws -> UnsafeMutableRawPointer {
        guard let easy = handle else {
            throw CurlError(.invalidRequest, "curl_easy_init failed")
        }
        self.easy = easy
        let request = self.request
        try set(CURLOPT_URL, request.url)
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_PROTOCOLS_STR, request.protocols)
        try set(CURLOPT_REDIR_PROTOCOLS_STR, request.protocols)
        try set(CURLOPT_HTTP_VERSION, Int(request.allowsHTTP2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1))
        // Wait for a multiplexable connection rather than opening a second one.
        try set(CURLOPT_PIPEWAIT, 1)
        // Environment proxies would send the trusted path through hosts nobody chose.
        try set(CURLOPT_PROXY, "")
        try set(CURLOPT_FOLLOWLOCATION, 0)
        try set(CURLOPT_TIMEOUT_MS, Self.milliseconds(request.timeout))
        try set(CURLOPT_CONNECTTIMEOUT_MS, Self.milliseconds(request.connectTimeout ?? request.timeout))
        try set(CURLOPT_MAXFILESIZE_LARGE, offset: curl_off_t(clamping: request.maxResponseBytes))
        if let idle = request.idleTimeout {
            try set(CURLOPT_LOW_SPEED_LIMIT, 1)
            try set(CURLOPT_LOW_SPEED_TIME, max(1, Int(idle.components.seconds)))
        }
        if request.decodesContent { try set(CURLOPT_ACCEPT_ENCODING, "") }
        if request.connectOnly { try set(CURLOPT_CONNECT_ONLY, 1) }
        if !request.offersALPN || request.offersHTTP2OwnALPN { try set(CURLOPT_SSL_ENABLE_ALPN, 0) }
        if request.connectOnly {
            let record = tlsRecord ?? .allocate(capacity: 1)
            if tlsRecord != nil { httpdns_tls_record_clear(record) }
            record.initialize(
                to: httpdns_tls_record(
                    offer_h2: request.offersHTTP2OwnALPN ? 1 : 0, keep_chain: request.collectsCertificates ? 1 : 0, chain: nil,
                    alpn: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), alpn_length: 0))
            tlsRecord = record
            try check(httpdns_easy_record_tls(easy, record), CURLOPT_SSL_CTX_FUNCTION)
        }
        if request.freshConnection {
            try set(CURLOPT_FRESH_CONNECT, 1)
            try set(CURLOPT_FORBID_REUSE, 1)
        }
        if let delay = request.happyEyeballsDelay { try set(CURLOPT_HAPPY_EYEBALLS_TIMEOUT_MS, Self.milliseconds(delay)) }
        try check(httpdns_easy_setopt_pointer(easy, CURLOPT_ERRORBUFFER, errorBuffer), CURLOPT_ERRORBUFFER)

        if let bundle = request.trust.caBundle {
            // Copied by libcurl (CURL_BLOB_COPY): the bytes need not outlive this call. The
            // default bundle (CURLOPT_CAINFO) and CURLOPT_CAPATH stay: the file adds to the system's roots.
            // libcurl only reads the bytes (and copies them): no copy of the bundle per transfer here.
            let code = bundle.withUnsafeBytes { bytes in
                var value = curl_blob(data: UnsafeMutableRawPointer(mutating: bytes.baseAddress), len: bytes.count, flags: UInt32(CURL_BLOB_COPY))
                return httpdns_easy_setopt_blob(easy, CURLOPT_CAINFO_BLOB, &value)
            }
            try check(code, CURLOPT_CAINFO_BLOB)
            if let path = request.trust.systemCAPath { try set(CURLOPT_CAPATH, path) }
        } else if let caFile = request.trust.caFile {
            try set(CURLOPT_CAINFO, caFile)
            if let path = request.trust.systemCAPath { try set(CURLOPT_CAPATH, path) }
        }
        if let pin = request.trust.pinnedPublicKey { try set(CURLOPT_PINNEDPUBLICKEY, pin) }

        var resolve = request.resolve
        if !request.allowsNameResolution {
            try check(httpdns_easy_setopt_resolver_start(easy, refuseNameResolution), CURLOPT_RESOLVER_START_FUNCTION)
            resolve += Pinning.literalEntries(url: request.url, connectTo: request.connectTo)
        }
        if let list = makeList(resolve) { try check(httpdns_easy_setopt_slist(easy, CURLOPT_RESOLVE, list), CURLOPT_RESOLVE) }
        if let list = makeList(request.connectTo) { try check(httpdns_easy_setopt_slist(easy, CURLOPT_CONNECT_TO, list), CURLOPT_CONNECT_TO) }
        if let list = makeList(request.headers) { try check(httpdns_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, list), CURLOPT_HTTPHEADER) }

        if let source = request.bodySource {
            // UPLOAD streams the body through the read callback; the method line stays the caller's.
            try set(CURLOPT_UPLOAD, 1)
            try set(CURLOPT_INFILESIZE_LARGE, offset: source.length.map { curl_off_t($0) } ?? -1)
            if request.method != "PUT" { try set(CURLOPT_CUSTOMREQUEST, request.method) }
            let context = Unmanaged.passUnretained(self).toOpaque()
            try check(httpdns_easy_setopt_write_callback(easy, CURLOPT_READFUNCTION, onRead), CURLOPT_READFUNCTION)
            try check(httpdns_easy_setopt_pointer(easy, CURLOPT_READDATA, context), CURLOPT_READDATA)
            try check(httpdns_easy_setopt_seek_callback(easy, onSeek), CURLOPT_SEEKFUNCTION)
            try check(httpdns_easy_setopt_pointer(easy, CURLOPT_SEEKDATA, context), CURLOPT_SEEKDATA)
        } else {
            try configureMethodAndBody()
        }

        let context = Unmanaged.passUnretained(self).toOpaque()
        try check(httpdns_easy_setopt_write_callback(easy, CURLOPT_WRITEFUNCTION, onBody), CURLOPT_WRITEFUNCTION)
        try check(httpdns_easy_setopt_pointer(easy, CURLOPT_WRITEDATA, context), CURLOPT_WRITEDATA)
        try check(httpdns_easy_setopt_write_callback(easy, CURLOPT_HEADERFUNCTION, onHeader), CURLOPT_HEADERFUNCTION)
        try check(httpdns_easy_setopt_pointer(easy, CURLOPT_HEADERDATA, context), CURLOPT_HEADERDATA)
        return easy
    }

    private func configureMethodAndBody() throws {
        guard let easy else { return }
        switch request.method {
        case "GET":
            try set(CURLOPT_HTTPGET, 1)
        case "HEAD":
            try set(CURLOPT_NOBODY, 1)
        default:
            if let body = request.body {
                try set(CURLOPT_POSTFIELDSIZE_LARGE, offset: curl_off_t(body.count))
                try body.withUnsafeBytes { buffer in
                    // COPYPOSTFIELDS copies, so the array need not outlive this call.
                    let pointer = UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafeRawPointer(errorBuffer))
                    try check(httpdns_easy_setopt_pointer(easy, CURLOPT_COPYPOSTFIELDS, pointer), CURLOPT_COPYPOSTFIELDS)
                }
            }
            if request.method != "POST" || request.body == nil { try set(CURLOPT_CUSTOMREQUEST, request.method) }
        }
    }

    /// Whether `party` is this transfer's body sink or body source.
    func involves(_ party: ObjectIdentifier) -> Bool {
        request.bodySink.map { ObjectIdentifier($0) == party } == true
            || request.bodySource.map { ObjectIdentifier($0) == party } == true
    }

    /// Builds the response, or maps libcurl's code to a ``CurlError``.
    func outcome(_ code: CURLcode) -> Result<CurlResponse, CurlError> {
        guard let easy else { return .failure(CurlError(.invalidRequest, "no handle")) }
        if code != CURLE_OK {
            var failure = error(for: code)
            failure.timings = timings()
            return .failure(failure)
        }
        var status = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        var version = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        var total = 0.0
        _ = httpdns_easy_getinfo_double(easy, CURLINFO_TOTAL_TIME, &total)
        var connects = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
        var response = CurlResponse(
            status: status, headers: headers, body: body,
            contentType: string(CURLINFO_CONTENT_TYPE)?.lowercased(),
            remoteIP: string(CURLINFO_PRIMARY_IP),
            httpVersion: Self.httpVersion(version), totalTime: total, newConnections: connects)
        response.timings = timings()
        return .success(response)
    }

    /// The connect and handshake phases, from libcurl's cumulative times (zero = did not happen).
    private func timings() -> CurlTimings {
        guard let easy else { return CurlTimings() }
        var connect = 0.0, appConnect = 0.0
        _ = httpdns_easy_getinfo_double(easy, CURLINFO_CONNECT_TIME, &connect)
        _ = httpdns_easy_getinfo_double(easy, CURLINFO_APPCONNECT_TIME, &appConnect)
        return CurlTimings(
            connect: connect > 0 ? connect : nil,
            handshake: appConnect > 0 && appConnect >= connect ? appConnect - connect : nil)
    }

    private func error(for code: CURLcode) -> CurlError {
        let detail = String(cString: errorBuffer)
        let message = Pinning.readable(detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail, resolve: request.resolve)
        let raw = Int32(code.rawValue)
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST where !request.allowsNameResolution:
            return CurlError(
                .invalidRequest, "the transfer needed a DNS lookup of its own, which is never made: its host must be pinned",
                curlCode: raw)
        case CURLE_ABORTED_BY_CALLBACK where sourceFailed, CURLE_READ_ERROR where sourceFailed:
            return CurlError(.bodySourceFailed, "the request body could not be read", curlCode: raw)
        case CURLE_SEND_FAIL_REWIND:
            return CurlError(.bodySourceFailed, "the request body had to be sent again and cannot be rewound", curlCode: raw)
        case CURLE_WRITE_ERROR where sinkFailed:
            return CurlError(.protocolError, "the body could not be stored (write failed)", curlCode: raw)
        case CURLE_WRITE_ERROR where exceededLimit, CURLE_FILESIZE_EXCEEDED:
            return CurlError(.responseTooLarge, "response body exceeds \(request.maxResponseBytes) bytes", curlCode: raw)
        case CURLE_OPERATION_TIMEDOUT:
            return CurlError(.timeout, message, curlCode: raw)
        case CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return CurlError(.connectFailed, message, curlCode: raw)
        case CURLE_PEER_FAILED_VERIFICATION:
            let lowered = message.lowercased()
            if lowered.contains("subject name") || lowered.contains("does not match") || lowered.contains("no alternative") {
                return CurlError(.nameMismatch, message, curlCode: raw)
            }
            return CurlError(.untrustedCertificate, message, curlCode: raw)
        case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
            return CurlError(.pinMismatch, message, curlCode: raw)
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
            CURLE_SSL_ISSUER_ERROR, CURLE_SSL_CRL_BADFILE:
            return CurlError(.tlsFailed, message, curlCode: raw)
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT:
            return CurlError(.invalidRequest, message, curlCode: raw)
        default:
            return CurlError(.protocolError, message, curlCode: raw)
        }
    }

    /// Parses one header line as libcurl hands it over (with CRLF), over bytes: this runs for every
    /// header of every response.
    fileprivate func append(header line: UnsafeRawBufferPointer) {
        var end = line.count
        while end > 0, line[end - 1] == 0x0a || line[end - 1] == 0x0d || line[end - 1] == 0x20 { end -= 1 }
        if end == 0 {
            deliverHeadIfFinal()
            return
        }
        if end >= 5, line[0] == 0x48, line[1] == 0x54, line[2] == 0x54, line[3] == 0x50, line[4] == 0x2f {
            // "HTTP/": a new response head (after 100-continue or a redirect) replaces the previous one.
            headers.removeAll()
            return
        }
        guard let colon = line[..<end].firstIndex(of: 0x3a) else { return }
        var valueStart = colon + 1
        while valueStart < end, line[valueStart] == 0x20 || line[valueStart] == 0x09 { valueStart += 1 }
        let name = String(decoding: UnsafeRawBufferPointer(rebasing: line[..<colon]), as: UTF8.self)
        let value = String(decoding: UnsafeRawBufferPointer(rebasing: line[valueStart..<end]), as: UTF8.self)
        headers.append((name, value))
    }

    /// At the blank line ending a head: hands a final (non-1xx) head to the sink, once. Trailers
    /// end with a blank line too and are not a head.
    private func deliverHeadIfFinal() {
        guard !headDelivered, let sink = request.bodySink, let easy else { return }
        var status = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        guard status >= 200 else { return }
        headDelivered = true
        var version = 0
        _ = httpdns_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        sink.receive(
            head: CurlResponseHead(
                status: status, headers: headers, remoteIP: string(CURLINFO_PRIMARY_IP),
                httpVersion: Self.httpVersion(version)))
    }

    // MARK: Helpers

    private func string(_ info: CURLINFO) -> String? {
        guard let easy else { return nil }
        var pointer: UnsafeMutablePointer<CChar>?
        guard httpdns_easy_getinfo_string(easy, info, &pointer) == CURLE_OK, let pointer else { return nil }
        return String(cString: pointer)
    }

    private func makeList(_ strings: [String]) -> UnsafeMutablePointer<curl_slist>? {
        guard !strings.isEmpty else { return nil }
        var list: UnsafeMutablePointer<curl_slist>?
        for string in strings { list = curl_slist_append(list, string) }
        if let list { lists.append(list) }
        return list
    }

    private func set(_ option: CURLoption, _ value: String) throws {
        try check(httpdns_easy_setopt_string(easy, option, value), option)
    }

    private func set(_ option: CURLoption, _ value: Int) throws {
        try check(httpdns_easy_setopt_long(easy, option, value), option)
    }

    private func set(_ option: CURLoption, offset value: curl_off_t) throws {
        try check(httpdns_easy_setopt_off(easy, option, value), option)
    }

    private func check(_ code: CURLcode, _ option: CURLoption) throws {
        guard code == CURLE_OK else {
            throw CurlError(
                .invalidRequest, "libcurl refused option \(option.rawValue): \(String(cString: curl_easy_strerror(code)))",
                curlCode: Int32(code.rawValue))
        }
    }

    private static func milliseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return max(1, Int(seconds) * 1000 + Int(attoseconds / 1_000_000_000_000_000))
    }

    private static func httpVersion(_ value: Int) -> Int {
        switch value {
        case Int(CURL_HTTP_VERSION_1_0): return 10
        case Int(CURL_HTTP_VERSION_1_1): return 11
        case Int(CURL_HTTP_VERSION_2_0): return 20
        case Int(CURL_HTTP_VERSION_3): return 30
        default: return 0
        }
    }
}

// libcurl's C callbacks; the user pointer is the unretained Transfer, alive while its handle is.
/// `CURLOPT_RESOLVER_START_FUNCTION`: libcurl is about to ask the system's DNS for a name no pin
/// covers. Refused: nothing this library sends may depend on the hijackable path.
private let refuseNameResolution: @convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32 = {
    _, _, _ in
    1
}

private let onBody: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, context in
    guard let context else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    if transfer.received + length > transfer.request.maxResponseBytes {
        transfer.exceededLimit = true
        return 0
    }
    guard let data else { return length }
    let bytes = UnsafeRawBufferPointer(start: data, count: length)
    if let sink = transfer.request.bodySink {
        switch sink.write(bytes) {
        case .accepted: break
        // Not counted: libcurl hands the same bytes over again after the resume.
        case .pause: return Int(CURL_WRITEFUNC_PAUSE)
        case .abort:
            transfer.sinkFailed = true
            return 0
        }
    } else {
        transfer.body.append(contentsOf: bytes)
    }
    transfer.received += length
    return length
}

private let onRead: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    buffer, size, count, context in
    guard let context, let buffer else { return Int(CURL_READFUNC_ABORT) }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    guard let source = transfer.request.bodySource else { return 0 }
    switch source.read(into: UnsafeMutableRawBufferPointer(start: buffer, count: size * count)) {
    case .bytes(let count): return count
    case .end: return 0
    case .pause: return Int(CURL_READFUNC_PAUSE)
    case .abort:
        transfer.sourceFailed = true
        return Int(CURL_READFUNC_ABORT)
    }
}

private let onSeek: @convention(c) (UnsafeMutableRawPointer?, curl_off_t, Int32) -> Int32 = {
    context, offset, origin in
    guard let context else { return Int32(CURL_SEEKFUNC_FAIL) }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    // libcurl only ever rewinds a body to its start (a retried or redirected request).
    guard offset == 0, origin == SEEK_SET, let source = transfer.request.bodySource, source.rewind() else {
        return Int32(CURL_SEEKFUNC_CANTSEEK)
    }
    return Int32(CURL_SEEKFUNC_OK)
}

private let onHeader: @convention(c) (UnsafeMutablePointer<CChar>?, Int, Int, UnsafeMutableRawPointer?) -> Int = {
    data, size, count, context in
    guard let context, let data else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(context).takeUnretainedValue()
    let length = size * count
    transfer.append(header: UnsafeRawBufferPointer(start: data, count: length))
    return length
}
