import DNSCore

extension RecordType {
    public static let dname = RecordType(rawValue: 39)
    public static let ds = RecordType(rawValue: 43)
    public static let rrsig = RecordType(rawValue: 46)
    public static let nsec = RecordType(rawValue: 47)
    public static let dnskey = RecordType(rawValue: 48)
    public static let nsec3 = RecordType(rawValue: 50)
}

/// DNSSEC algorithm numbers (RFC 8624 §3.1): the ones this validator verifies.
public enum DNSSECAlgorithm: UInt8, Sendable, CaseIterable {
    case rsaSHA256 = 8
    case rsaSHA512 = 10
    case ecdsaP256SHA256 = 13
    case ecdsaP384SHA384 = 14
    case ed25519 = 15
}

/// Why DNSSEC data does not verify or does not decode: each case one specific reason, as a
/// `dnssec_reason` says it.
public enum DNSSECFailure: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case unsupportedAlgorithm(UInt8)
    case unsupportedDigest(UInt8)
    case keyMismatch(String)
    case signatureExpired(expiration: UInt32, now: UInt32)
    case signatureNotYetValid(inception: UInt32, now: UInt32)
    case badSignature
    case keyTooWeak(bits: Int)
    /// A proof the answer needs is missing or does not hold (denial, wildcard, unsigned data).
    case unproven(String)
    /// Checking would cost more than the bounds allow (RFC 9276 NSEC3 iterations): not bogus.
    case tooCostly(String)

    public var description: String {
        switch self {
        case .malformed(let what): return "malformed DNSSEC data: \(what)"
        case .unsupportedAlgorithm(let number): return "unsupported DNSSEC algorithm \(number)"
        case .unsupportedDigest(let number): return "unsupported DS digest type \(number)"
        case .keyMismatch(let what): return "the key does not match: \(what)"
        case let .signatureExpired(expiration, now): return "the signature expired at \(expiration) (now \(now))"
        case let .signatureNotYetValid(inception, now): return "the signature is valid from \(inception) (now \(now))"
        case .badSignature: return "the signature does not verify"
        case .keyTooWeak(let bits): return "an RSA key of \(bits) bits (1,024 at least)"
        case .unproven(let what): return what
        case .tooCostly(let what): return "too costly to check: \(what)"
        }
    }
}

/// A DNSKEY record's data (RFC 4034 §2).
public struct DNSKEY: Sendable, Hashable {
    public var flags: UInt16
    public var protocolField: UInt8
    public var algorithm: UInt8
    public var publicKey: [UInt8]
    /// The RDATA as received (the key tag and DS digests are computed over it).
    public let rdata: [UInt8]

    public init(rdata: [UInt8]) throws(DNSSECFailure) {
        guard rdata.count > 4 else { throw .malformed("a DNSKEY of \(rdata.count) bytes") }
        flags = UInt16(rdata[0]) << 8 | UInt16(rdata[1])
        protocolField = rdata[2]
        algorithm = rdata[3]
        publicKey = Array(rdata[4...])
        self.rdata = rdata
        guard protocolField == 3 else { throw .malformed("DNSKEY protocol \(protocolField), not 3") }
    }

    /// Bit 7: a zone key, the only kind that may sign RRsets (RFC 4034 §2.1.1).
    public var isZoneKey: Bool { flags & 0x0100 != 0 }
    /// Bit 15: a secure entry point (KSK), advisory only.
    public var isSecureEntryPoint: Bool { flags & 0x0001 != 0 }
    /// Bit 8: revoked (RFC 5011); a revoked key validates nothing.
    public var isRevoked: Bool { flags & 0x0080 != 0 }

    /// RFC 4034 Appendix B.
    public var keyTag: UInt16 {
        var sum: UInt32 = 0
        for (index, byte) in rdata.enumerated() { sum += index & 1 == 0 ? UInt32(byte) << 8 : UInt32(byte) }
        sum += (sum >> 16) & 0xFFFF
        return UInt16(sum & 0xFFFF)
    }
}

/// An RRSIG record's data (RFC 4034 §3).
public struct RRSIG: Sendable, Hashable {
    public var typeCovered: RecordType
    public var algorithm: UInt8
    public var labels: UInt8
    public var originalTTL: UInt32
    public var expiration: UInt32
    public var inception: UInt32
    public var keyTag: UInt16
    public var signerName: DomainName
    public var signature: [UInt8]
    /// The RDATA up to the signature, which the signed data starts with (RFC 4034 §3.1.8.1),
    /// with the signer's name in canonical (lowercase, uncompressed) form.
    public let signedPrefix: [UInt8]

    public init(rdata: [UInt8]) throws(DNSSECFailure) {
        guard rdata.count > 18 else { throw .malformed("an RRSIG of \(rdata.count) bytes") }
        func u16(_ at: Int) -> UInt16 { UInt16(rdata[at]) << 8 | UInt16(rdata[at + 1]) }
        func u32(_ at: Int) -> UInt32 { UInt32(u16(at)) << 16 | UInt32(u16(at + 2)) }
        typeCovered = RecordType(rawValue: u16(0))
        algorithm = rdata[2]
        labels = rdata[3]
        originalTTL = u32(4)
        expiration = u32(8)
        inception = u32(12)
        keyTag = u16(16)
        let (name, end) = try Self.name(in: rdata, at: 18)
        signerName = name
        signature = Array(rdata[end...])
        guard !signature.isEmpty else { throw .malformed("an RRSIG without a signature") }
        signedPrefix = Array(rdata[..<18]) + name.wire
    }

    /// An uncompressed name (RFC 4034 §3.1.7 forbids compression here), lowercased.
    static func name(in bytes: [UInt8], at start: Int) throws(DNSSECFailure) -> (DomainName, Int) {
        var wire: [UInt8] = []
        var index = start
        while true {
            guard index < bytes.count else { throw .malformed("a signer name that runs past the record") }
            let length = Int(bytes[index])
            guard length & 0xC0 == 0 else { throw .malformed("a compressed or extended label in a signer name") }
            guard index + 1 + length <= bytes.count, wire.count + 1 + length <= DomainName.maxWireLength else {
                throw .malformed("a signer name that runs past the record")
            }
            wire.append(UInt8(length))
            for byte in bytes[(index + 1)..<(index + 1 + length)] {
                wire.append(byte >= 0x41 && byte <= 0x5A ? byte + 0x20 : byte)
            }
            index += 1 + length
            if length == 0 { return (DomainName(uncheckedWire: wire), index) }
        }
    }
}

/// A DS record's data (RFC 4034 §5).
public struct DSRecord: Sendable, Hashable {
    public var keyTag: UInt16
    public var algorithm: UInt8
    public var digestType: UInt8
    public var digest: [UInt8]

    public init(rdata: [UInt8]) throws(DNSSECFailure) {
        guard rdata.count > 4 else { throw .malformed("a DS of \(rdata.count) bytes") }
        keyTag = UInt16(rdata[0]) << 8 | UInt16(rdata[1])
        algorithm = rdata[2]
        digestType = rdata[3]
        digest = Array(rdata[4...])
    }

    public init(keyTag: UInt16, algorithm: UInt8, digestType: UInt8, digest: [UInt8]) {
        self.keyTag = keyTag
        self.algorithm = algorithm
        self.digestType = digestType
        self.digest = digest
    }
}
