import DNSCore
import Foundation

/// Alibaba Cloud EMAS HTTPDNS error codes (`{"code":"…"}`) and what each means for a retry
/// (docs/commercial-apis.md: the v2 doc's table and the Android SDK's handling).
enum AlibabaErrors {
    static func fault(status: Int, code: String?) -> VendorFault {
        let vendor = "alibaba"
        switch code {
        case "SignatureExpired", "InvalidDuration":
            return VendorFault(.unauthorized, "\(vendor) refused the signature's expiry (\(code!))", retry: .afterClockSync)
        case "InvalidSignature", "InvalidAccount", "AccountNotExists", "UnsignedInterfaceDisabled":
            return VendorFault(.unauthorized, "\(vendor) refused the request (\(code!))")
        case "ServiceLevelDeny":
            return VendorFault(.refused, "\(vendor) service IP refused this account's service level (ServiceLevelDeny)", retry: .nextAddress)
        case "InvalidHost", "MissingArgument", "TooManyHosts", "SdnsNotSupported", "MethodNotAllowed":
            return VendorFault(.refused, "\(vendor) refused the query (\(code!))")
        case "InternalError":
            return VendorFault(.serverFailure, "\(vendor) failed internally (InternalError)", retry: .nextAddress)
        case let code?:
            let safe = String(code.unicodeScalars.filter { $0.isASCII && $0.properties.isAlphabetic || ("0"..."9").contains($0) }.prefix(40))
            if status == 429 { return VendorFault(.rateLimited, "\(vendor) is rate-limiting this account (\(safe))") }
            return status == 200 || (500...599).contains(status)
                ? VendorFault(.serverFailure, "\(vendor) answered error \(safe) (HTTP \(status))", retry: .nextAddress)
                : VendorFault(.httpStatus, "\(vendor) answered error \(safe) (HTTP \(status))")
        case nil:
            return VendorText.statusFault(status, vendor: vendor)
        }
    }

    static func query(_ families: VendorFamilies) -> String {
        switch families {
        case .ipv4: return "4"
        case .ipv6: return "6"
        case .both: return "4,6"
        }
    }
}

/// Alibaba's legacy API: `/{account}/d`, `/sign_d`, batch `/resolve`, `/sign_resolve` (≤ 5 names).
package struct AlibabaLegacyWire: VendorWireFormat {
    package let accountID: String
    package let secret: [UInt8]?

    package init(accountID: String, secret: [UInt8]?) {
        self.accountID = accountID
        self.secret = secret
    }

    package var path: String { "/\(accountID)/d" }

    /// `lowercase_hex(MD5(host + "-" + secret + "-" + t))`, the secret as text.
    package static func signature(host: String, secret: [UInt8], expiry: Int64) -> String {
        VendorCrypto.md5Signature(host, secret: secret, expiry: expiry)
    }

    package func request(names: [DomainName], families: VendorFamilies, clientIP: IPAddress?, wallSeconds: Int64) -> String {
        let host = VendorText.names(names)
        let single = names.count == 1
        var items = [("host", host)]
        let endpoint: String
        if let secret {
            let expiry = wallSeconds + Self.signatureLifetime
            endpoint = single ? "sign_d" : "sign_resolve"
            items += [("t", String(expiry)), ("s", Self.signature(host: host, secret: secret, expiry: expiry))]
        } else {
            endpoint = single ? "d" : "resolve"
        }
        if let clientIP { items.append(("ip", clientIP.description)) }
        items.append(("query", AlibabaErrors.query(families)))
        return "/\(accountID)/\(endpoint)?" + VendorText.queryString(items)
    }

    package func decode(status: Int, body: [UInt8], names: [DomainName], families: VendorFamilies) throws(VendorFault) -> [VendorAnswer] {
        guard status == 200 else { throw AlibabaErrors.fault(status: status, code: VendorText.errorCode(body)) }
        let object = try VendorText.jsonObject(body, vendor: "alibaba")
        if let code = object["code"] as? String, object["host"] == nil, object["dns"] == nil {
            throw AlibabaErrors.fault(status: status, code: code)
        }
        let entries: [[String: Any]]
        if let list = object["dns"] {
            guard let list = list as? [[String: Any]] else { throw VendorFault(.malformedResponse, "alibaba: 'dns' is not a list of objects") }
            entries = list
        } else {
            entries = [object]
        }
        var answers: [VendorAnswer] = []
        for entry in entries {
            guard let host = entry["host"] as? String else { throw VendorFault(.malformedResponse, "alibaba: an answer without 'host'") }
            guard let name = VendorText.domain(host), names.contains(name) else { continue }
            let ttl = VendorText.ttl(entry["ttl"]) ?? VendorText.ttl(entry["origin_ttl"])
            var ips = try addresses(entry["ips"], "ips")
            var ipsv6 = try addresses(entry["ipsv6"], "ipsv6")
            // A batch entry with only `ips` and `type: 28` carries IPv6 addresses (the doc's batch example).
            if ipsv6 == nil, let type = entry["type"] as? Int, type == 28 { (ips, ipsv6) = (nil, ips) }
            var answer = VendorAnswer(name: name)
            if families.includesIPv4 { answer.ipv4 = VendorFamilyAnswer(addresses: ips ?? [], ttl: ttl) }
            if families.includesIPv6 { answer.ipv6 = VendorFamilyAnswer(addresses: ipsv6 ?? [], ttl: ttl) }
            answers.append(answer)
        }
        return answers
    }

    private func addresses(_ value: Any?, _ key: String) throws(VendorFault) -> [IPAddress]? {
        guard let value else { return nil }
        guard let list = value as? [String] else { throw VendorFault(.malformedResponse, "alibaba: '\(key)' is not a list of strings") }
        var result: [IPAddress] = []
        for text in list { result.append(try VendorText.address(text, vendor: "alibaba")) }
        return result
    }
}

/// Alibaba's v2 API, `/v2/d`: HMAC-SHA256 signature, `m=0` plain, `m=1` AES-CBC, `m=2` AES-GCM.
package struct AlibabaV2Wire: VendorWireFormat {
    package enum Mode: Sendable {
        case plain
        case cbc(key: [UInt8])
        case gcm(key: [UInt8])

        var number: Int {
            switch self {
            case .plain: return 0
            case .cbc: return 1
            case .gcm: return 2
            }
        }
    }

    package let accountID: String
    /// The hex-decoded secret key, or nil for unsigned requests.
    package let secret: [UInt8]?
    package let mode: Mode
    /// Where IVs and nonces come from (tests pass fixed ones to check vectors).
    package let randomBytes: @Sendable (Int) -> [UInt8]

    package init(accountID: String, secret: [UInt8]?, mode: Mode, randomBytes: @escaping @Sendable (Int) -> [UInt8] = VendorCrypto.randomBytes) {
        self.accountID = accountID
        self.secret = secret
        self.mode = mode
        self.randomBytes = randomBytes
    }

    package var path: String { "/v2/d" }

    /// The string to sign: the parameters sorted by key in byte order, `k=v` joined by `&`, raw values.
    package static func stringToSign(_ parameters: [(String, String)]) -> String {
        parameters.sorted { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// `enc`: hex of IV ‖ ciphertext (‖ tag) of the JSON of the encrypted parameters.
    package func encrypt(_ parameters: [(String, String)]) throws(VendorFault) -> String {
        let json = "{" + parameters.map { "\"\($0.0)\":\"\($0.1)\"" }.joined(separator: ",") + "}"
        do {
            switch mode {
            case .plain: return json
            case let .cbc(key): return Hex.encode(try VendorCrypto.aesCBCSeal(Array(json.utf8), key: key, iv: randomBytes(16)))
            case let .gcm(key): return Hex.encode(try VendorCrypto.aesGCMSeal(Array(json.utf8), key: key, nonce: randomBytes(12)))
            }
        } catch {
            throw VendorFault(.invalidConfiguration, "alibaba: \(error)")
        }
    }

    package func request(names: [DomainName], families: VendorFamilies, clientIP: IPAddress?, wallSeconds: Int64) throws(VendorFault) -> String {
        var hidden = [("dn", VendorText.names(names)), ("q", AlibabaErrors.query(families))]
        if let clientIP { hidden.append(("cip", clientIP.description)) }
        var parameters = [("id", accountID), ("m", String(mode.number))]
        if case .plain = mode {
            parameters += hidden
        } else {
            parameters.append(("enc", try encrypt(hidden)))
        }
        parameters += [("v", "1.0"), ("exp", String(wallSeconds + Self.signatureLifetime))]
        let signed = Self.stringToSign(parameters)
        var query = signed
        if let secret { query += "&s=" + VendorCrypto.hmacSHA256Hex(key: secret, message: signed) }
        // The signed values are raw; in the URL they are escaped (names and IPs need none; `:` of
        // an IPv6 `cip` and nothing else).
        return path + "?" + query.replacingOccurrences(of: ":", with: "%3A")
    }

    package func decode(status: Int, body: [UInt8], names: [DomainName], families: VendorFamilies) throws(VendorFault) -> [VendorAnswer] {
        guard status == 200 else { throw AlibabaErrors.fault(status: status, code: VendorText.errorCode(body)) }
        let object = try VendorText.jsonObject(body, vendor: "alibaba")
        if let code = object["code"] as? String, code != "success" { throw AlibabaErrors.fault(status: status, code: code) }
        // The configured mode is the only acceptable one: the response's `mode` is the sender's
        // word, and an on-path forger (the v2 API is allowed over http://) would pick plaintext, or
        // CBC (no authentication) under a GCM configuration, if the response could choose.
        let responseMode = (object["mode"] as? Int) ?? 0
        guard responseMode == mode.number else {
            throw VendorFault(.malformedResponse, "alibaba: the answer is in mode \(responseMode), the configured mode is \(mode.number)")
        }
        let data: [String: Any]
        switch (mode, object["data"]) {
        case (.plain, let plain as [String: Any]):
            data = plain
        case (.cbc, let sealed as String), (.gcm, let sealed as String):
            data = try open(sealed)
        default:
            throw VendorFault(.malformedResponse, "alibaba: 'data' does not match mode \(responseMode)")
        }
        guard let list = data["answers"] as? [[String: Any]] else {
            throw VendorFault(.malformedResponse, "alibaba: the answer has no 'answers' list")
        }
        var answers: [VendorAnswer] = []
        for entry in list {
            guard let dn = entry["dn"] as? String else { throw VendorFault(.malformedResponse, "alibaba: an answer without 'dn'") }
            guard let name = VendorText.domain(dn), names.contains(name) else { continue }
            var answer = VendorAnswer(name: name)
            if families.includesIPv4 { answer.ipv4 = try family(entry["v4"], "v4") }
            if families.includesIPv6 { answer.ipv6 = try family(entry["v6"], "v6") }
            answers.append(answer)
        }
        return answers
    }

    /// Decrypts a base64 `data` of IV ‖ ciphertext (‖ tag), sealed in the configured mode, into
    /// the JSON object inside.
    private func open(_ sealed: String) throws(VendorFault) -> [String: Any] {
        guard let bytes = Data(base64Encoded: sealed) else { throw VendorFault(.malformedResponse, "alibaba: encrypted 'data' is not base64") }
        let plaintext: [UInt8]
        do {
            switch mode {
            case let .cbc(key): plaintext = try VendorCrypto.aesCBCOpen(Array(bytes), key: key)
            case let .gcm(key): plaintext = try VendorCrypto.aesGCMOpen(Array(bytes), key: key)
            case .plain: throw VendorFault(.malformedResponse, "alibaba: the answer is encrypted but no AES key is configured")
            }
        } catch let error as VendorCryptoError {
            throw VendorFault(.malformedResponse, "alibaba: \(error)")
        } catch let fault as VendorFault {
            throw fault
        } catch {
            throw VendorFault(.malformedResponse, "alibaba: \(error)")
        }
        guard let object = try? JSONSerialization.jsonObject(with: Data(plaintext)), let data = object as? [String: Any] else {
            throw VendorFault(.malformedResponse, "alibaba: the decrypted 'data' is not a JSON object")
        }
        return data
    }

    private func family(_ value: Any?, _ key: String) throws(VendorFault) -> VendorFamilyAnswer {
        guard let value else { return VendorFamilyAnswer(addresses: [], ttl: nil) }
        guard let node = value as? [String: Any] else { throw VendorFault(.malformedResponse, "alibaba: '\(key)' is not an object") }
        var addresses: [IPAddress] = []
        if let ips = node["ips"] {
            guard let list = ips as? [String] else { throw VendorFault(.malformedResponse, "alibaba: '\(key).ips' is not a list of strings") }
            for text in list { addresses.append(try VendorText.address(text, vendor: "alibaba")) }
        }
        return VendorFamilyAnswer(addresses: addresses, ttl: VendorText.ttl(node["ttl"]))
    }
}
