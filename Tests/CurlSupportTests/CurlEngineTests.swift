import CurlSupport
import TestSupport
import Testing

/// The shared libcurl engine against the real BIND DoH server (HTTP/2 over TLS, test CA).
@Suite(.serialized) struct CurlEngineTests {
    typealias Env = TestEnvironment
    /// A valid DoH GET for www.hd.test A (ID 0, no EDNS), base64url.
    static let query = "AAABAAABAAAAAAAAA3d3dwJoZAR0ZXN0AAABAAE"

    func request(_ path: String = "/dns-query?dns=\(query)") -> CurlRequest {
        CurlRequest(url: "https://doh-a.test:\(Env.dohPort)\(path)", headers: ["Accept: application/dns-message"],
                    connectTo: ["doh-a.test:\(Env.dohPort):127.0.0.1:\(Env.dohPort)"], timeout: .seconds(5),
                    trust: TLSTrust(caFile: Env.caFile))
    }

    @Test func speaksHTTP2AndReusesTheConnection() async throws {
        try Env.requireRunning()
        let engine = CurlEngine()
        let first = try await engine.perform(request())
        #expect(first.status == 200)
        #expect(first.httpVersion == 20, "HTTP/2 by ALPN")
        #expect(first.contentType == "application/dns-message")
        #expect(first.remoteIP == "127.0.0.1")
        #expect(first.newConnections == 1)
        let second = try await engine.perform(request())
        #expect(second.newConnections == 0, "the warm connection is reused")
    }

    @Test func concurrentTransfersMultiplexOverOneConnection() async throws {
        try Env.requireRunning()
        let engine = CurlEngine()
        _ = try await engine.perform(request())
        let connections = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<50 { group.addTask { try await engine.perform(self.request()).newConnections } }
            return try await group.reduce(0, +)
        }
        #expect(connections == 0, "50 concurrent streams on the existing HTTP/2 connection")
    }

    @Test func bodyCapStopsOversizedResponses() async throws {
        try Env.requireRunning()
        var oversized = CurlRequest(url: Env.hostile("oversized"),
                                    connectTo: ["hostile.test:\(Env.dohPort):\(Env.hostileAddress):\(Env.dohPort)"],
                                    trust: TLSTrust(caFile: Env.caFile))
        oversized.maxResponseBytes = 1024
        await #expect { try await CurlEngine.shared.perform(oversized) } throws: {
            ($0 as? CurlError)?.code == .responseTooLarge
        }
    }

    @Test func plaintextIsRefusedForHTTPSOnlyTransfers() async throws {
        let plain = CurlRequest(url: "http://127.0.0.1:\(unusedLoopbackPort())/", protocols: "https")
        await #expect { try await CurlEngine.shared.perform(plain) } throws: {
            ($0 as? CurlError)?.code == .invalidRequest
        }
    }
}
