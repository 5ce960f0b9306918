import DNSCore

// The vendor APIs' pure parts: hex, DES and their errors. No crypto library here, so the answer
// decoders build without swift-crypto (Scripts/fuzz.sh compiles them apart from the package).

extension VendorCrypto {
    /// DES-ECB with PKCS#5 padding under the first 8 bytes of `key` (Tencent's `alg=des`).
    package static func desECBSeal(_ plaintext: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        guard key.count >= 8 else { throw .badKey("DES needs a key of at least 8 bytes") }
        let des = DES(key: Array(key.prefix(8)))
        let pad = 8 - plaintext.count % 8
        let padded = plaintext + [UInt8](repeating: UInt8(pad), count: pad)
        var output: [UInt8] = []
        output.reserveCapacity(padded.count)
        for start in stride(from: 0, to: padded.count, by: 8) {
            output += des.encrypt(Array(padded[start..<start + 8]))
        }
        return output
    }

    /// Opens DES-ECB data made by ``desECBSeal(_:key:)``.
    package static func desECBOpen(_ sealed: [UInt8], key: [UInt8]) throws(VendorCryptoError) -> [UInt8] {
        guard key.count >= 8 else { throw .badKey("DES needs a key of at least 8 bytes") }
        guard !sealed.isEmpty, sealed.count % 8 == 0 else {
            throw .badCiphertext("DES data of \(sealed.count) bytes is not whole 8-byte blocks")
        }
        let des = DES(key: Array(key.prefix(8)))
        var output: [UInt8] = []
        output.reserveCapacity(sealed.count)
        for start in stride(from: 0, to: sealed.count, by: 8) {
            output += des.decrypt(Array(sealed[start..<start + 8]))
        }
        guard let pad = output.last, (1...8).contains(pad), output.suffix(Int(pad)).allSatisfy({ $0 == pad }) else {
            throw .badCiphertext("DES data does not decrypt (bad padding: wrong key or altered data)")
        }
        return Array(output.dropLast(Int(pad)))
    }
}

/// Why vendor data could not be signed, encrypted or decrypted.
package enum VendorCryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    case badKey(String)
    case badCiphertext(String)

    package var description: String {
        switch self {
        case let .badKey(why), let .badCiphertext(why): return why
        }
    }
}

/// Lowercase hexadecimal, as every vendor API writes bytes.
package enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0xf)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// The bytes of an even-length hex string (either case), or nil.
    package static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count / 2)
        var index = 0
        while index < utf8.count {
            guard let high = value(utf8[index]), let low = value(utf8[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func value(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

/// Single DES (FIPS 46-3) on one 8-byte block. swift-crypto has no DES, and Tencent's HTTP API still
/// encrypts with it; this is the textbook algorithm, checked against FIPS 81's and Tencent's vectors.
/// DES is broken (56-bit keys): it is here only to speak that API, never as a protection of its own.
struct DES {
    private let subkeys: [UInt64]

    init(key: [UInt8]) {
        precondition(key.count == 8)
        let key64 = key.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let permuted = Self.permute(key64, width: 64, Self.pc1)
        var c = permuted >> 28, d = permuted & 0xFFF_FFFF
        var subkeys: [UInt64] = []
        for shift in Self.shifts {
            c = ((c << shift) | (c >> (28 - shift))) & 0xFFF_FFFF
            d = ((d << shift) | (d >> (28 - shift))) & 0xFFF_FFFF
            subkeys.append(Self.permute(c << 28 | d, width: 56, Self.pc2))
        }
        self.subkeys = subkeys
    }

    func encrypt(_ block: [UInt8]) -> [UInt8] { crypt(block, keys: subkeys) }

    func decrypt(_ block: [UInt8]) -> [UInt8] { crypt(block, keys: subkeys.reversed()) }

    private func crypt(_ block: [UInt8], keys: [UInt64]) -> [UInt8] {
        let input = block.reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        let permuted = Self.permute(input, width: 64, Self.initialPermutation)
        var left = permuted >> 32, right = permuted & 0xFFFF_FFFF
        for key in keys {
            (left, right) = (right, left ^ Self.feistel(right, key))
        }
        let output = Self.permute(right << 32 | left, width: 64, Self.finalPermutation)
        return (0..<8).map { UInt8(truncatingIfNeeded: output >> UInt64(56 - 8 * $0)) }
    }

    private static func feistel(_ half: UInt64, _ key: UInt64) -> UInt64 {
        let mixed = permute(half, width: 32, expansion) ^ key
        var substituted: UInt64 = 0
        for box in 0..<8 {
            let six = Int((mixed >> UInt64(42 - 6 * box)) & 0x3f)
            let row = (six & 0x20) >> 4 | six & 1
            let column = (six >> 1) & 0xf
            substituted = substituted << 4 | UInt64(sBoxes[box][row * 16 + column])
        }
        return permute(substituted, width: 32, pBox)
    }

    /// Bit `table[i]` of `input` (1 = the most significant of `width` bits) becomes bit i of the output.
    private static func permute(_ input: UInt64, width: Int, _ table: [UInt8]) -> UInt64 {
        var output: UInt64 = 0
        for position in table {
            output = output << 1 | (input >> UInt64(width - Int(position))) & 1
        }
        return output
    }

    private static let shifts: [UInt64] = [1, 1, 2, 2, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 1]
    private static let pc1: [UInt8] = [
        57, 49, 41, 33, 25, 17, 9, 1, 58, 50, 42, 34, 26, 18, 10, 2, 59, 51, 43, 35, 27, 19, 11, 3, 60, 52, 44, 36,
        63, 55, 47, 39, 31, 23, 15, 7, 62, 54, 46, 38, 30, 22, 14, 6, 61, 53, 45, 37, 29, 21, 13, 5, 28, 20, 12, 4,
    ]
    private static let pc2: [UInt8] = [
        14, 17, 11, 24, 1, 5, 3, 28, 15, 6, 21, 10, 23, 19, 12, 4, 26, 8, 16, 7, 27, 20, 13, 2,
        41, 52, 31, 37, 47, 55, 30, 40, 51, 45, 33, 48, 44, 49, 39, 56, 34, 53, 46, 42, 50, 36, 29, 32,
    ]
    private static let initialPermutation: [UInt8] = [
        58, 50, 42, 34, 26, 18, 10, 2, 60, 52, 44, 36, 28, 20, 12, 4, 62, 54, 46, 38, 30, 22, 14, 6,
        64, 56, 48, 40, 32, 24, 16, 8, 57, 49, 41, 33, 25, 17, 9, 1, 59, 51, 43, 35, 27, 19, 11, 3,
        61, 53, 45, 37, 29, 21, 13, 5, 63, 55, 47, 39, 31, 23, 15, 7,
    ]
    private static let finalPermutation: [UInt8] = [
        40, 8, 48, 16, 56, 24, 64, 32, 39, 7, 47, 15, 55, 23, 63, 31, 38, 6, 46, 14, 54, 22, 62, 30,
        37, 5, 45, 13, 53, 21, 61, 29, 36, 4, 44, 12, 52, 20, 60, 28, 35, 3, 43, 11, 51, 19, 59, 27,
        34, 2, 42, 10, 50, 18, 58, 26, 33, 1, 41, 9, 49, 17, 57, 25,
    ]
    private static let expansion: [UInt8] = [
        32, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 8, 9, 10, 11, 12, 13, 12, 13, 14, 15, 16, 17,
        16, 17, 18, 19, 20, 21, 20, 21, 22, 23, 24, 25, 24, 25, 26, 27, 28, 29, 28, 29, 30, 31, 32, 1,
    ]
    private static let pBox: [UInt8] = [
        16, 7, 20, 21, 29, 12, 28, 17, 1, 15, 23, 26, 5, 18, 31, 10, 2, 8, 24, 14, 32, 27, 3, 9, 19, 13, 30, 6, 22, 11, 4, 25,
    ]
    private static let sBoxes: [[UInt8]] = [
        [
            14, 4, 13, 1, 2, 15, 11, 8, 3, 10, 6, 12, 5, 9, 0, 7, 0, 15, 7, 4, 14, 2, 13, 1, 10, 6, 12, 11, 9, 5, 3, 8,
            4, 1, 14, 8, 13, 6, 2, 11, 15, 12, 9, 7, 3, 10, 5, 0, 15, 12, 8, 2, 4, 9, 1, 7, 5, 11, 3, 14, 10, 0, 6, 13,
        ],
        [
            15, 1, 8, 14, 6, 11, 3, 4, 9, 7, 2, 13, 12, 0, 5, 10, 3, 13, 4, 7, 15, 2, 8, 14, 12, 0, 1, 10, 6, 9, 11, 5,
            0, 14, 7, 11, 10, 4, 13, 1, 5, 8, 12, 6, 9, 3, 2, 15, 13, 8, 10, 1, 3, 15, 4, 2, 11, 6, 7, 12, 0, 5, 14, 9,
        ],
        [
            10, 0, 9, 14, 6, 3, 15, 5, 1, 13, 12, 7, 11, 4, 2, 8, 13, 7, 0, 9, 3, 4, 6, 10, 2, 8, 5, 14, 12, 11, 15, 1,
            13, 6, 4, 9, 8, 15, 3, 0, 11, 1, 2, 12, 5, 10, 14, 7, 1, 10, 13, 0, 6, 9, 8, 7, 4, 15, 14, 3, 11, 5, 2, 12,
        ],
        [
            7, 13, 14, 3, 0, 6, 9, 10, 1, 2, 8, 5, 11, 12, 4, 15, 13, 8, 11, 5, 6, 15, 0, 3, 4, 7, 2, 12, 1, 10, 14, 9,
            10, 6, 9, 0, 12, 11, 7, 13, 15, 1, 3, 14, 5, 2, 8, 4, 3, 15, 0, 6, 10, 1, 13, 8, 9, 4, 5, 11, 12, 7, 2, 14,
        ],
        [
            2, 12, 4, 1, 7, 10, 11, 6, 8, 5, 3, 15, 13, 0, 14, 9, 14, 11, 2, 12, 4, 7, 13, 1, 5, 0, 15, 10, 3, 9, 8, 6,
            4, 2, 1, 11, 10, 13, 7, 8, 15, 9, 12, 5, 6, 3, 0, 14, 11, 8, 12, 7, 1, 14, 2, 13, 6, 15, 0, 9, 10, 4, 5, 3,
        ],
        [
            12, 1, 10, 15, 9, 2, 6, 8, 0, 13, 3, 4, 14, 7, 5, 11, 10, 15, 4, 2, 7, 12, 9, 5, 6, 1, 13, 14, 0, 11, 3, 8,
            9, 14, 15, 5, 2, 8, 12, 3, 7, 0, 4, 10, 1, 13, 11, 6, 4, 3, 2, 12, 9, 5, 15, 10, 11, 14, 1, 7, 6, 0, 8, 13,
        ],
        [
            4, 11, 2, 14, 15, 0, 8, 13, 3, 12, 9, 7, 5, 10, 6, 1, 13, 0, 11, 7, 4, 9, 1, 10, 14, 3, 5, 12, 2, 15, 8, 6,
            1, 4, 11, 13, 12, 3, 7, 14, 10, 15, 6, 8, 0, 5, 9, 2, 6, 11, 13, 8, 1, 4, 10, 7, 9, 5, 0, 15, 14, 2, 3, 12,
        ],
        [
            13, 2, 8, 4, 6, 15, 11, 1, 10, 9, 3, 14, 5, 0, 12, 7, 1, 15, 13, 8, 10, 3, 7, 4, 12, 5, 6, 11, 0, 14, 9, 2,
            7, 11, 4, 1, 9, 12, 14, 2, 0, 6, 10, 13, 15, 3, 5, 8, 2, 1, 14, 7, 4, 10, 8, 13, 15, 12, 9, 0, 3, 5, 6, 11,
        ],
    ]
}
