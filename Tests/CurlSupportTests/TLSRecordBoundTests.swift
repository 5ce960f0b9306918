import CCurl
import Foundation
import Testing

@testable import CurlSupport

/// What the handshake records (shim.h's `httpdns_tls_record`) is read back into Swift within stated
/// bounds: at most 16 certificates of at most 64 KiB each, each copied by `i2d_X509` into an array
/// of the length it reported, and ALPN's pick at most the record's 32 bytes. Tested at the bounds,
/// with certificates made by `openssl` and stacked as `X509_STORE_CTX_get1_chain` returns them.
@Suite struct TLSRecordBoundTests {
    /// A self-signed certificate naming `names` DNS names (each adds 18 bytes of DER), as DER.
    static func certificate(names: Int) throws -> [UInt8] {
        try certificate(subjectAltName: (0..<names).map { String(format: "DNS:n%04d.bound.test", $0) }.joined(separator: ","))
    }

    /// A self-signed certificate with `subjectAltName` (openssl's syntax), as DER.
    static func certificate(subjectAltName: String) throws -> [UInt8] {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("chain-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let out = directory.appendingPathComponent("certificate.der")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            directory.appendingPathComponent("key.pem").path, "-subj", "/CN=bound.test", "-days", "1", "-outform", "DER", "-out", out.path,
            "-addext", "subjectAltName=" + subjectAltName,
        ]
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try #require(process.terminationStatus == 0, "openssl req failed")
        return Array(try Data(contentsOf: out))
    }

    /// A record holding a stack of `count` certificates decoded from `der`.
    static func record(_ der: [UInt8], count: Int) throws -> httpdns_tls_record {
        var record = httpdns_tls_record()
        record.keep_chain = 1
        let stack = try #require(OPENSSL_sk_new_null())
        for _ in 0..<count {
            let certificate = der.withUnsafeBufferPointer { buffer -> UnsafeMutableRawPointer? in
                var cursor = buffer.baseAddress
                return d2i_X509(nil, &cursor, buffer.count)
            }
            #expect(OPENSSL_sk_push(stack, try #require(certificate)) > 0)
        }
        record.chain = stack
        return record
    }

    /// DDR's check (RFC 9462 §4.2): the certificate's IP addresses, read by `X509_check_ip` from a
    /// certificate `d2i_X509` decodes from at most 64 KiB of DER.
    @Test func aCertificateNamesTheAddressesOfItsSubjectAltNameOnly() throws {
        let der = try Self.certificate(subjectAltName: "DNS:daemon.test,IP:127.0.0.1,IP:::1")
        #expect(CurlConnection.certificate(der, namesAddress: [127, 0, 0, 1]))
        #expect(CurlConnection.certificate(der, namesAddress: Array(repeating: 0, count: 15) + [1]))
        #expect(!CurlConnection.certificate(der, namesAddress: [127, 0, 0, 2]))
        #expect(!CurlConnection.certificate(der, namesAddress: [127, 0, 0, 1, 0]), "an address is 4 or 16 bytes")
        #expect(!CurlConnection.certificate(der, namesAddress: []))
        let named = try Self.certificate(subjectAltName: "DNS:daemon.test,DNS:127.0.0.1")
        #expect(!CurlConnection.certificate(named, namesAddress: [127, 0, 0, 1]), "a DNS name spelling the address is not the address")
        // The bound: DER with trailing bytes up to exactly 64 KiB is read (the certificate is its
        // prefix); one byte more is not read at all. Cut short, it does not decode.
        let atBound = der + Array(repeating: 0, count: 64 * 1024 - der.count)
        #expect(CurlConnection.certificate(atBound, namesAddress: [127, 0, 0, 1]))
        #expect(!CurlConnection.certificate(atBound + [0], namesAddress: [127, 0, 0, 1]))
        #expect(!CurlConnection.certificate(Array(der.dropLast()), namesAddress: [127, 0, 0, 1]))
        #expect(!CurlConnection.certificate([], namesAddress: [127, 0, 0, 1]))
    }

    @Test func sixteenCertificatesAreReadAndSeventeenAreNone() throws {
        let der = try Self.certificate(names: 1)
        var sixteen = try Self.record(der, count: 16)
        defer { httpdns_tls_record_clear(&sixteen) }
        let chain = CurlConnection.verifiedChain(sixteen)
        #expect(chain.count == 16)
        #expect(chain.allSatisfy { $0 == der }, "each certificate's DER, byte for byte")
        var seventeen = try Self.record(der, count: 17)
        defer { httpdns_tls_record_clear(&seventeen) }
        #expect(CurlConnection.verifiedChain(seventeen).isEmpty, "over the bound: no chain (the caller fails closed)")
        var empty = try Self.record(der, count: 0)
        defer { httpdns_tls_record_clear(&empty) }
        #expect(CurlConnection.verifiedChain(empty).isEmpty)
        #expect(CurlConnection.verifiedChain(httpdns_tls_record()).isEmpty)
    }

    @Test func aCertificateOver64KiBIsNone() throws {
        // 3,550 names: just under 65,536 bytes of DER; 3,700: just over.
        let under = try Self.certificate(names: 3_550), over = try Self.certificate(names: 3_700)
        try #require(under.count <= 65_536 && under.count > 60_000, "\(under.count)")
        try #require(over.count > 65_536, "\(over.count)")
        var whole = try Self.record(under, count: 2)
        defer { httpdns_tls_record_clear(&whole) }
        #expect(CurlConnection.verifiedChain(whole) == [under, under])
        var big = try Self.record(over, count: 1)
        defer { httpdns_tls_record_clear(&big) }
        #expect(CurlConnection.verifiedChain(big).isEmpty)
    }

    @Test func alpnIsReadWithinTheRecordsThirtyTwoBytes() {
        var record = httpdns_tls_record()
        withUnsafeMutableBytes(of: &record.alpn) { $0.copyBytes(from: Array(repeating: UInt8(ascii: "p"), count: 32)) }
        #expect(CurlConnection.selectedProtocol(record) == nil, "nothing picked")
        record.alpn_length = 2
        #expect(CurlConnection.selectedProtocol(record) == "pp")
        record.alpn_length = 32
        #expect(CurlConnection.selectedProtocol(record) == String(repeating: "p", count: 32))
        for length: UInt32 in [33, .max] {
            record.alpn_length = length
            #expect(CurlConnection.selectedProtocol(record) == String(repeating: "p", count: 32), "a length past the field reads the field only")
        }
    }
}
