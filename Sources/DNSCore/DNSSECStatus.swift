/// What DNSSEC validation proved about an answer (RFC 4035 §4.3). The validator lives in the
/// `DNSSEC` module; the status is here so that a ``Resolution`` can carry it.
public enum DNSSECStatus: Sendable, Hashable {
    /// A chain of signatures from a trust anchor to the answer.
    case secure
    /// Proven unsigned below a trust anchor (or under a negative trust anchor).
    case insecure
    /// A trust anchor covers the name but the chain fails: the reason says where.
    case bogus(String)
    /// Validation could not decide: no trust anchor covers the name, or a bound was hit.
    case indeterminate(String)

    /// The contract's word: `secure`, `insecure`, `bogus`, `indeterminate`.
    public var name: String {
        switch self {
        case .secure: return "secure"
        case .insecure: return "insecure"
        case .bogus: return "bogus"
        case .indeterminate: return "indeterminate"
        }
    }

    /// Why it is bogus or indeterminate (JSON `dnssec_reason`); nil when secure or insecure.
    public var reason: String? {
        switch self {
        case .bogus(let reason), .indeterminate(let reason): return reason
        case .secure, .insecure: return nil
        }
    }

    public var isBogus: Bool { if case .bogus = self { return true } else { return false } }

    /// Several statuses of one answer (address types, chain links) as one: bogus when any is, else
    /// the first that is not secure, else secure; nil when there are none.
    public static func combined(_ statuses: [DNSSECStatus]) -> DNSSECStatus? {
        guard !statuses.isEmpty else { return nil }
        return statuses.first(where: \.isBogus) ?? statuses.first { $0 != .secure } ?? .secure
    }
}
