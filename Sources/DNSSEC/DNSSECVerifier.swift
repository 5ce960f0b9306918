import Crypto
import CryptoExtras
import DNSCore
import Foundation

/// The cryptographic core of DNSSEC validation (RFC 4034, RFC 4035 §5.3): one RRSIG over one
/// RRset with one DNSKEY, and a DNSKEY against a DS. No I/O and no chain walking: the validator
/// that fetches DNSKEY/DS through the trusted upstreams builds on these.
///
/// ```swift
/// try DNSSECVerifier.verify(rrset, signature: rrsig, key: dnskey, now: UInt32(Date().timeIntervalSince1970))
/// ```
///
/// RDATA is used as decoded: A, AAAA, CNAME and SOA are re-encoded in canonical form; other types
/// are used as received, which is canonical for every type whose RDATA holds no compressible name
/// (TXT, DNSKEY, DS, NSEC, NSEC3, HTTPS, SVCB, …) — not for NS, MX, PTR or SRV received compressed.
public enum DNSSECVerifier {
    /// Clock skew allowed on both ends of a signature's validity (RFC 6781 §4.1.2 advises some).
    public static let defaultSkew: UInt32 = 300

    /// Checks that `signature` signs `rrset` (one owner, type and class) with `key`, at `now`
    /// (seconds since 1970), within the validity window widened by `skew`.
    /// - Throws: ``DNSSECFailure``: the specific reason it does not verify.
    public static func verify(
        _ rrset: [DNSMessage.Record], signature: RRSIG, key: DNSKEY, now: UInt32, skew: UInt32 = defaultSkew
    ) throws(DNSSECFailure) {
        guard let first = rrset.first else { throw .malformed("an empty RRset") }
        guard rrset.allSatisfy({ $0.name == first.name && $0.type == first.type && $0.recordClass == first.recordClass }) else {
            throw .malformed("records of different owners, types or classes in one RRset")
        }
        guard signature.typeCovered == first.type else {
            throw .keyMismatch("the RRSIG covers \(signature.typeCovered), the RRset is \(first.type)")
        }
        guard key.algorithm == signature.algorithm, key.keyTag == signature.keyTag else {
            throw .keyMismatch(
                "key tag \(key.keyTag) algorithm \(key.algorithm) for an RRSIG of tag \(signature.keyTag) algorithm \(signature.algorithm)")
        }
        guard key.isZoneKey, !key.isRevoked else { throw .keyMismatch("key \(key.keyTag) is not a zone key or is revoked") }
        let ownerLabels = labelCount(first.name)
        guard Int(signature.labels) <= ownerLabels else {
            throw .malformed("an RRSIG labels field of \(signature.labels) for an owner of \(ownerLabels) labels")
        }
        guard isSubdomain(first.name, of: signature.signerName) else {
            throw .keyMismatch("\(signature.signerName) cannot sign \(first.name)")
        }
        // RFC 1982 serial arithmetic: the window may wrap around 2^32.
        if Int32(bitPattern: now &- (signature.expiration &+ skew)) > 0 {
            throw .signatureExpired(expiration: signature.expiration, now: now)
        }
        if Int32(bitPattern: (signature.inception &- skew) &- now) > 0 {
            throw .signatureNotYetValid(inception: signature.inception, now: now)
        }
        let data = signedData(rrset, signature: signature)
        try check(signature.signature, over: data, algorithm: signature.algorithm, publicKey: key.publicKey)
    }

    /// Whether `ds` names `key` at `owner`: key tag, algorithm, and the digest of owner + DNSKEY
    /// RDATA (RFC 4034 §5.1.4; SHA-1, SHA-256, SHA-384).
    public static func matches(_ ds: DSRecord, key: DNSKEY, owner: DomainName) throws(DNSSECFailure) -> Bool {
        guard ds.keyTag == key.keyTag, ds.algorithm == key.algorithm else { return false }
        let input = owner.wire + key.rdata
        let digest: [UInt8]
        switch ds.digestType {
        case 1: digest = Array(Insecure.SHA1.hash(data: input))
        case 2: digest = Array(SHA256.hash(data: input))
        case 4: digest = Array(SHA384.hash(data: input))
        default: throw .unsupportedDigest(ds.digestType)
        }
        return digest == ds.digest
    }

    /// RFC 4034 §3.1.8.1: the RRSIG RDATA without its signature, then each RR in canonical form
    /// and order, with the original TTL and, for a wildcard expansion, the wildcard owner.
    static func signedData(_ rrset: [DNSMessage.Record], signature: RRSIG) -> [UInt8] {
        var owner = rrset[0].name.wire
        let labels = labelCount(rrset[0].name)
        if Int(signature.labels) < labels { owner = [1, UInt8(ascii: "*")] + suffix(of: owner, labels: Int(signature.labels)) }
        var rdatas = Set<[UInt8]>()
        for record in rrset { rdatas.insert(record.data.wire) }
        var data = signature.signedPrefix
        for rdata in rdatas.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            data += owner
            data.append16(rrset[0].type.rawValue)
            data.append16(rrset[0].recordClass)
            data.append32(signature.originalTTL)
            data.append16(UInt16(rdata.count))
            data += rdata
        }
        return data
    }

    static func check(_ signature: [UInt8], over data: [UInt8], algorithm: UInt8, publicKey: [UInt8]) throws(DNSSECFailure) {
        guard let known = DNSSECAlgorithm(rawValue: algorithm) else { throw .unsupportedAlgorithm(algorithm) }
        let valid: Bool
        do {
            switch known {
            case .rsaSHA256, .rsaSHA512:
                let key = try rsaKey(publicKey)
                let rsaSignature = _RSA.Signing.RSASignature(rawRepresentation: signature)
                valid =
                    known == .rsaSHA256
                    ? key.isValidSignature(rsaSignature, for: SHA256.hash(data: data), padding: .insecurePKCS1v1_5)
                    : key.isValidSignature(rsaSignature, for: SHA512.hash(data: data), padding: .insecurePKCS1v1_5)
            case .ecdsaP256SHA256:
                guard publicKey.count == 64, signature.count == 64 else {
                    throw DNSSECFailure.malformed("a P-256 key or signature of the wrong size")
                }
                let key = try P256.Signing.PublicKey(rawRepresentation: publicKey)
                valid = key.isValidSignature(try P256.Signing.ECDSASignature(rawRepresentation: signature), for: SHA256.hash(data: data))
            case .ecdsaP384SHA384:
                guard publicKey.count == 96, signature.count == 96 else {
                    throw DNSSECFailure.malformed("a P-384 key or signature of the wrong size")
                }
                let key = try P384.Signing.PublicKey(rawRepresentation: publicKey)
                valid = key.isValidSignature(try P384.Signing.ECDSASignature(rawRepresentation: signature), for: SHA384.hash(data: data))
            case .ed25519:
                guard publicKey.count == 32, signature.count == 64 else {
                    throw DNSSECFailure.malformed("an Ed25519 key or signature of the wrong size")
                }
                valid = try Curve25519.Signing.PublicKey(rawRepresentation: publicKey).isValidSignature(signature, for: data)
            }
        } catch let failure as DNSSECFailure {
            throw failure
        } catch {
            throw .malformed("a public key or signature that does not decode (\(error))")
        }
        guard valid else { throw .badSignature }
    }

    /// RFC 3110: exponent length (1 byte, or 0 then 2 bytes), exponent, modulus. Built as DER so
    /// that keys from 1,024 bits are accepted (swift-crypto's n/e initializer wants 2,048).
    static func rsaKey(_ bytes: [UInt8]) throws -> _RSA.Signing.PublicKey {
        guard let firstByte = bytes.first else { throw DNSSECFailure.malformed("an empty RSA key") }
        var index = 1
        var exponentLength = Int(firstByte)
        if exponentLength == 0 {
            guard bytes.count > 3 else { throw DNSSECFailure.malformed("a truncated RSA key") }
            exponentLength = Int(bytes[1]) << 8 | Int(bytes[2])
            index = 3
        }
        guard exponentLength > 0, bytes.count > index + exponentLength else { throw DNSSECFailure.malformed("a truncated RSA key") }
        let exponent = Array(bytes[index..<(index + exponentLength)])
        let modulus = Array(bytes[(index + exponentLength)...])
        let bits = modulus.count * 8 - (modulus.first.map { $0.leadingZeroBitCount } ?? 0)
        guard bits >= 1_024 else { throw DNSSECFailure.keyTooWeak(bits: bits) }
        let rsaPublicKey = DER.sequence(DER.integer(modulus) + DER.integer(exponent))
        // SubjectPublicKeyInfo: rsaEncryption OID 1.2.840.113549.1.1.1 with NULL parameters.
        let algorithm = DER.sequence([0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00])
        let spki = DER.sequence(algorithm + DER.bitString(rsaPublicKey))
        return try _RSA.Signing.PublicKey(unsafeDERRepresentation: spki)
    }

    static func labelCount(_ name: DomainName) -> Int { NameLabels.count(name) }

    static func suffix(of wire: [UInt8], labels: Int) -> [UInt8] { NameLabels.suffix(of: wire, labels: labels) }

    static func isSubdomain(_ name: DomainName, of zone: DomainName) -> Bool { NameLabels.isSubdomain(name, of: zone) }
}

/// The few DER encodings an RSA SubjectPublicKeyInfo needs.
enum DER {
    static func length(_ count: Int) -> [UInt8] {
        if count < 0x80 { return [UInt8(count)] }
        var bytes: [UInt8] = []
        var rest = count
        while rest > 0 {
            bytes.insert(UInt8(rest & 0xFF), at: 0)
            rest >>= 8
        }
        return [0x80 | UInt8(bytes.count)] + bytes
    }

    static func sequence(_ content: [UInt8]) -> [UInt8] { [0x30] + length(content.count) + content }

    static func integer(_ magnitude: [UInt8]) -> [UInt8] {
        var bytes = Array(magnitude.drop { $0 == 0 })
        if bytes.isEmpty { bytes = [0] }
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return [0x02] + length(bytes.count) + bytes
    }

    static func bitString(_ content: [UInt8]) -> [UInt8] { [0x03] + length(content.count + 1) + [0] + content }
}
