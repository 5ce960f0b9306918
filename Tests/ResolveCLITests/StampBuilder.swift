import Foundation
import TestSupport

/// DNS stamps (sdns://) built field by field for tests, and the certificate hashes they carry,
/// computed by Python's `cryptography`, independently of the client's own DER reading.
enum StampBuilder {
    /// A DoH (`https`) or DoT (`tls`) stamp: no properties, `address` as IP:PORT, `hashes`, then
    /// the host (with its port), and a DoH stamp's path.
    static func stamp(doh path: String? = nil, address: String, hashes: [[UInt8]], host: String) -> String {
        func lp(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }
        var bytes: [UInt8] = [path == nil ? 3 : 2, 0, 0, 0, 0, 0, 0, 0, 0] + lp(address)
        for (index, hash) in hashes.enumerated() { bytes += [UInt8(hash.count) | (index < hashes.count - 1 ? 0x80 : 0)] + hash }
        if hashes.isEmpty { bytes.append(0) }
        bytes += lp(host)
        if let path { bytes += lp(path) }
        return "sdns://"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// SHA-256 of the `tbsCertificate` of the test CA's certificate for `name` (`.testenv/ca/NAME.pem`).
    static func tbsHash(_ name: String) async throws -> [UInt8] {
        let script = """
            import hashlib, sys
            from cryptography import x509
            print(hashlib.sha256(x509.load_pem_x509_certificate(open(sys.argv[1], "rb").read()).tbs_certificate_bytes).hexdigest())
            """
        let output = try await CLI.run(["-c", script, "\(TestEnvironment.root)/.testenv/ca/\(name).pem"], executable: "/usr/bin/python3")
        let hex = Array(output.stdout.trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        return stride(from: 0, to: hex.count - 1, by: 2).compactMap { UInt8(String(decoding: hex[$0...$0 + 1], as: UTF8.self), radix: 16) }
    }
}
