import CurlSupport
import DNSCore
import Synchronization

/// One probe of an address: a connection made to it on a port, and what the peer proved.
///
/// - `tls`: TCP connect, then a TLS handshake with SNI = the host, the chain validated against the
///   trust anchors and the certificate's names checked against the host: proof that the address
///   serves the host (or that it does not).
/// - `tcp`: TCP connect only: reachability and round-trip time, no proof of identity.
/// - `http`: a plain-HTTP `GET` whose response must contain a marker the user knows the genuine
///   server sends. Weaker evidence: anyone on the path can copy a marker, nobody can forge a
///   certificate.
public struct AddressProbe: Sendable, Hashable {
    /// What the probe did on the connection (see the type's description).
    public enum Kind: String, Sendable, Hashable, Codable {
        case tcp, tls, http
    }

    /// What the probe found; the raw values are the JSON output's `outcome` strings.
    public enum Outcome: String, Sendable, Hashable, Codable {
        case ok
        /// TLS: the chain does not lead to a trusted root.
        case untrustedCertificate = "untrusted_certificate"
        /// TLS: a valid certificate, for another name.
        case nameMismatch = "name_mismatch"
        /// TLS: the peer did not complete a TLS handshake (not TLS on that port, protocol error).
        case tlsFailed = "tls_failed"
        /// HTTP: a response arrived without the marker.
        case markerMissing = "marker_missing"
        case connectFailed = "connect_failed"
        case timeout

        /// The address answered with something that proves it is not the host: a certificate
        /// that does not validate for it, or a response without the genuine marker.
        public var disproves: Bool { self == .untrustedCertificate || self == .nameMismatch || self == .markerMissing }
    }

    public var ip: IPAddress
    public var port: Int
    public var kind: Kind
    public var outcome: Outcome
    /// Seconds to the TCP connection, and of the TLS handshake after it. libcurl (7.88) records
    /// them only for a connection that completed, so a failed probe has neither.
    public var connectSeconds: Double?
    public var handshakeSeconds: Double?
    /// What went wrong, in the TLS library's or libcurl's words; nil when `ok`.
    public var detail: String?

    public init(
        ip: IPAddress, port: Int, kind: Kind = .tls, outcome: Outcome, connectSeconds: Double? = nil,
        handshakeSeconds: Double? = nil, detail: String? = nil
    ) {
        self.ip = ip
        self.port = port
        self.kind = kind
        self.outcome = outcome
        self.connectSeconds = connectSeconds
        self.handshakeSeconds = handshakeSeconds
        self.detail = detail
    }

    /// Connect plus handshake: the time a client would wait before it could send a request.
    public var setupSeconds: Double? {
        guard let connectSeconds else { return nil }
        return connectSeconds + (handshakeSeconds ?? 0)
    }
}

/// Makes probes; ``ConnectionProber`` is the real one, tests inject fakes.
public protocol AddressProbing: Sendable {
    /// Probes `ip` on `port` for `host`. Never throws: every failure is an outcome.
    func probe(host: String, ip: IPAddress, port: Int) async -> AddressProbe
}

/// Probes over a connection of its own (never a pooled one), through the shared libcurl engine.
public struct ConnectionProber: AddressProbing {
    /// The kind of probe to make, with what an HTTP probe looks for.
    public enum Mode: Sendable, Hashable {
        case tcp
        case tls
        /// `GET path` over plain HTTP; `ok` when the response head or the first 256 KiB of the
        /// body contain `marker`.
        case http(path: String, marker: String)
    }

    public var mode: Mode
    /// The whole probe's budget (connect, handshake, and for `http` the response).
    public var timeout: Duration
    /// Extra trust anchors (PEM) added to the system's, as everywhere else; read when set, so that
    /// probes made later need not read the file again.
    public var caFile: String? {
        didSet { trust = TLSTrust(caFile: caFile) }
    }
    private var trust: TLSTrust

    /// How much of an HTTP body is searched for the marker.
    public static let markerWindow = 256 * 1024

    public init(mode: Mode = .tls, timeout: Duration = .seconds(3), caFile: String? = nil) {
        self.mode = mode
        self.timeout = timeout
        self.caFile = caFile
        self.trust = TLSTrust(caFile: caFile)
    }

    public func probe(host: String, ip: IPAddress, port: Int) async -> AddressProbe {
        let kind: AddressProbe.Kind
        switch mode {
        case .tcp: kind = .tcp
        case .tls: kind = .tls
        case .http: kind = .http
        }
        var result = AddressProbe(ip: ip, port: port, kind: kind, outcome: .connectFailed)
        // The host goes into a URL: only a valid DNS name may, so nothing else can ride along.
        guard (try? DomainName(host)) != nil, (1...65535).contains(port) else {
            result.detail = "'\(host)' port \(port) cannot be probed: not a host name and port"
            return result
        }
        let pin = Pinning.pin(host: host, port: port, to: [ip.urlHost])
        var request = CurlRequest(
            url: "", resolve: pin.resolve, connectTo: pin.connectTo, timeout: timeout,
            trust: trust, maxResponseBytes: Self.markerWindow)
        request.freshConnection = true
        request.allowsHTTP2 = false
        var sink: MarkerSink?
        switch mode {
        case .tcp:
            request.url = "http://\(host):\(port)/"
            request.protocols = "http"
            request.connectOnly = true
        case .tls:
            request.url = "https://\(host):\(port)/"
            request.connectOnly = true
        case .http(let path, let expected):
            request.url = "http://\(host):\(port)" + (path.hasPrefix("/") ? path : "/" + path)
            request.protocols = "http"
            request.maxResponseBytes = Int.max
            sink = MarkerSink(marker: expected, window: Self.markerWindow)
            request.bodySink = sink
        }
        do {
            let response = try await CurlEngine.shared.perform(request)
            result.connectSeconds = response.timings.connect
            result.handshakeSeconds = kind == .tls ? response.timings.handshake : nil
            result.outcome = .ok
        } catch let error as CurlError {
            result.connectSeconds = error.timings.connect
            result.detail = error.message
            result.outcome = Self.outcome(error.code, kind: kind)
        } catch {
            result.detail = "\(error)"
        }
        // The sink stops the transfer once it has seen the marker or the whole window: a verdict,
        // not a failure.
        if let sink, let verdict = sink.verdict {
            result.outcome = verdict.found ? .ok : .markerMissing
            result.detail = verdict.found ? nil : "HTTP \(verdict.status) without the marker in the first \(Self.markerWindow / 1024) KiB"
        }
        return result
    }

    private static func outcome(_ code: CurlError.Code, kind: AddressProbe.Kind) -> AddressProbe.Outcome {
        switch code {
        case .timeout: return .timeout
        case .connectFailed: return .connectFailed
        case .untrustedCertificate: return .untrustedCertificate
        case .nameMismatch: return .nameMismatch
        case .responseTooLarge: return .markerMissing
        case .tlsFailed, .pinMismatch: return .tlsFailed
        default: return kind == .tls ? .tlsFailed : .connectFailed
        }
    }
}

/// Looks for the marker in the response head and the first `window` bytes of the body, and stops
/// the transfer as soon as it knows.
private final class MarkerSink: CurlBodySink {
    private struct State {
        var status = 0
        var headed = false
        var seen: [UInt8] = []
        var found = false
        var done = false
    }

    private let marker: [UInt8]
    private let window: Int
    private let state = Mutex(State())

    init(marker: String, window: Int) {
        self.marker = Array(marker.utf8)
        self.window = window
    }

    /// Status and whether the marker was found, once a response head arrived.
    var verdict: (status: Int, found: Bool)? {
        state.withLock { $0.headed ? ($0.status, $0.found) : nil }
    }

    func receive(head: CurlResponseHead) {
        let text = Array(head.headers.map { "\($0.name): \($0.value)\n" }.joined().utf8)
        state.withLock {
            $0.headed = true
            $0.status = head.status
            if Self.search(text, for: marker) {
                $0.found = true
                $0.done = true
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> CurlSinkAnswer {
        state.withLock { state -> CurlSinkAnswer in
            if state.done { return .abort }
            // Everything up to the window is kept, so a marker split across writes is found.
            state.seen.append(contentsOf: bytes.prefix(window - state.seen.count))
            if Self.search(state.seen, for: marker) {
                state.found = true
                state.done = true
                return .abort
            }
            if state.seen.count >= window {
                state.done = true
                return .abort
            }
            return .accepted
        }
    }

    /// Whether `haystack` contains `needle` (an empty needle is always found).
    static func search(_ haystack: [UInt8], for needle: [UInt8]) -> Bool {
        guard !needle.isEmpty else { return true }
        guard haystack.count >= needle.count else { return false }
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}
