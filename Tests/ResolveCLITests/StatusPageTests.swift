import CurlSupport
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `GET /ui` in a real browser: headless Chromium loads the page with the token as Basic
    /// credentials, the page's script fetches the API, and the DOM it builds is checked. A screenshot
    /// is kept in `.build/test-artifacts/status-page.png`.
    @Suite(.serialized) struct StatusPageTests {
        static let token = "status-page-token-0123456789"
        static let dead = "https://dead.test:1/dns-query"

        @Test func aBrowserShowsTheHijackedNameWithItsReasonAndADeadUpstreamAsDown() async throws {
            let port = unusedLoopbackPort()
            let daemon = try await DaemonProcess(
                config: DaemonProcess.config(
                    port: port, watch: ["origin.hd.test", "bank.hd.test"], upstreams: [TestEnvironment.dohA, Self.dead],
                    extra: "readiness: {interval: 1}\nauth_token: \(Self.token)"),
                port: port)
            defer { daemon.stop() }
            let bearer = ["Authorization: Bearer \(Self.token)"]
            // The watcher's first verdicts, and the dead upstream probed and failed.
            var status: [String: Any] = [:]
            for _ in 0..<100 {
                let body = try await daemon.get("/v1/status", headers: bearer).body
                status = (try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:]
                let hosts = status["hosts"] as? [[String: Any]] ?? []
                let upstreams = status["upstreams"] as? [[String: Any]] ?? []
                if hosts.allSatisfy({ $0["verdict"] is String }), upstreams.last?["state"] as? String == "down" { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            let hosts = try #require(status["hosts"] as? [[String: Any]])
            let bank = try #require(hosts.first { $0["host"] as? String == "bank.hd.test" })
            #expect(bank["verdict"] as? String == "hijacked", "\(status)")
            let reason = try #require(bank["reason"] as? String)
            #expect((bank["history"] as? [[String: Any]])?.last?["verdict"] as? String == "hijacked", "\(bank)")
            let upstreams = try #require(status["upstreams"] as? [[String: Any]])
            #expect(upstreams.map { $0["state"] as? String } == ["up", "down"], "\(upstreams)")

            // Protected like the API: a browser is asked for the token (Basic), and it is accepted so.
            let refused = try await daemon.get("/ui")
            #expect(refused.status == 401)
            #expect(
                refused.headers.contains { $0.name.lowercased() == "www-authenticate" && $0.value.hasPrefix("Basic realm=") }, "\(refused.headers)")
            let basic = Data("ui:\(Self.token)".utf8).base64EncodedString()
            let page = try await daemon.get("/ui", headers: ["Authorization: Basic \(basic)"])
            #expect(page.status == 200 && daemon.text(page).contains("<title>resolve daemon</title>"))
            #expect(
                page.headers.contains {
                    $0.name.lowercased() == "content-security-policy" && $0.value.hasPrefix("default-src 'none'; script-src 'sha256-")
                })
            let wrong = Data("ui:not-the-token".utf8).base64EncodedString()
            #expect(try await daemon.get("/ui", headers: ["Authorization: Basic \(wrong)"]).status == 401)

            let artifacts = TestEnvironment.root + "/.build/test-artifacts"
            try FileManager.default.createDirectory(atPath: artifacts, withIntermediateDirectories: true)
            let dom = try await chromium(url: "http://ui:\(Self.token)@127.0.0.1:\(port)/ui", screenshot: artifacts + "/status-page.png")
            let bankRow = try #require(row(in: dom, attribute: "data-host=\"bank.hd.test\""), "no row for bank.hd.test: \(dom)")
            #expect(bankRow.contains("class=\"badge hijacked\">hijacked<"), "\(bankRow)")
            #expect(bankRow.contains(escaped(reason)), "the reason '\(reason)' in \(bankRow)")
            let originRow = try #require(row(in: dom, attribute: "data-host=\"origin.hd.test\""))
            #expect(originRow.contains("class=\"badge consistent\">consistent<"), "\(originRow)")
            let deadRow = try #require(row(in: dom, attribute: "data-upstream=\"\(Self.dead)\""), "\(dom)")
            // Down, or — once it has failed often enough, which depends on timing — its circuit open.
            #expect(
                deadRow.contains("class=\"badge down\">down<") || deadRow.contains("class=\"badge circuit_open\">circuit open<"), "\(deadRow)")
            let liveRow = try #require(row(in: dom, attribute: "data-upstream=\"\(TestEnvironment.dohA)\""))
            #expect(liveRow.contains("class=\"badge up\">up<"), "\(liveRow)")
            #expect(dom.contains("2 watched, 1 hijacked"), "\(dom)")
            #expect(FileManager.default.fileExists(atPath: artifacts + "/status-page.png"))
        }

        /// Headless Chromium's DOM after the page's script ran (and a screenshot), loopback only.
        func chromium(url: String, screenshot: String) async throws -> String {
            let home = FileManager.default.temporaryDirectory.appendingPathComponent("chromium-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: home) }
            try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
            let flags = """
                --headless=new --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \\
                --disable-background-networking --disable-component-update --disable-sync --disable-default-apps \\
                --disable-domain-reliability --no-pings --dns-prefetch-disable \\
                --host-resolver-rules='MAP * ~NOTFOUND, EXCLUDE 127.0.0.1' --user-data-dir='\(home.path)/profile' \\
                --virtual-time-budget=6000 --window-size=1280,900
                """
            _ = try await CLI.run(
                ["-c", "HOME='\(home.path)' exec timeout 60 /usr/bin/chromium \(flags) --screenshot='\(screenshot)' '\(url)'"],
                executable: "/bin/sh")
            return try await CLI.run(
                ["-c", "HOME='\(home.path)' exec timeout 60 /usr/bin/chromium \(flags) --dump-dom '\(url)'"], executable: "/bin/sh"
            )
            .stdout
        }

        /// The `<tr …attribute…>…</tr>` of the dumped DOM.
        func row(in dom: String, attribute: String) -> String? {
            guard let start = dom.range(of: "<tr " + attribute) ?? dom.range(of: attribute) else { return nil }
            guard let end = dom.range(of: "</tr>", range: start.upperBound..<dom.endIndex) else { return nil }
            return String(dom[start.lowerBound..<end.upperBound])
        }

        func escaped(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        }
    }
}
