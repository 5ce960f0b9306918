/// The DoH request side in plain Swift (no NIO), fuzzed with the query parser (Fuzz/DoHRequestFuzzer.swift).
import DNSCore

/// RFC 8484 requests: where the DNS query is in a GET or a POST to `/dns-query`.
enum DoHRequest {
    static let path: Substring = "/dns-query"
    /// The largest DNS message accepted (RFC 8484 §6: a DoH message is at most 65,535 octets).
    static let maxMessageBytes = DNSMessage.maxSize

    static func isDoH(_ target: String) -> Bool {
        target.utf8.starts(with: "/dns-query".utf8) && (target.utf8.count == 10 || target.utf8.dropFirst(10).first == UInt8(ascii: "?"))
    }

    /// The query a GET (`?dns=`, base64url) or a POST (`application/dns-message` body) carries, or
    /// the answer that refuses it: 400 with the reason, 415 for another media type.
    static func query(
        method: String, target: String, contentType: @autoclosure () -> String?, body: @autoclosure () -> [UInt8]
    ) -> Result<[UInt8], Refusal> {
        switch method {
        case "GET":
            var target = target
            return target.withUTF8 { bytes in
                guard let range = queryParameter("dns", in: bytes) else {
                    return .failure(Refusal(status: 400, "give ?dns=BASE64URL (RFC 8484 §4.1)\n"))
                }
                guard range.count <= maxMessageBytes * 4 / 3 + 4,
                    let wire = DoHWire.decodeBase64URL(bytes: UnsafeBufferPointer(rebasing: bytes[range]))
                else {
                    return .failure(Refusal(status: 400, "the dns parameter is not base64url\n"))
                }
                return .success(wire)
            }
        case "POST":
            guard isDNSMessage(contentType: contentType()) else {
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

    /// Where the value of the first `name=value` of a request target's query is, as it is
    /// (base64url needs no decoding). Scans bytes: the target of a DoH GET is long, and splitting it
    /// as characters cost more than answering the query.
    static func queryParameter(_ name: StaticString, in target: UnsafeBufferPointer<UInt8>) -> Range<Int>? {
        let key = UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount)
        guard var start = target.firstIndex(of: UInt8(ascii: "?")).map({ $0 + 1 }) else { return nil }
        while start < target.count {
            let end = target[start...].firstIndex(of: UInt8(ascii: "&")) ?? target.count
            if let equals = target[start..<end].firstIndex(of: UInt8(ascii: "=")), target[start..<equals].elementsEqual(key) {
                return (equals + 1)..<end
            }
            start = end + 1
        }
        return nil
    }
}
