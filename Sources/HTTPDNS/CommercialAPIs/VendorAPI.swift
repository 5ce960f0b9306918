import DNSCore
import Foundation

/// A commercial HTTPDNS service's own API, with the account's credentials.
///
/// ```swift
/// let secret = try VendorSecret(file: "/etc/resolve/alibaba.secret")
/// let upstream = try UpstreamEndpoint.vendor(
///     .alibabaV2(accountID: "100000", secret: secret, encryption: .none),
///     endpoint: "https://203.107.1.1", bootstrap: ["203.107.1.97", "203.107.1.100"])
/// ```
///
/// What an on-path attacker can do to each mode is in docs/commercial-apis.md.
public enum VendorAPI: Sendable, Hashable {
    /// Alibaba Cloud EMAS HTTPDNS, legacy API (`/{account}/d`, `/sign_d`, batch `/resolve`): with a
    /// secret, requests are signed (MD5 over `host-secret-expiry`).
    case alibabaLegacy(accountID: String, secret: VendorSecret?)
    /// Alibaba Cloud EMAS HTTPDNS, v2 API (`/v2/d`): HMAC-SHA256 over the sorted parameters with
    /// the hex-decoded secret; the query and the answer optionally AES-encrypted.
    case alibabaV2(accountID: String, secret: VendorSecret?, encryption: AlibabaEncryption)
    /// Tencent Cloud HTTPDNS (DNSPod D+) with the domain and the answer encrypted by the account's
    /// key (its HTTP service; also accepted over HTTPS).
    case tencent(accountID: String, cipher: TencentCipher)
    /// Tencent Cloud HTTPDNS over HTTPS with the account's token and a plain domain.
    case tencentToken(token: VendorSecret)
    /// Baidu AI Cloud HTTPDNS (`/v4/resolve`, MD5 over `dn-secret-expiry`).
    case baidu(accountID: String, secret: VendorSecret)

    /// The vendor's name, as the config file writes it.
    public var vendor: String {
        switch self {
        case .alibabaLegacy, .alibabaV2: return "alibaba"
        case .tencent, .tencentToken: return "tencent"
        case .baidu: return "baidu"
        }
    }

    /// Whether the query and the answer are encrypted by the API itself, so that plain HTTP does
    /// not show the names asked (it still shows the account and the answer's size; see docs/commercial-apis.md).
    public var encryptsPayload: Bool {
        switch self {
        case .alibabaV2(_, _, .cbc), .alibabaV2(_, _, .gcm), .tencent: return true
        case .alibabaLegacy, .alibabaV2, .tencentToken, .baidu: return false
        }
    }

    /// How the API protects a plain-HTTP exchange, for warnings ("Tencent DES-ECB encryption").
    public var protection: String {
        switch self {
        case .alibabaV2(_, _, .cbc): return "Alibaba AES-CBC encryption"
        case .alibabaV2(_, _, .gcm): return "Alibaba AES-GCM encryption"
        case .tencent(_, .des): return "Tencent DES-ECB encryption"
        case .tencent(_, .aes): return "Tencent AES-CBC encryption"
        case .alibabaLegacy, .alibabaV2, .tencentToken, .baidu: return "\(vendor) API without encryption"
        }
    }

    /// The most names one request may carry (the vendors' documented limits; Tencent documents none,
    /// its SDK pre-resolves at most 10).
    public var batchLimit: Int {
        switch self {
        case .alibabaLegacy, .alibabaV2: return 5
        case .tencent, .tencentToken, .baidu: return 10
        }
    }
}

/// How Alibaba's v2 API protects the query and the answer (`m=0|1|2`).
public enum AlibabaEncryption: Sendable, Hashable {
    /// `m=0`: parameters in the clear, signed.
    case none
    /// `m=1`: AES-128-CBC with PKCS#7, random IV (confidential, not authenticated: the signature
    /// covers the request only).
    case cbc(key: VendorSecret)
    /// `m=2`: AES-128-GCM (confidential and authenticated).
    case gcm(key: VendorSecret)
}

/// How Tencent's API encrypts `dn` and the answer (`alg=`).
public enum TencentCipher: Sendable, Hashable {
    /// DES-ECB with PKCS#5 under the first 8 bytes of the key (the API's default; weak).
    case des(key: VendorSecret)
    /// AES-128-CBC with PKCS#7, random IV, under a 16-byte key.
    case aes(key: VendorSecret)
}

/// A key, token or signing secret. Its bytes are never printed: `description`, `debugDescription`
/// and reflection all show `<secret>`, so a secret cannot reach a log line, an error or a dump by
/// accident.
public struct VendorSecret: Sendable, Hashable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// The secret's text as UTF-8 bytes, as configured.
    package let bytes: [UInt8]

    /// A secret given in memory (from a keychain, a vault); empty text is refused.
    public init(_ text: String) throws(DNSError) {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty else { throw DNSError(.invalidConfiguration, "the secret is empty") }
        bytes = Array(trimmed.utf8)
    }

    /// The secret in `path` (surrounding whitespace and the final newline are ignored).
    /// - Throws: ``/DNSCore/DNSError`` (`invalid_configuration`) naming the file, never its content.
    public init(file path: String) throws(DNSError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw DNSError(.invalidConfiguration, "cannot read the secret file '\(path)'")
        }
        guard data.count <= 4096, let text = String(data: data, encoding: .utf8) else {
            throw DNSError(.invalidConfiguration, "the secret file '\(path)' is not a short UTF-8 text")
        }
        do { try self.init(text) } catch { throw DNSError(.invalidConfiguration, "the secret file '\(path)' is empty") }
    }

    /// The secret in the environment variable `name`.
    public init(environment name: String) throws(DNSError) {
        guard let text = ProcessInfo.processInfo.environment[name] else {
            throw DNSError(.invalidConfiguration, "the environment variable \(name) is not set")
        }
        do { try self.init(text) } catch { throw DNSError(.invalidConfiguration, "the environment variable \(name) is empty") }
    }

    /// The secret's text read as lowercase or uppercase hex (Alibaba's v2 keys), or nil.
    package var hexDecoded: [UInt8]? { Hex.decode(String(decoding: bytes, as: UTF8.self)) }

    public var description: String { "<secret>" }
    public var debugDescription: String { "<secret>" }
    public var customMirror: Mirror { Mirror(self, children: [], displayStyle: .struct) }
}

extension UpstreamEndpoint {
    /// A commercial HTTPDNS service.
    ///
    /// - Parameters:
    ///   - api: which API, with the account's credentials.
    ///   - endpoint: `https://IP-or-name[:port]` (or `http://` for an API mode that encrypts the
    ///     payload, or with `allowPlainHTTP`).
    ///   - bootstrap: the endpoint name's addresses, or further service IPs to fail over to; tried
    ///     after the endpoint's own IP.
    ///   - tlsName: the name the certificate is checked against when it is not the endpoint's host
    ///     (Alibaba's SDKs check `203.107.1.1` whichever service IP they reach).
    ///   - clientIP: the client address for ECS-accurate answers (`ip`/`cip`); default: the
    ///     connection's source address, as the vendor sees it.
    ///   - batchSize: names per batch request, at most the API's limit (``VendorAPI/batchLimit``).
    ///   - allowPlainHTTP: accept `http://` for an API mode that sends names and answers in the clear.
    /// - Throws: ``/DNSCore/DNSError`` (`invalid_configuration`) for a bad URL, a key of the wrong length, a
    ///   batch size over the limit, or plain HTTP without encryption or `allowPlainHTTP`.
    /// - Returns: the upstream, ready for ``HTTPDNSConfiguration/init(upstreams:caFile:preresolve:dnssec:localZone:forwardZones:)``.
    public static func vendor(
        _ api: VendorAPI, endpoint: String, bootstrap: [String] = [], tlsName: String? = nil,
        clientIP: String? = nil, batchSize: Int? = nil, allowPlainHTTP: Bool = false
    ) throws(DNSError) -> UpstreamEndpoint {
        var result = try UpstreamEndpoint(
            .vendor(api), url: endpoint, bootstrap: try parse(bootstrap), pinnedPublicKey: nil,
            allowsPlainHTTP: api.encryptsPayload || allowPlainHTTP)
        guard result.url.hasPrefix("https:") || result.url.hasPrefix("http:") else {
            throw DNSError(.invalidConfiguration, "'\(endpoint)': expected http:// or https://")
        }
        if let path = URLComponents(string: endpoint)?.path, !path.isEmpty, path != "/" {
            throw DNSError(.invalidConfiguration, "'\(endpoint)': give the service's scheme, host and port only, no path")
        }
        if let tlsName {
            if IPAddress(tlsName) == nil {
                do { _ = try DomainName(tlsName) } catch {
                    throw DNSError(.invalidConfiguration, "tls_name '\(tlsName)': \(error.message)")
                }
            }
            result.tlsName = tlsName.lowercased()
        }
        if let clientIP {
            guard let address = IPAddress(clientIP) else {
                throw DNSError(.invalidConfiguration, "client_ip '\(clientIP)' is not an IP address")
            }
            result.clientIP = address
        }
        if let batchSize {
            guard (1...api.batchLimit).contains(batchSize) else {
                throw DNSError(.invalidConfiguration, "batch_size \(batchSize) is outside 1...\(api.batchLimit) for \(api.vendor)")
            }
        }
        result.batchSize = batchSize ?? api.batchLimit
        return result
    }
}

/// Key checks done when an upstream is made, so a wrong key fails at load, not at the first lookup.
enum VendorKeys {
    static func validate(_ api: VendorAPI) throws(DNSError) {
        switch api {
        case let .alibabaLegacy(account, _):
            try checkAccount(account, "account_id")
        case let .alibabaV2(account, secret, encryption):
            try checkAccount(account, "account_id")
            if let secret, secret.hexDecoded?.isEmpty != false {
                throw DNSError(.invalidConfiguration, "secret: Alibaba's v2 secret key is hex (an even number of 0-9a-f)")
            }
            switch encryption {
            case .none: break
            case let .cbc(key), let .gcm(key):
                guard key.hexDecoded?.count == 16 else {
                    throw DNSError(.invalidConfiguration, "aes_key: Alibaba's AES key is 32 hex digits (16 bytes)")
                }
            }
        case let .tencent(account, cipher):
            try checkAccount(account, "account_id")
            switch cipher {
            case let .des(key):
                guard key.bytes.count >= 8 else {
                    throw DNSError(.invalidConfiguration, "key: Tencent's DES key has at least 8 characters (the first 8 are used)")
                }
            case let .aes(key):
                guard key.bytes.count == 16 else {
                    throw DNSError(.invalidConfiguration, "key: Tencent's AES key has exactly 16 characters")
                }
            }
        case .tencentToken:
            break
        case let .baidu(account, _):
            try checkAccount(account, "account_id")
        }
    }

    private static func checkAccount(_ account: String, _ key: String) throws(DNSError) {
        guard !account.isEmpty, account.count <= 32,
            account.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5a).contains($0) || (0x61...0x7a).contains($0) })
        else {
            throw DNSError(.invalidConfiguration, "\(key) '\(account)' is not an account ID (letters and digits)")
        }
    }
}
