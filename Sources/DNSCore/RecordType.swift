/// A resource record type (RFC 1035 §3.2.2), open to values this library does not interpret.
public struct RecordType: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let a = RecordType(rawValue: 1)
    public static let ns = RecordType(rawValue: 2)
    public static let cname = RecordType(rawValue: 5)
    public static let soa = RecordType(rawValue: 6)
    public static let ptr = RecordType(rawValue: 12)
    public static let mx = RecordType(rawValue: 15)
    public static let txt = RecordType(rawValue: 16)
    public static let aaaa = RecordType(rawValue: 28)
    public static let opt = RecordType(rawValue: 41)
    public static let svcb = RecordType(rawValue: 64)
    public static let https = RecordType(rawValue: 65)

    public var description: String {
        switch self {
        case .a: return "A"
        case .ns: return "NS"
        case .cname: return "CNAME"
        case .soa: return "SOA"
        case .ptr: return "PTR"
        case .mx: return "MX"
        case .txt: return "TXT"
        case .aaaa: return "AAAA"
        case .opt: return "OPT"
        case .svcb: return "SVCB"
        case .https: return "HTTPS"
        default: return "TYPE\(rawValue)"
        }
    }
}

/// Response codes (RFC 1035 §4.1.1, RFC 6895).
public struct ResponseCode: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let noError = ResponseCode(rawValue: 0)
    public static let formatError = ResponseCode(rawValue: 1)
    public static let serverFailure = ResponseCode(rawValue: 2)
    public static let nameError = ResponseCode(rawValue: 3)
    public static let notImplemented = ResponseCode(rawValue: 4)
    public static let refused = ResponseCode(rawValue: 5)

    public var description: String {
        switch self {
        case .noError: return "NOERROR"
        case .formatError: return "FORMERR"
        case .serverFailure: return "SERVFAIL"
        case .nameError: return "NXDOMAIN"
        case .notImplemented: return "NOTIMP"
        case .refused: return "REFUSED"
        default: return "RCODE\(rawValue)"
        }
    }
}

/// The address record types a lookup asks for.
public enum AddressQuery: String, Sendable, Hashable, CaseIterable {
    case a, aaaa, both

    /// The record types to ask, in the order they are asked.
    public var recordTypes: [RecordType] {
        switch self {
        case .a: return [.a]
        case .aaaa: return [.aaaa]
        case .both: return [.a, .aaaa]
        }
    }
}
