import DNSCore
import InMemoryLogging
import Logging
import NIOCore
import NIOEmbedded
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire

/// DNS over TCP in an embedded pipeline: pipelined queries, backpressure, bounded work in flight.
@Suite struct TCPQueryHandlerTests {
    static func framed(_ name: String, id: UInt16) throws -> ByteBuffer {
        let wire = DNSMessage(id: id, flags: 0x0100, questions: [.init(name: try DomainName(name), type: .a)]).encode()
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt16(wire.count))
        buffer.writeBytes(wire)
        return buffer
    }

    func channel(_ answering: RecordingStubAnswerer) async throws -> NIOAsyncTestingChannel {
        // The handler is made and added on the channel's loop: it is not Sendable.
        try await NIOAsyncTestingChannel { channel in
            try channel.pipeline.syncOperations.addHandler(TCPQueryHandler(answering: answering, lookups: LookupBudget(limit: 100)))
        }
    }

    @Test func aClientThatDoesNotReadGetsNothingMoreQueuedUntilItDoes() async throws {
        let answering = RecordingStubAnswerer(answersWithoutWaiting: true)
        let channel = try await channel(answering)
        channel.isWritable = false
        var burst = ByteBuffer()
        for id in 1...200 {
            var one = try Self.framed("www.hd.test", id: UInt16(id))
            burst.writeBuffer(&one)
        }
        try await channel.writeInbound(burst)
        #expect(try await channel.readOutbound(as: ByteBuffer.self) == nil, "not writable: nothing answered, the queries wait in the buffer")
        channel.isWritable = true
        channel.pipeline.fireChannelWritabilityChanged()
        var answered = 0
        while let buffer = try await channel.waitForOutboundWrite(as: ByteBuffer.self) as ByteBuffer? {
            var buffer = buffer
            while let length = buffer.readInteger(as: UInt16.self), let message = buffer.readBytes(length: Int(length)) {
                answered += 1
                #expect(try DNSMessage(decoding: message).id == UInt16(answered))
            }
            if answered == 200 { break }
        }
        #expect(answered == 200, "every pipelined query answered, in order")
        #expect(answering.lookups.isEmpty, "each answered without a lookup")
    }

    @Test func atMostSixteenLookupsRunForOneConnection() async throws {
        let answering = RecordingStubAnswerer(answersWithoutWaiting: false, delay: .milliseconds(300))
        let channel = try await channel(answering)
        var burst = ByteBuffer()
        for id in 1...40 {
            var one = try Self.framed("n\(id).hd.test", id: UInt16(id))
            burst.writeBuffer(&one)
        }
        try await channel.writeInbound(burst)
        try await Task.sleep(for: .milliseconds(100))
        #expect(answering.lookups.count == TCPQueryHandler.maxPending, "the rest wait until answers go out")
        var answered = 0
        while answered < 40 {
            var buffer = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
            while let length = buffer.readInteger(as: UInt16.self), buffer.readBytes(length: Int(length)) != nil { answered += 1 }
        }
        // Lookups run as tasks: they start in any order, but each query is looked up exactly once.
        #expect(answering.lookups.count == 40, "no query looked up twice")
        #expect(Set(answering.lookups) == Set((1...40).map { "n\($0).hd.test" }), "every query looked up")
    }

    @Test func garbageFramesGetFORMERRAndAResponseClosesTheConnection() async throws {
        let answering = RecordingStubAnswerer()
        let channel = try await channel(answering)
        var garbage = ByteBuffer()
        garbage.writeInteger(UInt16(14))
        garbage.writeBytes([0x12, 0x34, 0x01, 0x00, 0, 2, 0, 0, 0, 0, 0, 0, 0xde, 0xad])
        try await channel.writeInbound(garbage)
        var reply = try await channel.waitForOutboundWrite(as: ByteBuffer.self)
        let length = reply.readInteger(as: UInt16.self) ?? 0
        let message = reply.readBytes(length: Int(length)) ?? []
        #expect(message.count == 12 && message[3] & 0x0f == 1, "FORMERR: \(message)")
        var response = try Self.framed("www.hd.test", id: 9)
        response.setInteger(UInt16(0x8180), at: 4)  // QR set
        try await channel.writeInbound(response)
        try await channel.closeFuture.get()
        #expect(answering.events.contains("malformed") && answering.lookups.isEmpty)
    }
}

/// Queries the stub drops past its lookup budget are counted one by one and logged at most once per
/// 10 s, with how many since the last line.
@Suite struct DropReportTests {
    @Test func dropsAreLoggedAtMostEveryTenSeconds() {
        let logs = InMemoryLogHandler()
        let logger = Logger(label: "test", factory: { _ in logs })
        let budget = LookupBudget(limit: 1_024)
        let second: UInt64 = 1_000_000_000
        for tick in 0..<5 { budget.reportDrop(logger, now: 100 * second + UInt64(tick) * second) }
        #expect(logs.entries.count == 1)
        #expect(logs.entries.first?.metadata["dropped"] == "1")
        #expect(logs.entries.first?.message.description.contains("1024 lookups already in flight") == true)
        budget.reportDrop(logger, now: 111 * second)
        #expect(logs.entries.count == 2)
        #expect(logs.entries.last?.metadata["dropped"] == "5", "the four silent drops and this one")
        #expect(logs.entries.last?.metadata["since"] == "11 s")
    }
}

/// The one admission budget every listener shares: each side (UDP, whose sources can be forged, and
/// the others) may fill the limit, all together a quarter more, so a flood on one side leaves the
/// other a quarter (F48-7).
@Suite struct LookupBudgetTests {
    @Test func aUDPFloodLeavesTheOtherTransportsAQuarter() {
        let budget = LookupBudget(limit: 8)
        for _ in 0..<8 { #expect(budget.enter(spoofable: true)) }
        #expect(!budget.enter(spoofable: true), "UDP stops at the limit")
        #expect(budget.enter() && budget.enter(), "TCP, DoT and DoH still get 8 / 4")
        #expect(!budget.enter(), "and no more while UDP holds its places")
        #expect(budget.inFlight == 10)
        budget.leave(spoofable: true)
        #expect(budget.enter(), "a place UDP gives back")
        for _ in 0..<7 { budget.leave(spoofable: true) }
        for _ in 0..<3 { budget.leave() }
        #expect(budget.inFlight == 0)
    }

    @Test func aFloodOverTheOtherTransportsLeavesUDPAQuarterAndAReloadMovesTheLimit() {
        // R2 of the review: one client's TCP or DoH connections must not take every place UDP has.
        let budget = LookupBudget(limit: 8)
        for _ in 0..<8 { #expect(budget.enter()) }
        #expect(!budget.enter(), "the other side stops at the limit too")
        #expect(budget.enter(spoofable: true) && budget.enter(spoofable: true), "UDP keeps 8 / 4")
        #expect(!budget.enter(spoofable: true))
        budget.setLimit(12)
        #expect(budget.enter() && budget.limit == 12 && budget.inFlight == 11)
        for _ in 0..<9 { budget.leave() }
        for _ in 0..<2 { budget.leave(spoofable: true) }
        #expect(budget.inFlight == 0)
        let tiny = LookupBudget(limit: 1)
        #expect(tiny.enter(spoofable: true) && tiny.enter(), "a limit of 1 keeps a reserve of 1")
        #expect(!tiny.enter(spoofable: true) && !tiny.enter())
    }

    @Test func refusalsUnderContentionNeverTakeTheReserve() async {
        // R3 of the review: refused UDP lookups must never make the total look fuller than it is.
        let budget = LookupBudget(limit: 64)
        for _ in 0..<64 { _ = budget.enter(spoofable: true) }
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask { for _ in 0..<20_000 { _ = budget.enter(spoofable: true) } }
            }
            group.addTask {
                for _ in 0..<2_000 {
                    #expect(budget.enter(), "a free reserve place is never refused")
                    budget.leave()
                }
            }
        }
        #expect(budget.inFlight == 64)
    }
}
