import DNSCore
import Foundation

/// Tencent Cloud HTTPDNS (DNSPod D+), `/d` (docs/commercial-apis.md): `dn` and the answer encrypted with
/// DES-ECB or AES-CBC under the account's key, or plain over HTTPS with a token.
///
/// Requests always carry `ttl=1`, `clientip=1` and `query=1`, so every answer line names its domain
/// and the line can be checked against the names asked.
package struct TencentWire: VendorWireFormat {
    package enum Mode: Sendable {
        case des(accountID: String, key: [UInt8])
        case aes(accountID: String, key: [UInt8])
        case token([UInt8])
    }

    package let mode: Mode
    /// Whether the transport authenticates the server (HTTPS). Over `http://` only what the key
    /// sealed can be believed; the empty "no record" body is sealed by nothing.
    package let serverAuthenticated: Bool
    package let randomBytes: @Sendable (Int) -> [UInt8]

    package init(mode: Mode, serverAuthenticated: Bool = true, randomBytes: @escaping @Sendable (Int) -> [UInt8] = VendorCrypto.randomBytes) {
        self.mode = mode
        self.serverAuthenticated = serverAuthenticated
        self.randomBytes = randomBytes
    }

    package var path: String { "/d" }

    /// `dn` (or a whole answer) encrypted as the API wants it: lowercase hex of the DES-ECB
    /// ciphertext, or of IV ‖ AES-CBC ciphertext.
    package func seal(_ text: String) throws(VendorFault) -> String {
        do {
            switch mode {
            case let .des(_, key): return Hex.encode(try VendorCrypto.desECBSeal(Array(text.utf8), key: key))
            case let .aes(_, key): return Hex.encode(try VendorCrypto.aesCBCSeal(Array(text.utf8), key: key, iv: randomBytes(16)))
            case .token: return text
            }
        } catch {
            throw VendorFault(.invalidConfiguration, "tencent: \(error)")
        }
    }

    /// The plaintext of an encrypted answer body (hex), or the body itself in token mode.
    package func open(_ body: [UInt8]) throws(VendorFault) -> String {
        let text = String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if case .token = mode { return text }
        guard !text.isEmpty else { return "" }
        guard let sealed = Hex.decode(text) else {
            throw VendorFault(.malformedResponse, "tencent: the encrypted answer is not hex")
        }
        let plaintext: [UInt8]
        do {
            switch mode {
            case let .des(_, key): plaintext = try VendorCrypto.desECBOpen(sealed, key: key)
            case let .aes(_, key): plaintext = try VendorCrypto.aesCBCOpen(sealed, key: key)
            case .token: plaintext = sealed
            }
        } catch {
            throw VendorFault(.malformedResponse, "tencent: \(error)")
        }
        guard let decoded = String(validating: plaintext, as: UTF8.self) else {
            throw VendorFault(.malformedResponse, "tencent: the decrypted answer is not text (wrong key?)")
        }
        return decoded
    }

    package func request(names: [DomainName], families: VendorFamilies, clientIP: IPAddress?, wallSeconds: Int64) throws(VendorFault) -> String {
        var items = [("dn", try seal(VendorText.names(names)))]
        switch mode {
        case let .des(account, _): items.append(("id", account))
        case let .aes(account, _): items += [("id", account), ("alg", "aes")]
        case let .token(token): items.append(("token", String(decoding: token, as: UTF8.self)))
        }
        items += [("ttl", "1"), ("clientip", "1"), ("query", "1")]
        switch families {
        case .ipv4: break
        case .ipv6: items.append(("type", "aaaa"))
        case .both: items.append(("type", "addrs"))
        }
        // Both SDKs send the ECS address in the clear, whatever the doc says (docs/commercial-apis.md).
        if let clientIP { items.append(("ip", clientIP.description)) }
        return path + "?" + VendorText.queryString(items)
    }

    package func decode(status: Int, body: [UInt8], names: [DomainName], families: VendorFamilies) throws(VendorFault) -> [VendorAnswer] {
        guard status == 200 else { throw VendorText.statusFault(status, vendor: "tencent") }
        if body.first == UInt8(ascii: "<") || body.first == UInt8(ascii: "{") {
            throw VendorFault(.malformedResponse, "tencent answered HTML or JSON, not its text format", retry: .nextAddress)
        }
        let text = try open(body)
        // An empty body is the documented "no record" for a plain A query. Over http:// it is
        // unauthenticated whatever the mode (nothing was sealed), so an on-path forger could deny
        // any name with it: a failed attempt there (the next service IP, then the next upstream),
        // never a cached NODATA.
        guard !text.isEmpty else {
            guard serverAuthenticated else {
                throw VendorFault(
                    .unauthenticatedAnswer, "tencent answered an empty (unencrypted) 'no record' over http://: not trusted", retry: .nextAddress)
            }
            return names.map {
                VendorAnswer(
                    name: $0, ipv4: families.includesIPv4 ? .init(addresses: [], ttl: nil) : nil,
                    ipv6: families.includesIPv6 ? .init(addresses: [], ttl: nil) : nil)
            }
        }
        var answers: [VendorAnswer] = []
        for line in text.split(whereSeparator: \.isNewline) where !line.isEmpty {
            if let answer = try Self.parse(line: line, names: names, families: families) { answers.append(answer) }
        }
        return answers
    }

    /// One answer line: `[name.:]v4ips[,ttl][-v6ips[,ttl]][|cip]`; `0` for a family without records.
    static func parse(line: Substring, names: [DomainName], families: VendorFamilies) throws(VendorFault) -> VendorAnswer? {
        var rest = line
        // The `|cip` the doc puts on the last line only and the SDKs on every line.
        if let bar = rest.lastIndex(of: "|") { rest = rest[..<bar] }
        let name: DomainName
        if let marker = rest.range(of: ".:") {
            guard let named = VendorText.domain(rest[..<marker.lowerBound]) else {
                throw VendorFault(.malformedResponse, "tencent: an answer line names no valid domain")
            }
            guard names.contains(named) else { return nil }
            name = named
            rest = rest[marker.upperBound...]
        } else if let named = VendorText.domain(rest), names.contains(named) {
            // `cloud.tencent.com|1.2.3.4`: the doc's other "no record" form.
            return VendorAnswer(
                name: named, ipv4: families.includesIPv4 ? .init(addresses: [], ttl: nil) : nil,
                ipv6: families.includesIPv6 ? .init(addresses: [], ttl: nil) : nil)
        } else {
            guard names.count == 1 else {
                throw VendorFault(.malformedResponse, "tencent: a batch answer line without its domain")
            }
            name = names[0]
        }
        var answer = VendorAnswer(name: name)
        switch families {
        case .ipv4: answer.ipv4 = try family(rest)
        case .ipv6: answer.ipv6 = try family(rest)
        case .both:
            let parts = rest.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
            answer.ipv4 = try family(parts[0])
            answer.ipv6 = parts.count > 1 ? try family(parts[1]) : VendorFamilyAnswer(addresses: [], ttl: nil)
        }
        return answer
    }

    /// `ip;ip[,ttl]`, or `0`/empty for none.
    static func family(_ part: Substring) throws(VendorFault) -> VendorFamilyAnswer {
        var list = part, ttl: UInt32?
        if let comma = part.lastIndex(of: ",") {
            guard let value = UInt32(part[part.index(after: comma)...]) else {
                throw VendorFault(.malformedResponse, "tencent: the TTL in an answer line is not a number")
            }
            ttl = value
            list = part[..<comma]
        }
        var addresses: [IPAddress] = []
        for entry in list.split(separator: ";") where entry != "0" {
            addresses.append(try VendorText.address(entry, vendor: "tencent"))
        }
        return VendorFamilyAnswer(addresses: addresses, ttl: ttl)
    }
}

/// Baidu AI Cloud HTTPDNS, `/v4/resolve` (docs/commercial-apis.md): MD5 over `dn-secret-t`, ≤ 10 names.
///
/// The values of `type` were not in the documents read; `ipv4`, `ipv6` and `dual` are what this
/// client sends, and the answer is read per family whatever the server chose to include.
package struct BaiduWire: VendorWireFormat {
    package let accountID: String
    package let secret: [UInt8]

    package init(accountID: String, secret: [UInt8]) {
        self.accountID = accountID
        self.secret = secret
    }

    package var path: String { "/v4/resolve" }

    /// `md5_hex("${dn}-${secret}-${t}")`.
    package static func signature(dn: String, secret: [UInt8], expiry: Int64) -> String {
        VendorCrypto.md5Signature(dn, secret: secret, expiry: expiry)
    }

    package func request(names: [DomainName], families: VendorFamilies, clientIP: IPAddress?, wallSeconds: Int64) -> String {
        let dn = VendorText.names(names)
        let expiry = wallSeconds + Self.signatureLifetime
        var items = [
            ("account_id", accountID), ("dn", dn), ("t", String(expiry)),
            ("sign", Self.signature(dn: dn, secret: secret, expiry: expiry)),
        ]
        switch families {
        case .ipv4: items.append(("type", "ipv4"))
        case .ipv6: items.append(("type", "ipv6"))
        case .both: items.append(("type", "dual"))
        }
        if let clientIP { items.append(("ip", clientIP.description)) }
        return path + "?" + VendorText.queryString(items)
    }

    package func decode(status: Int, body: [UInt8], names: [DomainName], families: VendorFamilies) throws(VendorFault) -> [VendorAnswer] {
        let object: [String: Any]
        do {
            object = try VendorText.jsonObject(body, vendor: "baidu")
        } catch {
            guard status == 200 else { throw VendorText.statusFault(status, vendor: "baidu") }
            throw error
        }
        let message = (object["msg"] as? String) ?? ""
        guard status == 200, message == "ok" else { throw Self.fault(status: status, message: message) }
        guard let data = object["data"] as? [String: Any] else { throw VendorFault(.malformedResponse, "baidu: the answer has no 'data' object") }
        var answers: [VendorAnswer] = []
        for (key, value) in data {
            guard let name = VendorText.domain(key), names.contains(name) else { continue }
            guard let node = value as? [String: Any] else { throw VendorFault(.malformedResponse, "baidu: the answer for a name is not an object") }
            var answer = VendorAnswer(name: name)
            // v3 put `ip` and `ttl` directly under the name: IPv4.
            let v4: Any? = node["ipv4"] ?? (node["ip"] != nil ? node as Any : nil)
            if families.includesIPv4 { answer.ipv4 = try Self.family(v4) }
            if families.includesIPv6 { answer.ipv6 = try Self.family(node["ipv6"]) }
            answers.append(answer)
        }
        return answers
    }

    private static func family(_ value: Any?) throws(VendorFault) -> VendorFamilyAnswer {
        guard let value else { return VendorFamilyAnswer(addresses: [], ttl: nil) }
        guard let node = value as? [String: Any] else { throw VendorFault(.malformedResponse, "baidu: a family is not an object") }
        var addresses: [IPAddress] = []
        if let ips = node["ip"] {
            guard let list = ips as? [String] else { throw VendorFault(.malformedResponse, "baidu: 'ip' is not a list of strings") }
            for text in list { addresses.append(try VendorText.address(text, vendor: "baidu")) }
        }
        return VendorFamilyAnswer(addresses: addresses, ttl: VendorText.ttl(node["ttl"]))
    }

    /// Baidu's error list is not in the documents available (docs/commercial-apis.md): the message's words decide, conservatively.
    static func fault(status: Int, message: String) -> VendorFault {
        let lower = message.lowercased()
        let safe = String(
            message.unicodeScalars.filter { $0.isASCII && ($0.properties.isAlphabetic || $0 == " " || ("0"..."9").contains($0)) }.prefix(60))
        if status == 429 || lower.contains("limit") || lower.contains("frequen") {
            return VendorFault(.rateLimited, "baidu is rate-limiting this account (\(safe))")
        }
        if lower.contains("expire") || lower.contains("timestamp") {
            return VendorFault(.unauthorized, "baidu refused the signature's expiry (\(safe))", retry: .afterClockSync)
        }
        if [401, 403].contains(status) || lower.contains("sign") || lower.contains("account") || lower.contains("auth") {
            return VendorFault(.unauthorized, "baidu refused the request (\(safe))")
        }
        if status == 200 || (500...599).contains(status) {
            return VendorFault(.serverFailure, "baidu answered an error (\(safe.isEmpty ? "HTTP \(status)" : safe))", retry: .nextAddress)
        }
        return VendorFault(.httpStatus, "baidu answered HTTP \(status) (\(safe))")
    }
}
