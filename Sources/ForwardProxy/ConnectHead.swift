import DaemonHTTP

/// What the proxy's fast path makes of a connection's first bytes: a well-formed `CONNECT` head it
/// serves itself, or anything else, which goes to the full HTTP/1.1 parser (and its statuses).
///
/// Deliberately strict (RFC 9112 §3 and §5): one request line `CONNECT authority HTTP/1.x`, field
/// lines `token ":" OWS value OWS`, CRLF line ends, no obs-fold, no body framing (`Content-Length:
/// 0` aside). A head this scan does not accept is not refused here: the full parser decides, so
/// every status the proxy sends for odd input comes from one place — and on Linux a CONNECT it
/// would have tunnelled is answered 400 there: the relay is the only tunnel path.

enum ConnectHead: Equatable {
    /// No decision yet: the head is not complete.
    case incomplete
    /// A clean CONNECT head of `length` bytes (what follows it is the tunnel's first data).
    case connect(authority: String, proxyAuthorization: String?, length: Int)
    /// Anything else: another method, or a CONNECT head this scan does not vouch for.
    case other

    private static let method = Array("CONNECT ".utf8)
    private static let cr: UInt8 = 13, lf: UInt8 = 10, space: UInt8 = 32, tab: UInt8 = 9, colon: UInt8 = 58

    /// - Parameters:
    ///   - bytes: what the client has sent so far.
    ///   - searchFrom: how many bytes an earlier scan of the same head already found
    ///     no end in; the search for CRLF CRLF starts there, so a head trickled in byte by byte costs
    ///     linear time, not quadratic.
    /// - Returns: what the bytes are so far: a complete CONNECT head, one still arriving, or something else.
    static func scan(_ bytes: [UInt8], searchFrom: Int = 0) -> ConnectHead {
        let prefix = min(bytes.count, method.count)
        guard bytes[..<prefix].elementsEqual(method[..<prefix]) else { return .other }
        guard let end = headEnd(bytes, from: searchFrom) else { return .incomplete }
        var lines = [ArraySlice<UInt8>]()
        var start = 0
        for index in 0..<(end - 2) where bytes[index] == cr {
            guard bytes[index + 1] == lf else { return .other }
            lines.append(bytes[start..<index])
            start = index + 2
        }
        guard let requestLine = lines.first, let authority = Self.authority(of: requestLine) else { return .other }
        var proxyAuthorization: String?
        for line in lines.dropFirst() {
            guard let (name, value) = field(line) else { return .other }
            switch name {
            case "proxy-authorization":
                guard proxyAuthorization == nil else { return .other }
                proxyAuthorization = value
            case "content-length" where value == "0":
                break  // says what a CONNECT has anyway: no content (RFC 9110 §9.3.6)
            case "content-length", "transfer-encoding":
                return .other  // a CONNECT with body framing: refused (400) by the full parser
            default:
                break
            }
        }
        return .connect(authority: authority, proxyAuthorization: proxyAuthorization, length: end)
    }

    /// The index just past the first CRLF CRLF whose last byte is at `from` or later, or nil.
    private static func headEnd(_ bytes: [UInt8], from: Int) -> Int? {
        guard bytes.count >= 4 else { return nil }
        var index = max(3, from)
        while index < bytes.count {
            if bytes[index] == lf, bytes[index - 1] == cr, bytes[index - 2] == lf, bytes[index - 3] == cr { return index + 1 }
            index += 1
        }
        return nil
    }

    /// `CONNECT <authority> HTTP/1.1` (or 1.0): the authority, visible ASCII without spaces.
    private static func authority(of line: ArraySlice<UInt8>) -> String? {
        let parts = line.split(separator: space, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].count > 0, parts[1].count <= 1_024,
            parts[1].allSatisfy({ $0 > 32 && $0 < 127 }),
            parts[2].elementsEqual("HTTP/1.1".utf8) || parts[2].elementsEqual("HTTP/1.0".utf8)
        else { return nil }
        return String(decoding: parts[1], as: UTF8.self)
    }

    /// A field line: its name lowercased and its value without surrounding spaces; nil when malformed.
    private static func field(_ line: ArraySlice<UInt8>) -> (String, String)? {
        guard let colon = line.firstIndex(of: colon), colon > line.startIndex else { return nil }
        let name = line[..<colon]
        guard name.allSatisfy(HTTPSyntax.isTokenCharacter) else { return nil }
        var value = line[(colon + 1)...]
        guard value.allSatisfy({ $0 == tab || ($0 >= 32 && $0 != 127) }) else { return nil }
        while let first = value.first, first == space || first == tab { value = value.dropFirst() }
        while let last = value.last, last == space || last == tab { value = value.dropLast() }
        return (String(decoding: name, as: UTF8.self).lowercased(), String(decoding: value, as: UTF8.self))
    }
}
