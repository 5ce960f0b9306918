import DNSCore
import Foundation

/// Which address families a vendor request asks for.
package enum VendorFamilies: Sendable, Hashable {
    case ipv4, ipv6, both

    package init(_ type: RecordType) {
        self = type == .aaaa ? .ipv6 : .ipv4
    }

    var includesIPv4: Bool { self != .ipv6 }
    var includesIPv6: Bool { self != .ipv4 }
}

/// One family of a vendor's answer for one name.
package struct VendorFamilyAnswer: Sendable, Hashable {
    /// Empty: the name has no record of this family (NODATA).
    package var addresses: [IPAddress]
    /// The TTL the vendor gave, or nil when it gave none.
    package var ttl: UInt32?

    package init(addresses: [IPAddress], ttl: UInt32?) {
        self.addresses = addresses
        self.ttl = ttl
    }
}

/// What a vendor said about one name.
package struct VendorAnswer: Sendable, Hashable {
    package var name: DomainName
    /// nil: the answer does not speak of this family.
    package var ipv4: VendorFamilyAnswer?
    package var ipv6: VendorFamilyAnswer?

    package init(name: DomainName, ipv4: VendorFamilyAnswer? = nil, ipv6: VendorFamilyAnswer? = nil) {
        self.name = name
        self.ipv4 = ipv4
        self.ipv6 = ipv6
    }

    /// The most addresses one family of one name may hold. Services answer a handful; a body of
    /// `::;::;…` thousands long is no answer to believe, and would make DNS responses larger than
    /// a DNS message can be.
    package static let maxAddressesPerFamily = 256

    /// Whether every family holds at most ``maxAddressesPerFamily`` addresses.
    package var isWithinBounds: Bool {
        (ipv4?.addresses.count ?? 0) <= Self.maxAddressesPerFamily && (ipv6?.addresses.count ?? 0) <= Self.maxAddressesPerFamily
    }

    /// The TTL used when a vendor answer carries none: 60 s, what Alibaba's C and Android SDKs use,
    /// short enough that a missing TTL never pins an address for long.
    package static let defaultTTL: UInt32 = 60

    /// The answer to an A or AAAA question, or nil when this answer does not speak of that family.
    /// Addresses of the other family in the list (Volcengine mixes them) are left out.
    package func answer(for type: RecordType) -> AddressAnswer? {
        guard let family = type == .aaaa ? ipv6 : ipv4 else { return nil }
        let wanted: IPAddress.Family = type == .aaaa ? .ipv6 : .ipv4
        let ttl = family.ttl ?? Self.defaultTTL
        let addresses = family.addresses.filter { $0.family == wanted }.map { ResolvedAddress(ip: $0, ttl: ttl) }
        guard !addresses.isEmpty else { return .nodata(negativeTTL: family.ttl ?? Self.defaultTTL) }
        return .addresses(addresses, canonicalName: name)
    }
}

/// A vendor API's failure and what the client may do about it.
package struct VendorFault: Error, Sendable {
    package enum Retry: Sendable, Equatable {
        /// The same request fails the same everywhere (signature, account, name): give up.
        case never
        /// This service IP cannot answer (5xx, `ServiceLevelDeny`, connect failure): try the next.
        case nextAddress
        /// The signature's expiry was refused: correct the clock from the server's `Date` and retry once.
        case afterClockSync
    }

    package var error: DNSError
    package var retry: Retry

    package init(_ code: DNSError.Code, _ message: String, retry: Retry = .never) {
        error = DNSError(code, message)
        self.retry = retry
    }
}

/// One vendor API's request and response formats, without I/O: what the upstream sends and how it
/// reads the reply. Each conformer is tested against the vectors of docs/commercial-apis.md.
package protocol VendorWireFormat: Sendable {
    /// The request path (without the query), which names the API in results and errors.
    var path: String { get }
    /// The path and query asking for `names`, signed (and encrypted) as of `wallSeconds` (Unix time,
    /// already corrected for the server's clock).
    func request(names: [DomainName], families: VendorFamilies, clientIP: IPAddress?, wallSeconds: Int64) throws(VendorFault) -> String
    /// Reads a reply to a request for `names`. Answers for names not asked are dropped.
    func decode(status: Int, body: [UInt8], names: [DomainName], families: VendorFamilies) throws(VendorFault) -> [VendorAnswer]
}

extension VendorWireFormat {
    /// The signature lifetime: 10 minutes, as Alibaba's iOS and Android SDKs use (the documented
    /// maximum is 24 h; a short one limits how long a captured request can be replayed).
    package static var signatureLifetime: Int64 { 600 }
}

/// Helpers shared by the vendor formats.
enum VendorText {
    /// Percent-encodes a query value (RFC 3986 unreserved characters and `,` stay as they are).
    static func query(_ value: String) -> String {
        var out = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: ","):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + Hex.encode([byte]).uppercased()
            }
        }
        return out
    }

    /// `k=v&…` with percent-encoded values, in the order given.
    static func queryString(_ items: [(String, String)]) -> String {
        items.map { "\($0.0)=\(query($0.1))" }.joined(separator: "&")
    }

    static func names(_ names: [DomainName]) -> String {
        names.map(\.description).joined(separator: ",")
    }

    static func domain(_ text: some StringProtocol) -> DomainName? {
        try? DomainName(String(text))
    }

    /// Parses `text` as an address list entry, or throws a fault naming the bad value.
    static func address(_ text: some StringProtocol, vendor: String) throws(VendorFault) -> IPAddress {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let ip = IPAddress(trimmed) else {
            throw VendorFault(.malformedResponse, "\(vendor) answered an address that does not parse: '\(trimmed.prefix(64))'")
        }
        return ip
    }

    /// A TTL from JSON: a non-negative whole number (some services send it as a string).
    static func ttl(_ value: Any?) -> UInt32? {
        switch value {
        case let number as NSNumber where number.doubleValue >= 0 && number.doubleValue.isFinite:
            return UInt32(min(number.doubleValue.rounded(.down), Double(Int32.max)))
        case let text as String:
            return UInt32(text)
        default:
            return nil
        }
    }

    /// A 200 body as a JSON object, or a fault that says what it was instead.
    static func jsonObject(_ body: [UInt8], vendor: String) throws(VendorFault) -> [String: Any] {
        guard !body.isEmpty else { throw VendorFault(.malformedResponse, "\(vendor) answered an empty body", retry: .nextAddress) }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)), let dictionary = object as? [String: Any] else {
            let start = String(decoding: body.prefix(16), as: UTF8.self).lowercased()
            let what = start.contains("<html") || start.contains("<!doctype") ? "an HTML page" : "a body that is not a JSON object"
            throw VendorFault(.malformedResponse, "\(vendor) answered \(what)", retry: .nextAddress)
        }
        return dictionary
    }

    /// The `code` member of a JSON error body, if the body is one.
    static func errorCode(_ body: [UInt8]) -> String? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] else { return nil }
        return object["code"] as? String
    }

    /// The fault for a non-200 status that the API documents no body for.
    static func statusFault(_ status: Int, vendor: String) -> VendorFault {
        switch status {
        case 401, 403: return VendorFault(.unauthorized, "\(vendor) refused the credentials (HTTP \(status))")
        case 429: return VendorFault(.rateLimited, "\(vendor) is rate-limiting this account (HTTP 429)")
        case 500...599: return VendorFault(.httpStatus, "\(vendor) answered HTTP \(status)", retry: .nextAddress)
        default: return VendorFault(.httpStatus, "\(vendor) answered HTTP \(status)")
        }
    }
}
