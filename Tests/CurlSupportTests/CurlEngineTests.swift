import CurlSupport
import TestSupport
import Testing

/// The shared libcurl engine against the real BIND DoH server (HTTP/2 over TLS, test CA).
@Suite(.serialized) struct CurlEngineTests {
    typealias Env = TestEnvironment
    /// A valid DoH GET for www.hd.test A (ID 0, no EDNS), base64url.
    static let query = "AAABAAABAAAAAAAAA3d3dwJoZAR0ZXN0AAABAAE"

    func request(_ path: String = "/dns-query?dns=\(query)") -> CurlRequest {
        CurlRequest(
            url: "https://doh-a.test:\(Env.dohPort)\(path)", headers: ["Accept: application/dns-message"],
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
        var oversized = CurlRequest(
            url: Env.hostile("oversized"),
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

/// The one pinning rule (`Pinning`): a real name is never given an address in libcurl's DNS cache.
@Suite struct PinningTests {
    @Test func aPinNameStandsForExactlyItsAddresses() {
        let pin = Pinning.pin(host: "origin.hd.test", port: 443, to: ["127.0.0.4", "[::1]"])
        #expect(pin.connectTo.count == 1 && pin.resolve.count == 1)
        let name = String(pin.connectTo[0].split(separator: ":")[2])
        #expect(name.hasPrefix("pin-") && name.hasSuffix(".httpdns.invalid"), "an RFC 6761 name that exists nowhere")
        #expect(pin.connectTo[0] == "origin.hd.test:443:\(name):443")
        #expect(pin.resolve[0] == "+\(name):443:127.0.0.4,[::1]", "expiring, and never for the real name")
        #expect(Pinning.pin(host: "other.hd.test", port: 443, to: ["127.0.0.4", "[::1]"]).resolve == pin.resolve, "same addresses, same pin")
        #expect(Pinning.pin(host: "origin.hd.test", port: 443, to: ["127.0.0.8"]).resolve != pin.resolve)
        #expect(Pinning.pin(host: "origin.hd.test", port: 8443, to: ["127.0.0.4", "[::1]"]).resolve != pin.resolve)
        #expect(Pinning.pin(host: "origin.hd.test", port: 443, to: []) == ([], []))
    }

    @Test func aTransferThatWouldNeedALookupFailsInsteadOfAskingTheSystem() async throws {
        // A name nothing pins: libcurl would ask the system's DNS; the transfer is refused first.
        let unpinned = CurlRequest(url: "https://unpinned.hd.test:\(unusedLoopbackPort())/", timeout: .seconds(3))
        await #expect { try await CurlEngine.shared.perform(unpinned) } throws: {
            ($0 as? CurlError)?.code == .invalidRequest && ($0 as? CurlError)?.message.contains("must be pinned") == true
        }
    }
}

extension PinningTests {
    @Test func errorMessagesNameTheAddressesNotThePinName() {
        let pin = Pinning.pin(host: "doh-a.test", port: 443, to: ["127.0.0.9", "127.0.0.1"])
        let name = String(pin.connectTo[0].split(separator: ":")[2])
        #expect(
            Pinning.readable("Failed to connect to \(name) port 443: Couldn't connect", resolve: pin.resolve)
                == "Failed to connect to 127.0.0.9,127.0.0.1 port 443: Couldn't connect")
        #expect(Pinning.readable("unrelated", resolve: pin.resolve) == "unrelated")
    }
}
