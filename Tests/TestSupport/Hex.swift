/// Test vectors written as hex, as RFCs print them.
public enum Hex {
    /// The bytes of `hex` (pairs of digits, no separators); traps on anything else (a test's typo).
    public static func bytes(_ hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            out.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return out
    }
}
