// The fuzz build's stand-in for Sources/HTTPDNS/CommercialAPIs/VendorCrypto.swift, which needs swift-crypto:
// the decoders under test only open AES data, and here every AES open fails as a wrong key would.
// DES (pure Swift, VendorCipherText.swift) is the real one.
package enum VendorCrypto {
    package static func md5Signature(_ subject: String, secret: [UInt8], expiry: Int64) -> String { "" }
    package static func hmacSHA256Hex(key: [UInt8], message: String) -> String { "" }
    package static func aesCBCSeal(_ plaintext: [UInt8], key: [UInt8], iv: [UInt8]) throws(VendorCryptoError) -> [UInt8] { iv + plaintext }
    package static func aesCBCOpen(_ sealed: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        throw .badCiphertext("AES is not in the fuzz build")
    }
    package static func aesGCMSeal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws(VendorCryptoError) -> [UInt8] { nonce + plaintext }
    package static func aesGCMOpen(_ sealed: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        throw .badCiphertext("AES is not in the fuzz build")
    }
    @Sendable package static func randomBytes(_ count: Int) -> [UInt8] { Array(repeating: 0, count: count) }
}
