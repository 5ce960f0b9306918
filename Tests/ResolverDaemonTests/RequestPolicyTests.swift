import Foundation
import ResolverConfig
import Testing

@testable import ResolverDaemon

/// Who may use the API: the bearer token, or Basic with the token as the password (the status page).
@Suite struct RequestPolicyTests {
    static let token = "a-token-of-twenty-chars"

    func basic(_ text: String) -> String { "Basic " + Data(text.utf8).base64EncodedString() }

    @Test func theTokenIsTakenAsBearerOrAsTheBasicPassword() {
        #expect(RequestPolicy.credentials("Bearer \(Self.token)", match: Self.token))
        #expect(RequestPolicy.credentials("bearer \(Self.token)", match: Self.token))
        #expect(RequestPolicy.credentials(basic("ui:\(Self.token)"), match: Self.token))
        #expect(RequestPolicy.credentials(basic(":\(Self.token)"), match: Self.token), "any user name, the empty one too")
        #expect(RequestPolicy.credentials("BASIC " + Data("x:\(Self.token)".utf8).base64EncodedString(), match: Self.token))
    }

    @Test(arguments: [
        "Bearer wrong-token-of-twenty-x", "Bearer", "Bearer  ", "Token a-token-of-twenty-chars",
        "Basic !!!not-base64!!!", "Basic " + Data("no-colon-here".utf8).base64EncodedString(),
        "Basic " + Data("\("a-token-of-twenty-chars"):".utf8).base64EncodedString(),
        "Basic " + Data("ui:a-token-of-twenty-chars-and-more".utf8).base64EncodedString(),
        "Basic " + String(repeating: "A", count: 4_000), "", "Basic",
    ])
    func anythingElseIsRefused(header: String) {
        #expect(!RequestPolicy.credentials(header, match: Self.token))
    }

    @Test func theStatusPageAsksForBasicAndTheAPIStillForBearer() throws {
        let config = try ConfigFile.parse("upstreams:\n  - doh: https://127.0.0.1/q\nauth_token: \(Self.token)\n")
        let policy = RequestPolicy(config)
        let page = try #require(policy.check(method: "GET", target: "/ui", contentLength: nil, authorization: nil))
        #expect(
            page.status == 401 && page.headers.filter { $0.0 == "www-authenticate" }.map(\.1) == ["Basic realm=\"resolve-daemon\", charset=\"UTF-8\""]
        )
        let api = try #require(policy.check(method: "GET", target: "/v1/status", contentLength: nil, authorization: nil))
        #expect(api.status == 401 && api.headers.filter { $0.0 == "www-authenticate" }.map(\.1) == ["Bearer realm=\"resolve-daemon\""])
        #expect(policy.check(method: "GET", target: "/v1/status", contentLength: nil, authorization: basic("ui:\(Self.token)")) == nil)
        #expect(policy.check(method: "POST", target: "/ui", contentLength: nil, authorization: "Bearer \(Self.token)")?.status == 405)
    }
}
