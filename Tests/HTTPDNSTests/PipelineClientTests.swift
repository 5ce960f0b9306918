import CurlSupport
import DNSCore
import Testing

@testable import HTTPDNS

/// The pipeline client's decisions that outlive a connection: how long "this server has no HTTP/2"
/// lasts, and which DoT IDs a new query may take.
@Suite struct PipelineClientTests {
    func client() throws -> PipelineClient<DoTFraming> {
        PipelineClient(endpoint: try .dot("127.0.0.1:853", tlsName: "dot.test"), trust: TLSTrust(), threadName: "test", http2: false) {
            DoTFraming()
        }
    }

    /// F25 of redteam-4: a refusal is remembered for ``PipelineClient/refusalLifetime`` only, then
    /// the client's own protocol is tried again (before: for the life of the process).
    @Test func aRefusedProtocolIsTriedAgainAfterItsLifetime() throws {
        let client = try client()
        let start = ContinuousClock.now
        #expect(client.usesOwnProtocol(at: start))
        client.noteProtocolRefused(at: start)
        #expect(!client.usesOwnProtocol(at: start))
        #expect(!client.usesOwnProtocol(at: start + PipelineClient<DoTFraming>.refusalLifetime - .seconds(1)))
        #expect(client.usesOwnProtocol(at: start + PipelineClient<DoTFraming>.refusalLifetime))
        // Once lapsed, it stays lapsed until the server refuses again.
        #expect(client.usesOwnProtocol(at: start + .seconds(1)))
        #expect(PipelineClient<DoTFraming>.refusalLifetime <= .seconds(600))
    }

    /// F27 of redteam-4: the IDs of queries given up on a connection are not drawn again while their
    /// late answers may come, however the random draws fall (4,000 reserved of 65,536: a draw hits one
    /// about every 16 times, so 20,000 draws would hit hundreds without the reservation).
    @Test func abandonedDoTIDsAreNotDrawnAgain() {
        var abandoned = AbandonedKeys()
        let framing = DoTFraming()
        var output: [UInt8] = []
        let query: [UInt8] = [0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
        for _ in 0..<4_000 {
            abandoned.insert(framing.send(query, into: &output) { abandoned.contains($0) })
        }
        #expect(!abandoned.isFull)
        var drawnAgain = 0
        for _ in 0..<20_000 where abandoned.contains(framing.send(query, into: &output) { abandoned.contains($0) }) {
            drawnAgain += 1
        }
        #expect(drawnAgain == 0)
        // A late answer frees its ID; the bound closes the connection's account.
        var bounded = AbandonedKeys()
        for key in 0..<UInt32(AbandonedKeys.maxKeys) { bounded.insert(key) }
        #expect(bounded.isFull)
        bounded.remove(0)
        #expect(!bounded.contains(0) && !bounded.isFull)
    }
}
