import DaemonListening
import NIOCore

/// The I/O decisions of one HTTP/2 connection — when to flush, when to take the next read, when a
/// stalled answer ends the connection, when it closes — as a state machine without I/O: the NIO
/// handler (``HTTP2ConnectionHandler``) reports what happened and does what it is told. The frame
/// layer and the request state machine decide what is written; this decides when it leaves.
///
/// - Flushes: the answers of one read leave together at its end, and every
///   ``WriteBatching/flushEvery`` answers during a long read (a client waiting for its first answer
///   does not wait for the whole read); an answer that comes from a task leaves on the next turn of
///   the loop, once for all that came in that turn.
/// - Reads: none is asked for while the channel is not writable (a client that does not read its
///   answers stops being read); the one NIO asked for is taken once the channel drains.
/// - Send timeout: an answer that waits for flow-control window as long as the idle timeout ends
///   the connection, whatever other streams the client lets through meanwhile.
struct HTTP2ConnectionIO {
    enum Flush: Equatable {
        /// Nothing to do now: the read's end (or an already scheduled turn) flushes.
        case later
        /// Flush now.
        case now
        /// Schedule a flush on the next turn of the loop.
        case nextTurn
    }

    private(set) var reading = false
    private(set) var closing = false
    private var flushScheduled = false
    private var answersSinceFlush = 0
    private var readHeld = false
    /// The stream whose answer has waited longest for window, and since when.
    private var stalled: (stream: UInt32, since: NIODeadline)?

    /// Bytes arrived: false once the connection is closing (they are dropped).
    mutating func readStarted() -> Bool {
        guard !closing else { return false }
        reading = true
        return true
    }

    /// The read is over: the handler flushes what it wrote, and nothing is pending any more.
    mutating func readFinished() {
        reading = false
        answersSinceFlush = 0
        flushScheduled = false
    }

    /// An answer or a reset went into the output.
    mutating func wrote() -> Flush {
        answersSinceFlush += 1
        if reading {
            guard answersSinceFlush >= WriteBatching.flushEvery else { return .later }
            answersSinceFlush = 0
            return .now
        }
        guard !flushScheduled else { return .later }
        flushScheduled = true
        return .nextTurn
    }

    /// The scheduled turn came: whether its flush is still due (a read or a close may have flushed
    /// meanwhile).
    mutating func turnCame() -> Bool {
        guard flushScheduled, !reading, !closing else { return false }
        flushScheduled = false
        answersSinceFlush = 0
        return true
    }

    /// NIO asks for a read: true to take it now, false to hold it until the channel is writable.
    mutating func readRequested(writable: Bool) -> Bool {
        if writable { return true }
        readHeld = true
        return false
    }

    /// The channel became writable: true when the bytes a full channel left unprocessed are to be
    /// processed now, as one more read (``readStarted()`` … ``readFinished()``).
    func resumesHeldBytes(writable: Bool) -> Bool { writable && !closing }

    /// After the held bytes: true to take the read NIO asked for while the channel was full.
    mutating func resumesRead(writable: Bool) -> Bool {
        guard readHeld, writable, !closing else { return false }
        readHeld = false
        return true
    }

    /// A tick with `waiting`, the stream whose answer has waited longest for window (nil: none):
    /// true once one stream has waited `limit`.
    mutating func sendTimedOut(waiting: UInt32?, now: NIODeadline, limit: TimeAmount) -> Bool {
        guard let waiting else {
            stalled = nil
            return false
        }
        guard let stalled, stalled.stream == waiting else {
            stalled = (waiting, now)
            return false
        }
        return now - stalled.since >= limit
    }

    /// The connection closes: true the first time (the handler flushes and closes after the last
    /// write); nothing is flushed on a later turn.
    mutating func close() -> Bool {
        guard !closing else { return false }
        closing = true
        flushScheduled = false
        return true
    }
}
