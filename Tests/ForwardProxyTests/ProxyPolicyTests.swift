import DNSCore
import DaemonHTTP
import Foundation
import NIOHTTP1
import ResolverConfig
import Testing

@testable import ForwardProxy

/// The forward proxy's pure decisions: targets, authentication, policy, destinations.
@Suite struct ProxyPolicyTests {
    @Test func connectTargetsNeedAHostAndAPort() {
        #expect(ProxyTarget(authority: "Example.TEST:443") == ProxyTarget(host: "example.test", port: 443))
        #expect(ProxyTarget(authority: "[2001:db8::1]:8443") == ProxyTarget(host: "2001:db8::1", port: 8443))
        #expect(ProxyTarget(authority: "192.0.2.1:80")?.isLiteral == true)
        for bad in [
            "example.test", "example.test:", "example.test:0", "example.test:65536", "example.test:+443", "2001:db8::1:443", "[::1]", "[nothost]:443",
            ":443", "exa mple.test:443", "a..b:443", "example.test:443:1",
        ] {
            #expect(ProxyTarget(authority: bad) == nil, "\(bad)")
        }
    }

    @Test func basicAuthenticationIsCheckedExactly() {
        var settings = ProxySettings()
        #expect(ProxyPolicy(settings: settings).authorizes(nil), "no auth_file: open")
        settings.users = ["alice": "s3cret:with:colons"]
        let policy = ProxyPolicy(settings: settings)
        func basic(_ text: String) -> String { "Basic " + Data(text.utf8).base64EncodedString() }
        #expect(policy.authorizes(basic("alice:s3cret:with:colons")))
        #expect(policy.authorizes("basic " + Data("alice:s3cret:with:colons".utf8).base64EncodedString()))
        for wrong in [
            nil, basic("alice:s3cret"), basic("alice:s3cret:with:colonsX"), basic("bob:s3cret:with:colons"), "Bearer x", "Basic !!!", basic("alice"),
        ] {
            #expect(!policy.authorizes(wrong), "\(String(describing: wrong))")
        }
        #expect(HTTPSyntax.constantTimeEqual([1, 2, 3], [1, 2, 3]) && !HTTPSyntax.constantTimeEqual([1, 2], [1, 2, 3]))
    }

    @Test func portsPatternsAndDestinations() throws {
        var settings = ProxySettings()
        settings.allow = ["hd.test"]
        settings.deny = ["*.blocked.hd.test"]
        let policy = ProxyPolicy(settings: settings)
        func target(_ host: String, _ port: Int) throws -> ProxyTarget { try #require(ProxyTarget(host: host, port: port)) }
        #expect(policy.refusal(for: try target("www.hd.test", 443), plainHTTP: false) == nil)
        #expect(policy.refusal(for: try target("www.hd.test", 80), plainHTTP: false)?.status == 403, "CONNECT to 80: not by default")
        #expect(policy.refusal(for: try target("www.hd.test", 80), plainHTTP: true) == nil, "plain http may use 80")
        #expect(policy.refusal(for: try target("www.hd.test", 25), plainHTTP: false)?.reason.contains("port 25") == true)
        #expect(policy.refusal(for: try target("a.blocked.hd.test", 443), plainHTTP: false)?.status == 403)
        #expect(policy.refusal(for: try target("blocked.hd.test", 443), plainHTTP: false) == nil, "*. matches names under it only")
        #expect(policy.refusal(for: try target("example.test", 443), plainHTTP: false)?.status == 403, "not in the allow list")
        let addresses = ["127.0.0.4", "10.1.2.3", "169.254.1.1", "198.18.0.10", "::1", "fe80::1", "2001:2::10"].compactMap { IPAddress($0) }
        #expect(policy.dialable(addresses).map(\.description) == ["198.18.0.10", "2001:2::10"])
        settings.allowPrivateDestinations = true
        #expect(ProxyPolicy(settings: settings).dialable(addresses).count == addresses.count)
    }

    /// docs/threat-model.md F8: an allow list of names admitted every IP literal (`CONNECT 127.0.0.4:18480`).
    @Test func allowAndDenyListsApplyToIPLiterals() throws {
        var settings = ProxySettings()
        settings.connectPorts = [443]
        settings.allow = ["origin.hd.test", "192.0.2.7", "[2001:db8::7]"]
        let policy = ProxyPolicy(settings: settings)
        func refused(_ host: String) throws -> Bool { policy.refusal(for: try #require(ProxyTarget(host: host, port: 443)), plainHTTP: false) != nil }
        #expect(try refused("127.0.0.4"), "a literal the allow list does not name")
        #expect(try refused("198.18.0.10"))
        #expect(try refused("::1"))
        #expect(try !refused("192.0.2.7"), "a literal it names")
        #expect(try !refused("2001:db8:0::7"), "any spelling of a listed v6 literal")
        #expect(try !refused("origin.hd.test"))
        #expect(try refused("2.7"), "a name is never matched against a literal's digits")
        settings.allow = []
        settings.deny = ["127.0.0.4", "bank.hd.test"]
        let denying = ProxyPolicy(settings: settings)
        #expect(denying.refusal(for: try #require(ProxyTarget(host: "127.0.0.4", port: 443)), plainHTTP: false)?.status == 403)
        #expect(denying.refusal(for: try #require(ProxyTarget(host: "127.0.0.5", port: 443)), plainHTTP: false) == nil, "empty allow: all else")
    }

    /// docs/threat-model.md F9: `Connection: content-length` took a GET's framing away, and its body reached
    /// the origin as a second request.
    @Test func aConnectionHeaderCannotTakeTheFramingAway() {
        let smuggling = HTTPHeaders([("Host", "a.test"), ("Content-Length", "40"), ("Connection", "Content-Length")])
        #expect(ProxyConnectionHandler.connectionNamesFraming(smuggling) == "content-length")
        #expect(ProxyConnectionHandler.connectionNamesFraming(HTTPHeaders([("Connection", "close, Transfer-Encoding")])) == "transfer-encoding")
        #expect(ProxyConnectionHandler.connectionNamesFraming(HTTPHeaders([("Connection", "host")])) == "host")
        #expect(ProxyConnectionHandler.connectionNamesFraming(HTTPHeaders([("Connection", "keep-alive, X-Hop")])) == nil)
        // In a response the framing stays whatever the Connection header names.
        let kept = ProxyConnectionHandler.endToEnd(smuggling)
        #expect(kept["content-length"] == ["40"])
    }

    @Test func theWatchersVerdictsSteerTheDialling() {
        let ips = ["127.0.0.4", "127.0.0.8", "127.0.0.10"].compactMap { IPAddress($0) }
        let steered = ProxyPolicy.heed(ips, hijacked: [ips[1]], ranking: [ips[2], ips[1], IPAddress("127.0.0.99")!])
        #expect(steered == [ips[2], ips[0]], "a hijacked address is never dialled; the healthy ranking goes first")
        #expect(ProxyPolicy.heed(ips, hijacked: [], ranking: []) == ips)
    }

    @Test func hopByHopHeadersStayOnTheirHop() {
        let headers = HTTPHeaders([
            ("Host", "a.test"), ("Connection", "keep-alive, X-Private-Hop"), ("X-Private-Hop", "1"), ("Keep-Alive", "timeout=5"),
            ("Proxy-Authorization", "Basic eDp5"), ("Proxy-Connection", "keep-alive"), ("TE", "trailers"), ("Upgrade", "h2c"),
            ("Transfer-Encoding", "chunked"), ("Cookie", "k=v"), ("Accept", "*/*"),
        ])
        let kept = ProxyConnectionHandler.endToEnd(headers)
        #expect(kept.map(\.name) == ["Host", "Cookie", "Accept"])
    }

    @Test func configKeys() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("proxy-config-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try "alice:pw1\n\n# comment\nbob:pw:2\n".write(toFile: directory + "/users", atomically: true, encoding: .utf8)
        try "alice:pw1\nmallory-secretpass\n".write(toFile: directory + "/bad", atomically: true, encoding: .utf8)
        let base = "upstreams: [{doh: \"https://192.0.2.1/dns-query\"}]\nproxy_listen: \"127.0.0.1:8118\"\n"
        let config = try ConfigFile.parse(
            base + "proxy: {connect_ports: [443, 8443], allow: [Hd.Test], deny: [x.test], allow_private_destinations: true, auth_file: users,"
                + " limits: {max_connections: 10, connect_timeout: 2, idle_timeout: 30, max_header_bytes: 4096}}",
            file: "p.yaml", directory: directory)
        let proxy = config.daemon.proxy
        #expect(config.daemon.proxyListen == "127.0.0.1:8118")
        #expect(proxy.connectPorts == [443, 8443] && proxy.allow == ["hd.test"] && proxy.deny == ["x.test"] && proxy.allowPrivateDestinations)
        #expect(proxy.users == ["alice": "pw1", "bob": "pw:2"])
        #expect(
            proxy.maxConnections == 10 && proxy.connectTimeout == .seconds(2) && proxy.idleTimeout == .seconds(30) && proxy.maxHeaderBytes == 4096)
        #expect(ConfigFile.parseDefaults().daemon.proxy.connectPorts == [443])
        do {
            _ = try ConfigFile.parse(base + "proxy: {auth_file: bad}", file: "p.yaml", directory: directory)
            Issue.record("a malformed users file was accepted")
        } catch {
            #expect(error.message.contains("line 2") && !error.message.contains("secretpass"), "\(error.message)")
        }
        #expect(throws: DNSError.self) { try ConfigFile.parse(base + "proxy: {connect_ports: [0]}", file: "p.yaml", directory: directory) }
        #expect(throws: DNSError.self) { try ConfigFile.parse(base + "proxy: {open_relay: true}", file: "p.yaml", directory: directory) }
    }
}

extension ConfigFile {
    /// The defaults, as a file with only an upstream gives them.
    static func parseDefaults() -> ConfigFile {
        try! ConfigFile.parse("upstreams: [{doh: \"https://192.0.2.1/dns-query\"}]", file: "d.yaml", directory: "/")
    }
}
