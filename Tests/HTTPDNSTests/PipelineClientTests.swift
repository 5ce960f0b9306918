import CurlSupport
import DNSCore
import Testing

@testable import HTTPDNS

#if canImport(Glibc)
import Glibc
#endif

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
    /// late answers may come, wherever the connection's count stands (4,000 reserved of 65,536, the
    /// count put on a random ID before each draw: a fifth of the draws start on a reserved one).
    @Test func abandonedDoTIDsAreNotDrawnAgain() {
        var abandoned = AbandonedKeys()
        var framing = DoTFraming()
        var output: [UInt8] = []
        let query: [UInt8] = [0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
        while abandoned.count < 4_000 { abandoned.insert(UInt32(UInt16.random(in: 0...UInt16.max))) }
        #expect(!abandoned.isFull)
        var drawnAgain = 0
        var startedOnAReservedID = 0
        for _ in 0..<20_000 {
            framing.nextID = UInt16.random(in: 0...UInt16.max)
            if abandoned.contains(UInt32(framing.nextID)) { startedOnAReservedID += 1 }
            if abandoned.contains(framing.send(query, into: &output) { abandoned.contains($0) }) { drawnAgain += 1 }
        }
        #expect(startedOnAReservedID > 0)
        #expect(drawnAgain == 0)
        // A late answer frees its ID; the bound closes the connection's account.
        var bounded = AbandonedKeys()
        for key in 0..<UInt32(AbandonedKeys.maxKeys) { bounded.insert(key) }
        #expect(bounded.isFull)
        bounded.remove(0)
        #expect(!bounded.contains(0) && !bounded.isFull)
    }

    /// IDs are counted up from a random start, skipping the taken ones, and wrap: 70,000 queries with
    /// 128 in flight never put two in flight under one ID, and the ID on the wire is the key.
    @Test func doTIDsAreUniqueInFlightAcrossTheWrap() {
        var framing = DoTFraming()
        framing.nextID = UInt16.max - 10
        var inFlight: [UInt32] = []
        var output: [UInt8] = []
        let query: [UInt8] = [0xab, 0xcd, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
        var collisions = 0
        var mislabelled = 0
        for _ in 0..<70_000 {
            output.removeAll(keepingCapacity: true)
            let key = framing.send(query, into: &output) { inFlight.contains($0) }
            if inFlight.contains(key) { collisions += 1 }
            if UInt32(output[2]) << 8 | UInt32(output[3]) != key { mislabelled += 1 }
            inFlight.append(key)
            if inFlight.count > 128 { inFlight.removeFirst() }
        }
        #expect(collisions == 0 && mislabelled == 0)
    }
}

/// What an upstream connection's socket is told: linear retransmission timeouts for a thin stream and
/// a 50 ms floor on the timer past the RTT (the lossy link's tail, BENCHMARKS.md). Read back from the
/// kernel, so a setting that silently failed shows.
@Suite struct UpstreamSocketTests {
    @Test func anUpstreamSocketRetransmitsSooner() throws {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(socket >= 0)
        defer { close(socket) }
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var size = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(socket, Int32(IPPROTO_TCP), name, &value, &size) == 0 ? value : nil
        }
        #expect(option(16) == 0, "the kernel's default: exponential backoff")
        let defaultFloor = option(45)
        UpstreamSocket.retransmitSooner(socket)
        #expect(option(16) == 1, "TCP_THIN_LINEAR_TIMEOUTS")
        if let defaultFloor {
            // Linux 6.15 and later: the floor is kept in jiffies, so it reads back rounded up.
            #expect(defaultFloor >= 200_000)
            let floor = try #require(option(45))
            #expect((50_000..<60_000).contains(floor), "TCP_RTO_MIN_US read back as \(floor) µs")
        }
    }
}
