import DNSCore
import Foundation
import HTTPDNS
import Testing

@testable import ResolverConfig

/// The `alibaba:`, `tencent:` and `baidu:` upstream keys (a contract): secrets only from files or
/// the environment, checked at load, never echoed in a message.
@Suite struct VendorConfigTests {
    let directory: String

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("vendor-config-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let files = [
            "alibaba.secret": "0123456789abcdef0123456789abcdef\n", "alibaba.aes": "00112233445566778899aabbccddeeff\n",
            "tencent.key": "dnspodpass123456\n", "tencent.token": "7c1a9e5d3b\n", "baidu.secret": "baidu-test-secret\n",
            "short.key": "abc\n", "nothex.secret": "zz-not-hex-zz\n", "empty.secret": "\n",
        ]
        for (name, text) in files { try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8) }
    }

    func parse(_ yaml: String) throws(DNSError) -> [UpstreamEndpoint] {
        try ConfigFile.parse(yaml, file: "v.yaml", directory: directory).lookup.configuration.upstreams
    }

    func failure(_ yaml: String) -> String {
        do {
            _ = try parse(yaml)
            return "no error"
        } catch {
            return error.message
        }
    }

    @Test func readsTheIssuesExample() throws {
        let upstreams = try parse(
            """
            upstreams:
              - alibaba: {account_id: "100000", api: v2, endpoint: "https://203.107.1.1", tls_name: "203.107.1.1",
                          secret_file: alibaba.secret, aes_key_file: alibaba.aes, encryption: cbc}
              - alibaba: {account_id: "100000", api: legacy, endpoint: "https://203.107.1.1", secret_file: alibaba.secret}
              - tencent: {account_id: "12345", endpoint: "http://119.29.29.98", encryption: des, key_file: tencent.key}
              - tencent: {endpoint: "https://119.29.29.99", token_file: tencent.token}
              - baidu:   {account_id: "123456", endpoint: "https://180.76.76.200", secret_file: baidu.secret,
                          client_ip: 192.0.2.7, batch_size: 4, bootstrap: [180.76.76.201]}
            """)
        #expect(upstreams.count == 5)
        #expect(upstreams.map(\.vendorDescription).contains("Tencent DES-ECB encryption"))
        guard case let .vendor(.alibabaV2(account, secret, .cbc(key))) = upstreams[0].kind else {
            Issue.record("not alibaba v2 cbc: \(upstreams[0].kind)")
            return
        }
        #expect(account == "100000" && secret != nil && key.description == "<secret>")
        #expect(upstreams[0].tlsName == "203.107.1.1")
        #expect(upstreams[2].isPlainHTTP && !upstreams[3].isPlainHTTP)
        #expect(upstreams[4].clientIP == IPAddress("192.0.2.7") && upstreams[4].batchSize == 4)
        #expect(upstreams[4].bootstrap == [IPAddress("180.76.76.201")!])
        #expect(upstreams[1].batchSize == 5, "the API's limit by default")
    }

    @Test func regionPresetsFillTheServiceIPsOffline() throws {
        let upstreams = try parse(
            """
            upstreams:
              - alibaba: {account_id: "100000", region: cn, secret_file: alibaba.secret}
              - tencent: {account_id: "12345", region: intl, key_file: tencent.key}
            """)
        #expect(upstreams[0].url == "https://203.107.1.1" && upstreams[0].tlsName == "203.107.1.1")
        #expect(upstreams[0].bootstrap.count == 8)
        #expect(upstreams[1].url == "http://43.132.55.55")
        #expect(failure("upstreams:\n  - baidu: {account_id: \"1\", region: mars, secret_file: baidu.secret}").contains("unknown region 'mars'"))
    }

    @Test func secretsComeFromTheEnvironment() throws {
        setenv("HTTPDNS_TEST_BAIDU_SECRET", "from-env-secret", 1)
        defer { unsetenv("HTTPDNS_TEST_BAIDU_SECRET") }
        let upstreams = try parse(
            "upstreams:\n  - baidu: {account_id: \"123456\", endpoint: \"https://127.0.0.1\", secret_env: HTTPDNS_TEST_BAIDU_SECRET}")
        guard case let .vendor(.baidu(_, secret)) = upstreams[0].kind else { return #expect(Bool(false)) }
        #expect(secret.bytes == Array("from-env-secret".utf8))
        #expect(
            failure("upstreams:\n  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret_env: NO_SUCH_VAR_HD}").contains(
                "NO_SUCH_VAR_HD is not set"))
    }

    @Test func badKeysFailAtLoadNamingTheKeyAndLine() {
        let cases: [(String, String)] = [
            ("  - tencent: {account_id: \"1\", endpoint: \"http://127.0.0.1\", encryption: aes, key_file: short.key}", "exactly 16 characters"),
            ("  - tencent: {account_id: \"1\", endpoint: \"http://127.0.0.1\", encryption: des, key_file: short.key}", "at least 8"),
            ("  - alibaba: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret_file: nothex.secret}", "hex"),
            ("  - alibaba: {account_id: \"1\", endpoint: \"https://127.0.0.1\", encryption: gcm, aes_key_file: tencent.key}", "32 hex digits"),
            ("  - alibaba: {account_id: \"1\", endpoint: \"https://127.0.0.1\", encryption: cbc}", "aes_key_file"),
            ("  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret_file: empty.secret}", "is empty"),
            ("  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret_file: missing.secret}", "cannot read"),
            ("  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\"}", "secret_file is required"),
            ("  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret: inline}", "unknown key"),
            ("  - alibaba: {account_id: \"1\", api: legacy, endpoint: \"http://127.0.0.1\", secret_file: alibaba.secret}", "plain HTTP"),
            ("  - baidu: {account_id: \"1\", endpoint: \"https://127.0.0.1\", secret_file: baidu.secret, batch_size: 11}", "batch_size"),
        ]
        for (line, expected) in cases {
            let message = failure("upstreams:\n" + line)
            #expect(message.contains(expected), "\(line) → \(message)")
            #expect(message.hasPrefix("v.yaml:"), "names the file and line: \(message)")
            for secret in ["0123456789abcdef0123456789abcdef", "dnspodpass", "baidu-test-secret", "zz-not-hex-zz", "abc\n"] {
                #expect(!message.contains(secret), "\(message)")
            }
        }
    }

    @Test func plainHTTPIsAllowedOnlyWhenAsked() throws {
        let upstreams = try parse(
            """
            upstreams:
              - alibaba: {account_id: "100001", api: legacy, endpoint: "http://127.0.0.1:18701", allow_plain_http: true}
            """)
        #expect(upstreams[0].isPlainHTTP)
    }
}
