#if canImport(Glibc)
import Glibc
#endif

/// The `Date` field (RFC 9110 §6.6.1), formatted once a second.
struct HTTPDate {
    private var second = 0
    private var text = ""

    mutating func now() -> String {
        var now = time(nil)
        if now != second {
            second = now
            var parts = tm()
            gmtime_r(&now, &parts)
            var buffer = [CChar](repeating: 0, count: 40)
            let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
            text = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        return text
    }
}
