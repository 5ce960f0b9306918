import NIOHPACK

/// The head of a request as the HTTP/2 connection received it, checked as RFC 9113 §8.2-§8.3 asks
/// of a server: anything malformed is a stream error (PROTOCOL_ERROR), never an answer.
///
/// The daemon's frame layer (``HTTP2FrameLayer``) only decodes header blocks; this is the set of rules
/// NIOHTTP2's header-block validation applies, in one pass over the fields.
struct RequestHead: Sendable {
    var method: String
    /// The request target (path and query); empty for CONNECT.
    var path: String
    var authority: String?
    var headers: HPACKHeaders
    /// The declared `content-length`, when there is one.
    var contentLength: Int?

    /// Why a header block is malformed.
    struct Malformed: Error, Equatable {
        var reason: String
    }

    /// Checks the header block of a request (RFC 9113 §8.2-§8.3): pseudo-headers first and each once,
    /// lowercase names, no connection-specific fields, one valid `content-length`.
    static func validate(_ headers: HPACKHeaders) throws(Malformed) -> RequestHead {
        var method: String?, scheme: String?, path: String?, authority: String?
        var regular = false
        var contentLength: Int?
        for (name, value, _) in headers {
            let nameBytes = name.utf8
            guard let first = nameBytes.first else { throw Malformed(reason: "an empty field name") }
            try checkValue(value, of: name)
            if first == UInt8(ascii: ":") {
                guard !regular else { throw Malformed(reason: "pseudo-header \(name) after a regular field") }
                switch name {
                case ":method":
                    guard method == nil else { throw Malformed(reason: "a second :method") }
                    guard !value.isEmpty, value.utf8.allSatisfy(HTTPSyntax.isTokenCharacter) else {
                        throw Malformed(reason: ":method is not a token")
                    }
                    method = value
                case ":scheme":
                    guard scheme == nil else { throw Malformed(reason: "a second :scheme") }
                    scheme = value
                case ":path":
                    guard path == nil else { throw Malformed(reason: "a second :path") }
                    path = value
                case ":authority":
                    guard authority == nil else { throw Malformed(reason: "a second :authority") }
                    authority = value
                default:
                    throw Malformed(reason: "unknown pseudo-header \(name)")
                }
                continue
            }
            regular = true
            try checkName(name)
            switch name {
            case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
                throw Malformed(reason: "connection-specific field \(name)")
            case "te" where value != "trailers":
                throw Malformed(reason: "te other than trailers")
            case "content-length":
                // Digits only (RFC 9110 §8.6): Int("+5") is 5, and a sign is not a length.
                guard !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }),
                    let length = Int(value), contentLength == nil || contentLength == length
                else {
                    throw Malformed(reason: "content-length '\(value)' is not one number")
                }
                contentLength = length
            default:
                break
            }
        }
        guard let method else { throw Malformed(reason: "no :method") }
        if method == "CONNECT" {
            guard scheme == nil, path == nil, authority != nil else { throw Malformed(reason: "CONNECT needs :authority only") }
            return RequestHead(method: method, path: "", authority: authority, headers: headers, contentLength: contentLength)
        }
        guard let scheme, !scheme.isEmpty else { throw Malformed(reason: "no :scheme") }
        guard let path, let start = path.utf8.first,
            start == UInt8(ascii: "/") || (path == "*" && method == "OPTIONS")
        else { throw Malformed(reason: "no usable :path") }
        return RequestHead(method: method, path: path, authority: authority, headers: headers, contentLength: contentLength)
    }

    /// Trailers: regular fields only.
    static func validateTrailers(_ headers: HPACKHeaders) throws(Malformed) {
        for (name, value, _) in headers {
            guard name.utf8.first != UInt8(ascii: ":") else { throw Malformed(reason: "pseudo-header \(name) in trailers") }
            try checkName(name)
            try checkValue(value, of: name)
        }
    }

    /// RFC 9113 §8.2.1: lower-case token characters only.
    private static func checkName(_ name: String) throws(Malformed) {
        var name = name
        let valid = name.withUTF8 { bytes in bytes.allSatisfy { tokenTable[Int($0)] == 2 } }
        guard valid else { throw Malformed(reason: "field name '\(name)' is not a lower-case token") }
    }

    /// RFC 9113 §8.2.1: no NUL, CR or LF, and no white space at either end.
    private static func checkValue(_ value: String, of name: String) throws(Malformed) {
        var value = value
        let problem: String? = value.withUTF8 { bytes in
            guard let first = bytes.first, let last = bytes.last else { return nil }
            if first == 0x20 || first == 0x09 || last == 0x20 || last == 0x09 { return "starts or ends with white space" }
            for byte in bytes where byte <= 0x0d && (byte == 0 || byte == 0x0a || byte == 0x0d) { return "holds NUL, CR or LF" }
            return nil
        }
        if let problem { throw Malformed(reason: "the value of \(name) \(problem)") }
    }

    /// Per byte: 0 not a token character, 1 an upper-case letter, 2 any other token character.
    private static let tokenTable: [UInt8] = (0...255).map { byte in
        let byte = UInt8(byte)
        return !HTTPSyntax.isTokenCharacter(byte) ? 0 : (byte >= 0x41 && byte <= 0x5a ? 1 : 2)
    }
}
