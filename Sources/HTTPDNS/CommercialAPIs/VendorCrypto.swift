import Crypto
import CryptoExtras
import DNSCore
import Foundation

/// The primitives the vendor APIs sign and encrypt with, each as the vendor's documents and SDKs
/// use it (docs/commercial-apis.md, "Wire notes"). Failures are ``VendorCryptoError``s that say what
/// was wrong with the input, never what the key is.
package enum VendorCrypto {
    /// The signature Alibaba's legacy API and Baidu share: lowercase hex of MD5 over
    /// `subject + "-" + secret + "-" + expiry`, the secret as text, the expiry in Unix seconds.
    package static func md5Signature(_ subject: String, secret: [UInt8], expiry: Int64) -> String {
        let text = subject + "-" + String(decoding: secret, as: UTF8.self) + "-" + String(expiry)
        return Hex.encode(Array(Insecure.MD5.hash(data: Array(text.utf8))))
    }

    /// Lowercase hex of HMAC-SHA256(`key`, UTF-8 of `message`): Alibaba's v2 signature.
    package static func hmacSHA256Hex(key: [UInt8], message: String) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: Array(message.utf8), using: SymmetricKey(data: key))
        return Hex.encode(Array(code))
    }

    /// AES-128-CBC with PKCS#7 padding; returns IV ‖ ciphertext.
    package static func aesCBCSeal(_ plaintext: [UInt8], key: [UInt8], iv: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        do {
            let sealed = try AES._CBC.encrypt(plaintext, using: SymmetricKey(data: key), iv: AES._CBC.IV(ivBytes: iv))
            return iv + Array(sealed)
        } catch {
            throw .badKey("AES-CBC needs a 16-byte key and IV")
        }
    }

    /// Opens IV ‖ ciphertext made by ``aesCBCSeal(_:key:iv:)``.
    package static func aesCBCOpen(_ sealed: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        guard sealed.count >= 32, sealed.count % 16 == 0 else {
            throw .badCiphertext("AES-CBC data of \(sealed.count) bytes is not an IV and whole blocks")
        }
        do {
            let iv = try AES._CBC.IV(ivBytes: sealed[..<16])
            return Array(try AES._CBC.decrypt(sealed[16...], using: SymmetricKey(data: key), iv: iv))
        } catch {
            // A wrong key or a flipped bit shows as bad padding; CBC has no integrity check beyond that.
            throw .badCiphertext("AES-CBC data does not decrypt (bad padding: wrong key or altered data)")
        }
    }

    /// AES-128-GCM with a 12-byte nonce; returns nonce ‖ ciphertext ‖ 16-byte tag.
    package static func aesGCMSeal(_ plaintext: [UInt8], key: [UInt8], nonce: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        do {
            let box = try AES.GCM.seal(plaintext, using: SymmetricKey(data: key), nonce: AES.GCM.Nonce(data: nonce))
            return nonce + Array(box.ciphertext) + Array(box.tag)
        } catch {
            throw .badKey("AES-GCM needs a 16-byte key and a 12-byte nonce")
        }
    }

    /// Opens nonce ‖ ciphertext ‖ tag made by ``aesGCMSeal(_:key:nonce:)``.
    package static func aesGCMOpen(_ sealed: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        guard sealed.count >= 12 + 16 else {
            throw .badCiphertext("AES-GCM data of \(sealed.count) bytes is shorter than a nonce and a tag")
        }
        do {
            let box = try AES.GCM.SealedBox(
                nonce: AES.GCM.Nonce(data: sealed[..<12]), ciphertext: sealed[12..<(sealed.count - 16)],
                tag: sealed[(sealed.count - 16)...])
            return Array(try AES.GCM.open(box, using: SymmetricKey(data: key)))
        } catch {
            throw .badCiphertext("AES-GCM data fails authentication (wrong key or altered data)")
        }
    }

    /// `count` bytes from the system's CSPRNG (IVs and nonces).
    package static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }
}
