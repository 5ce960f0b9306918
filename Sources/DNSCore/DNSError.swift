/// The one error type of the resolution layers.
///
/// Every failure has a stable machine-readable ``Code`` (the `code` of the CLI's JSON), a one-line
/// human message, and, when upstreams were asked, the failure of each attempt.
public struct DNSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Stable identifiers; scripts match on the raw values, so they never change once published.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// The host name is not a valid DNS name (empty, too long, bad characters).
        case invalidName = "invalid_name"
        /// The name does not exist (RCODE 3).
        case nxdomain
        /// The name exists but has no record of the asked type.
        case nodata
        /// Every answer was in a private/special range and the rebinding guard dropped it.
        case rejectedPrivate = "rejected_private"
        /// No answer within the time budget.
        case timeout
        /// The resolver could not be reached (refused, unreachable).
        case connectFailed = "connect_failed"
        /// TLS failed: the resolver's certificate, name or pin did not verify.
        case tlsFailed = "tls_failed"
        /// The resolver answered with an HTTP status other than 200.
        case httpStatus = "http_status"
        /// The resolver answered with a content type other than the protocol's.
        case badContentType = "bad_content_type"
        /// The response body was larger than the cap (64 KiB).
        case responseTooLarge = "response_too_large"
        /// The response could not be decoded (truncated, bad pointers, bad lengths, trailing data).
        case malformedResponse = "malformed_response"
        /// The response does not answer the question that was asked (ID, opcode, QR or question).
        case mismatchedResponse = "mismatched_response"
        /// An answer came over a transport that does not authenticate the server (`http://`) in a
        /// form the service's encryption does not cover (Tencent's empty "no record" body): anyone
        /// on the path could have sent it, so it is not taken as a fact.
        case unauthenticatedAnswer = "unauthenticated_answer"
        /// A vendor HTTPDNS service refused the request's credentials (signature, expiry, account,
        /// token). Not retried on another service IP: it would fail the same everywhere.
        case unauthorized
        /// A vendor HTTPDNS service is rate-limiting the account (HTTP 429).
        case rateLimited = "rate_limited"
        /// The resolver answered SERVFAIL.
        case serverFailure = "server_failure"
        /// The resolver refused the query, or answered another error RCODE.
        case refused
        /// Several upstreams failed in different ways; see ``DNSError/attempts``.
        case upstreamFailed = "upstream_failed"
        /// The caller cancelled the lookup.
        case cancelled
        /// The configuration cannot be used (no upstreams, bad URL, missing bootstrap).
        case invalidConfiguration = "invalid_configuration"
        /// A message handed over to be forwarded is not a DNS query with one question.
        case invalidQuery = "invalid_query"
        /// A cache file cannot be used: not this library's format, truncated, or corrupt.
        case corruptCacheFile = "corrupt_cache_file"
        /// The cache could not be written (the directory is missing, read-only or full).
        case cacheWriteFailed = "cache_write_failed"
        /// DNSSEC validation found the answer bogus and the policy requires it to validate.
        case dnssecBogus = "dnssec_bogus"
        /// Something failed that is none of the above (a defect, or a failure of the system);
        /// the message says what.
        case internalError = "internal_error"
    }

    /// One upstream's failure inside a lookup that asked several.
    public struct Attempt: Sendable, Hashable {
        /// The upstream's URL, or `system` for plain DNS.
        public var upstream: String
        public var code: Code
        public var message: String

        public init(upstream: String, code: Code, message: String) {
            self.upstream = upstream
            self.code = code
            self.message = message
        }
    }

    public var code: Code
    /// For `http_status`: the status the server answered with (0 when none was read). Beside
    /// `code`, where it fills what would be padding: no error grows for it.
    package var httpStatus: UInt16 = 0
    public var message: String
    /// Each upstream attempt that failed, in the order they were made.
    public var attempts: [Attempt]
    /// For `nxdomain` and `nodata` with DNSSEC on: whether the denial itself was proven.
    public var dnssec: DNSSECStatus?
    /// For `nxdomain` and `nodata`: the zone's SOA that the upstream sent with the answer, its TTL
    /// what remains of the cached answer's life; what a DNS response carries in its authority
    /// section (RFC 2308 §3). Nil when the upstream sent none (vendor APIs, the system resolver).
    public var authority: NegativeAuthority?

    public init(_ code: Code, _ message: String, attempts: [Attempt] = []) {
        self.code = code
        self.message = message
        self.attempts = attempts
    }

    public var description: String { "\(code.rawValue): \(message)" }

    /// Combines the failures of several upstreams into one error: the shared code when all agree,
    /// otherwise `upstream_failed`, always listing each attempt.
    public static func combining(_ all: [Attempt]) -> DNSError {
        // A and AAAA asked of the same upstream usually fail the same way: report that once.
        var attempts: [Attempt] = []
        for attempt in all where !attempts.contains(attempt) { attempts.append(attempt) }
        guard let first = attempts.first else {
            return DNSError(.upstreamFailed, "no upstream was tried")
        }
        if attempts.count == 1 {
            return DNSError(first.code, "\(first.upstream): \(first.message)", attempts: attempts)
        }
        let summary = attempts.map { "\($0.upstream): \($0.message)" }.joined(separator: "; ")
        let code = attempts.allSatisfy({ $0.code == first.code }) ? first.code : .upstreamFailed
        let upstreams = Set(attempts.map(\.upstream)).count
        let prefix = upstreams == 1 ? "" : "all \(upstreams) upstreams failed: "
        return DNSError(code, prefix + summary, attempts: attempts)
    }
}

/// Why a DNS message could not be decoded or does not answer the query. Each case is one specific
/// defect; all map to ``DNSError/Code/malformedResponse`` or ``DNSError/Code/mismatchedResponse``.
package enum WireError: Error, Sendable, Hashable, CustomStringConvertible {
    case truncated(offset: Int, needed: Int)
    case pointerLoop(offset: Int)
    case tooManyPointers(offset: Int)
    case pointerOutOfRange(offset: Int, target: Int)
    case badLabelType(offset: Int)
    case labelTooLong(offset: Int, length: Int)
    case nameTooLong(offset: Int)
    case rdataOverrun(offset: Int, length: Int)
    case badRDataLength(type: RecordType, length: Int)
    case trailingData(offset: Int, count: Int)
    case tooManyRecords(count: Int)
    case notAResponse
    case idMismatch(expected: UInt16, got: UInt16)
    case opcodeMismatch(got: UInt8)
    case questionMismatch(String)
    case tooLarge(size: Int)

    package var description: String {
        switch self {
        case let .truncated(offset, needed):
            return "message truncated at offset \(offset) (needed \(needed) more bytes)"
        case let .pointerLoop(offset):
            return "compression pointer at offset \(offset) does not point backwards (loop)"
        case let .tooManyPointers(offset):
            return "name at offset \(offset) follows more than \(WireReader.maxPointersPerName) compression pointers"
        case let .pointerOutOfRange(offset, target):
            return "compression pointer at offset \(offset) points past the message (\(target))"
        case let .badLabelType(offset):
            return "unsupported label type at offset \(offset)"
        case let .labelTooLong(offset, length):
            return "label of \(length) octets at offset \(offset) exceeds 63"
        case let .nameTooLong(offset):
            return "name at offset \(offset) exceeds 255 octets"
        case let .rdataOverrun(offset, length):
            return "RDLENGTH \(length) at offset \(offset) runs past the message"
        case let .badRDataLength(type, length):
            return "\(type) record with RDATA length \(length)"
        case let .trailingData(offset, count):
            return "\(count) bytes of trailing data at offset \(offset)"
        case let .tooManyRecords(count):
            return "message claims \(count) records, more than it can hold"
        case .notAResponse:
            return "QR bit not set: the message is a query, not a response"
        case let .idMismatch(expected, got):
            return "response ID \(got) does not match query ID \(expected)"
        case let .opcodeMismatch(got):
            return "response opcode \(got) is not QUERY"
        case let .questionMismatch(detail):
            return "response question does not echo the query: \(detail)"
        case let .tooLarge(size):
            return "message of \(size) bytes exceeds the 65535-byte limit"
        }
    }

    /// The resolver-level code for this defect.
    package var code: DNSError.Code {
        switch self {
        case .notAResponse, .idMismatch, .opcodeMismatch, .questionMismatch: return .mismatchedResponse
        default: return .malformedResponse
        }
    }
}
