/// The DoH request side in plain Swift (no NIO), fuzzed with the query parser (Fuzz/DoHRequestFuzzer.swift).
import DNSCore

/// RFC 8484 requests: where the DNS query is in a GET or a POST to `/dns-query`.
enum DoHRequest {
    static let path: Substring = "/dns-query"
    /// The largest DNS message accepted (RFC 8484 §6: a DoH message is at most 65,535 octets).
    static let maxMessageBytes = 65_535

    static func isDoH(_ target: String) -> Bool {
        target.utf8.starts(with: "/dns-query".utf8) && (target.utf8.count == 10 || target.utf8.dropFirst(10).first == UInt8(ascii: "?"))
    }

    /// The query a GET (`?dns=`, base64url) or a POST (`application/dns-message` body) carries, or
    /// the answer that refuses it: 400 with the reason, 415 for another media type.
    static func query(method: String, target: String, contentType: String?, body: @autoclosure () -> [UInt8]) -> Result<[UInt8], Refusal> {
        switch method {
        case "GET":
            guard let parameter = queryParameter("dns", in: target) else {
                return .failure(Refusal(status: 400, "give ?dns=BASE64URL (RFC 8484 §4.1)\n"))
            }
            guard parameter.utf8.count <= maxMessageBytes * 4 / 3 + 4, let wire = DoHWire.decodeBase64URL(parameter) else {
                return .failure(Refusal(status: 400, "the dns parameter is not base64url\n"))
            }
            return .success(wire)
        case "POST":
            guard isDNSMessage(contentType: contentType) else {
                return .failure(Refusal(status: 415, "Content-Type must be application/dns-message\n"))
            }
            return .success(body())
        default:
            return .failure(Refusal(status: 405, "method not allowed; allowed: GET, POST\n"))
        }
    }

    struct Refusal: Error {
        var status: Int
        var message: String
        init(status: Int, _ message: String) {
            self.status = status
            self.message = message
        }
    }

    /// Whether a POST's `Content-Type` is `application/dns-message` (parameters and case aside).
    static func isDNSMessage(contentType: String?) -> Bool {
        DoHWire.mediaType(of: contentType) == DoHWire.mediaType
    }

    /// The first `name=value` of a request target's query, as it is (base64url needs no decoding).
    /// Scans bytes: the target of a DoH GET is long, and splitting it as characters cost more than
    /// answering the query.
    static func queryParameter(_ name: String, in target: String) -> Substring? {
        let bytes = target.utf8
        guard var start = bytes.firstIndex(of: UInt8(ascii: "?")).map(bytes.index(after:)) else { return nil }
        while start < bytes.endIndex {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: "&")) ?? bytes.endIndex
            if let equals = bytes[start..<end].firstIndex(of: UInt8(ascii: "=")), bytes[start..<equals].elementsEqual(name.utf8) {
                return Substring(bytes[bytes.index(after: equals)..<end])
            }
            start = end == bytes.endIndex ? end : bytes.index(after: end)
        }
        return nil
    }
}
