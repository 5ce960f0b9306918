import DaemonListening
import NIOCore
import Testing

@testable import DaemonHTTP

/// The HTTP/2 handler's flush, read and close decisions, without a channel. Each test runs a
/// sequence of events and compares the decisions taken with the expected ones.
@Suite struct HTTP2ConnectionIOTests {
    @Test func answersOfAReadLeaveEverySixteenthAndAtTheEnd() {
        var io = HTTP2ConnectionIO()
        let started = io.readStarted()
        let decisions = (1...40).map { _ in io.wrote() }
        io.readFinished()
        let turn = io.turnCame()
        #expect(started)
        let flushedAt = decisions.indices.filter { decisions[$0] == .now }.map { $0 + 1 }
        #expect(flushedAt == [WriteBatching.flushEvery, 2 * WriteBatching.flushEvery], "every 16th answer of a long read")
        #expect(decisions.allSatisfy { $0 != .nextTurn }, "nothing scheduled while reading: the read's end flushes")
        #expect(!io.reading)
        #expect(!turn, "no turn was scheduled")
    }

    @Test func answersFromTasksLeaveOnceOnTheNextTurn() {
        var io = HTTP2ConnectionIO()
        let writes = [io.wrote(), io.wrote(), io.wrote()]
        let turns = [io.turnCame(), io.turnCame()]
        let next = io.wrote()
        #expect(writes == [.nextTurn, .later, .later], "one turn for all the answers of this turn")
        #expect(turns == [true, false], "flushed once")
        #expect(next == .nextTurn, "the next answer schedules a new turn")
    }

    @Test func aReadThatStartsBeforeTheTurnTakesItsFlush() {
        var io = HTTP2ConnectionIO()
        let write = io.wrote()
        _ = io.readStarted()
        let duringRead = io.turnCame()
        io.readFinished()  // the handler flushes at the end of the read
        let afterRead = io.turnCame()
        #expect(write == .nextTurn)
        #expect(!duringRead, "not while reading")
        #expect(!afterRead, "the read's end flushed it")
    }

    @Test func readsWaitWhileTheChannelIsFull() {
        var io = HTTP2ConnectionIO()
        let asked = [io.readRequested(writable: true), io.readRequested(writable: false)]
        let resumed = [io.resumesRead(writable: false), io.resumesRead(writable: true), io.resumesRead(writable: true)]
        #expect(asked == [true, false], "held while the client does not read its answers")
        #expect(io.resumesHeldBytes(writable: true))
        #expect(resumed == [false, true, false], "the held read is taken once, once writable")
    }

    @Test func aClosingConnectionReadsAndFlushesNothingMore() {
        var io = HTTP2ConnectionIO()
        _ = io.wrote()
        _ = io.readRequested(writable: false)
        let closes = [io.close(), io.close()]
        let after = [io.turnCame(), io.readStarted(), io.resumesRead(writable: true)]
        #expect(closes == [true, false], "closed once")
        #expect(after == [false, false, false], "no flush on the turn, bytes dropped, no read resumed")
        #expect(!io.resumesHeldBytes(writable: true))
    }

    @Test func anAnswerWaitingForWindowAsLongAsTheIdleTimeoutEndsTheConnection() {
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000), limit = TimeAmount.seconds(30)
        var io = HTTP2ConnectionIO()
        let oneStream = [0, 29, 30].map { io.sendTimedOut(waiting: 1, now: start + .seconds($0), limit: limit) }
        #expect(oneStream == [false, false, true])
        // Another stream waiting longest starts its own wait; none waiting forgets it.
        var other = HTTP2ConnectionIO()
        let waits: [(UInt32?, Int64)] = [(1, 0), (3, 20), (3, 40), (3, 50), (nil, 60), (3, 61)]
        let timedOut = waits.map { other.sendTimedOut(waiting: $0.0, now: start + .seconds($0.1), limit: limit) }
        #expect(timedOut == [false, false, false, true, false, false])
    }
}
