import DNSCore
import TestSupport
import Testing

@testable import HTTPDNS

/// The pipeline's decisions, driven in process: a scripted server (bytes in, bytes out), instants
/// the test picks, and every action the state asks for recorded. No thread, socket or clock.
@Suite struct PipelineStateTests {
    /// DoT's framing with what a test needs to script: the ID each query's draw starts from (then
    /// DoT's own count), a capacity, and a two-byte `FF FF` marker from the server that drains the
    /// connection (as a GOAWAY does).
    struct ScriptedFraming: PipelineFraming {
        var inner = DoTFraming()
        var limit = 128
        var draws: [UInt16] = []
        var isDraining = false
        static var rewritesIDs: Bool { true }
        var capacity: Int { isDraining ? 0 : limit }

        init(firstID: UInt16 = 100, limit: Int = 128, draws: [UInt16] = []) {
            inner.nextID = firstID
            self.limit = limit
            self.draws = draws
        }

        func start(into output: inout [UInt8]) {}
        mutating func send(_ query: [UInt8], into output: inout [UInt8], isTaken: (UInt32) -> Bool) -> UInt32 {
            if !draws.isEmpty { inner.nextID = draws.removeFirst() }
            return inner.send(query, into: &output, isTaken: isTaken)
        }
        func abandon(_ key: UInt32, into output: inout [UInt8]) {}
        mutating func receive(_ input: inout [UInt8], into output: inout [UInt8], events: inout [PipelineEvent]) {
            if input.starts(with: [0xff, 0xff]) {
                isDraining = true
                input.removeFirst(2)
            }
            // `FE FE`: a frame that answers nothing (a PING, a SETTINGS). `FD FD`: the end of a
            // query given up on (DoH's late answer).
            while input.starts(with: [0xfe, 0xfe]) || input.starts(with: [0xfd, 0xfd]) {
                if input[0] == 0xfd { events.append(.late(0)) }
                input.removeFirst(2)
            }
            // `FC FC` and an ID: the server hands that query back unprocessed (REFUSED_STREAM).
            while input.count >= 4, input.starts(with: [0xfc, 0xfc]) {
                events.append(.unprocessed(UInt32(input[2]) << 8 | UInt32(input[3])))
                input.removeFirst(4)
            }
            inner.receive(&input, into: &output, events: &events)
        }
    }

    /// One state and what it asked for.
    struct Script {
        let t0 = ContinuousClock.now
        var state: PipelineState<ScriptedFraming>
        var actions: [PipelineAction] = []
        var finished: [UInt64: Result<[UInt8], DNSError>] = [:]
        var connects: [ContinuousClock.Instant] = []
        var closes = 0
        var refusals = 0
        var nextToken: UInt64 = 0

        init() {
            state = PipelineState(framing: ScriptedFraming(), now: t0)
        }

        func at(_ milliseconds: Int) -> ContinuousClock.Instant { t0 + .milliseconds(milliseconds) }

        /// Queues a query for `name`, due `timeout` after `now`; returns its token and wire.
        @discardableResult
        mutating func ask(_ name: String, id: UInt16 = 0x1234, timeout: Int = 5_000, at now: Int = 0) throws -> (token: UInt64, wire: [UInt8]) {
            nextToken += 1
            let wire = DNSMessage.query(name: try DomainName(name), type: .a, id: id)
            state.enqueue([PipelineJob(token: nextToken, wire: wire, deadline: at(now) + .milliseconds(timeout))])
            return (nextToken, wire)
        }

        /// Records the actions asked for so far.
        mutating func settle() {
            for action in actions {
                switch action {
                case .finish(let token, let result):
                    #expect(finished[token] == nil, "token \(token) finished twice")
                    finished[token] = result
                case .connect(let deadline): connects.append(deadline)
                case .close: closes += 1
                case .protocolRefused: refusals += 1
                }
            }
            actions.removeAll()
        }

        /// A turn at `now`: decisions, a connection when asked for (`opens`), queries onto it.
        mutating func turn(at now: Int, opens framing: ScriptedFraming? = ScriptedFraming()) {
            state.tick(at(now), &actions)
            let asked = actions.contains { if case .connect = $0 { true } else { false } }
            settle()
            if asked, let framing { state.connected(framing, at(now)) }
            state.send(at(now))
            state.closeIfIdle(at(now), &actions)
            settle()
        }

        /// Everything the state wants written, as the server reads it: (ID on the wire, message).
        mutating func written() -> [(id: UInt16, message: [UInt8])] {
            var bytes: [UInt8] = []
            while let range = state.nextWrite {
                bytes += state.output[range]
                state.wrote(range.count)
            }
            var queries: [(UInt16, [UInt8])] = []
            var offset = 0
            while offset + 2 <= bytes.count {
                let length = Int(bytes[offset]) << 8 | Int(bytes[offset + 1])
                let message = Array(bytes[offset + 2..<offset + 2 + length])
                queries.append((UInt16(message[0]) << 8 | UInt16(message[1]), message))
                offset += 2 + length
            }
            return queries
        }

        /// The server's bytes arrive at `now`.
        mutating func receive(_ bytes: [UInt8], at now: Int) {
            bytes.withUnsafeBytes { state.received($0, at(now), &actions) }
            settle()
        }

        mutating func lose(_ why: String) {
            state.lost(why, &actions)
            settle()
        }
    }

    /// A server's answer to `query` as it travels: length, then the query with QR set.
    static func answer(_ query: [UInt8], rcode: UInt8 = 0) -> [UInt8] {
        var message = query
        message[2] |= 0x80
        message[3] = (message[3] & 0xf0) | rcode
        return [UInt8(message.count >> 8), UInt8(message.count & 0xff)] + message
    }

    static func succeeded(_ result: Result<[UInt8], DNSError>?) -> [UInt8]? {
        if case .success(let bytes) = result { bytes } else { nil }
    }

    static func code(_ result: Result<[UInt8], DNSError>?) -> DNSError.Code? {
        if case .failure(let error) = result { error.code } else { nil }
    }

    @Test func answersInAnyOrderReachTheirCallersUnderTheirOwnIDs() throws {
        var script = Script()
        let a = try script.ask("a.pipe.test", id: 0x0a0a)
        let b = try script.ask("b.pipe.test", id: 0x0b0b)
        script.turn(at: 0)
        #expect(script.connects == [script.at(5_000)])
        let sent = script.written()
        #expect(sent.map(\.id) == [100, 101])
        script.receive(Self.answer(sent[1].message) + Self.answer(sent[0].message), at: 3)
        let answerA = try #require(Self.succeeded(script.finished[a.token]))
        let answerB = try #require(Self.succeeded(script.finished[b.token]))
        #expect(answerA[0...1] == [0x0a, 0x0a] && answerB[0...1] == [0x0b, 0x0b])
        #expect(answerA[12...] == a.wire[12...])
        #expect(script.closes == 0 && script.state.inFlight.isEmpty)
    }

    /// RFC 7766 §6.2.1: a connection that closes after answering some (a server that caps the
    /// queries a connection carries, or one that dies mid-answer) has made progress: its unanswered
    /// queries go out again on a new connection, with no attempt counted.
    @Test func aCloseMidAnswerSendsTheRestAgainOnANewConnection() throws {
        var script = Script()
        let tokens = try (0..<3).map { try script.ask("q\($0).pipe.test").token }
        script.turn(at: 0)
        let sent = script.written()
        #expect(sent.count == 3)
        let second = Self.answer(sent[1].message)
        // The first answer whole, half of the second, then the close.
        script.receive(Self.answer(sent[0].message) + second[..<(second.count / 2)], at: 2)
        #expect(Self.succeeded(script.finished[tokens[0]]) != nil)
        script.lose("the server closed the connection")
        #expect(script.closes == 1 && script.finished.count == 1)
        #expect(script.state.waiting.map(\.failedAttempts) == [0, 0])
        script.turn(at: 3)
        #expect(script.connects.count == 2)
        let again = script.written()
        #expect(again.count == 2)
        script.receive(again.flatMap { Self.answer($0.message) }, at: 4)
        #expect(tokens.allSatisfy { Self.succeeded(script.finished[$0]) != nil })
    }

    /// F60-2: queries whose callers are gone (another connection or upstream answered them) are not
    /// sent again when their connection is replaced; the others are.
    @Test func queriesWhoseCallersAreGoneAreNotSentAgainOnANewConnection() throws {
        var script = Script()
        let tokens = try (0..<4).map { try script.ask("g\($0).pipe.test").token }
        script.turn(at: 0)
        #expect(script.written().count == 4)
        #expect(!script.state.requeued)
        script.lose("the connection went silent")
        #expect(script.state.requeued && script.state.waiting.count == 4)
        let gone: Set<UInt64> = [tokens[0], tokens[2]]
        script.state.dropWaiting { gone.contains($0) }
        #expect(!script.state.requeued)
        #expect(Set(script.state.waiting.map(\.token)) == [tokens[1], tokens[3]], "in any order (they come from the connection's table)")
        script.turn(at: 1)
        let again = script.written()
        #expect(again.count == 2, "only the two still waited for")
        script.receive(again.flatMap { Self.answer($0.message) }, at: 2)
        #expect(Self.succeeded(script.finished[tokens[1]]) != nil && Self.succeeded(script.finished[tokens[3]]) != nil)
        #expect(script.finished[tokens[0]] == nil && script.finished[tokens[2]] == nil, "their callers were resumed already")
    }

    /// A server that answers four queries a connection and closes: ten queries are answered on
    /// three connections, none fails.
    @Test func aServerThatCapsQueriesPerConnectionAnswersThemAll() throws {
        var script = Script()
        let tokens = try (0..<10).map { try script.ask("c\($0).pipe.test").token }
        var now = 0
        while script.finished.count < 10, now < 100 {
            script.turn(at: now)
            let sent = script.written()
            script.receive(sent.prefix(4).flatMap { Self.answer($0.message) }, at: now + 1)
            script.lose("the server closed the connection")
            now += 2
        }
        #expect(tokens.allSatisfy { Self.succeeded(script.finished[$0]) != nil })
        #expect(script.connects.count == 3)
    }

    /// A connection that closes without answering anything counts an attempt against each query on
    /// it; the third such connection fails them.
    @Test func connectionsThatAnswerNothingFailTheQueryAfterMaxAttempts() throws {
        var script = Script()
        let query = try script.ask("dead.pipe.test")
        for attempt in 1...PipelineState<ScriptedFraming>.maxAttempts {
            script.turn(at: attempt)
            #expect(script.written().count == 1)
            script.lose("the server closed the connection")
            #expect(script.finished[query.token] == nil || attempt == PipelineState<ScriptedFraming>.maxAttempts)
        }
        #expect(Self.code(script.finished[query.token]) == .connectFailed)
        #expect(script.connects.count == 3 && script.state.isIdle)
    }

    /// Red team W2: a server that hands every query back unprocessed (REFUSED_STREAM on each, or a
    /// GOAWAY before any answer) was asked again in a loop until the deadline. A query goes out at
    /// most ``PipelineState/maxAttempts`` times, then fails as refused, at once.
    @Test func aQueryHandedBackUnprocessedGoesOutAtMostMaxAttemptsTimes() throws {
        var script = Script()
        let query = try script.ask("refused.pipe.test")
        var sent = 0
        for step in 0..<10 {
            script.turn(at: step)
            let written = script.written()
            sent += written.count
            guard let id = written.first?.id else { break }
            script.receive([0xfc, 0xfc, UInt8(id >> 8), UInt8(id & 0xff)], at: step)
        }
        #expect(sent == PipelineState<ScriptedFraming>.maxAttempts)
        #expect(Self.code(script.finished[query.token]) == .connectFailed)
        #expect(script.connects.count == 1)
    }

    /// Red team W4 (of the fix above): a server that caps requests per connection answers some and
    /// hands the rest back (GOAWAY's last stream): those go out again first in line, as often as
    /// the connections make progress — they never fail for it.
    @Test func queriesHandedBackAfterAnswersGoOutAgainFirst() throws {
        var script = Script()
        let tokens = try (0..<3).map { try script.ask("c\($0).pipe.test").token }
        var answeredRounds = 0
        for step in 0..<(PipelineState<ScriptedFraming>.maxAttempts + 3) {
            script.turn(at: step)
            let sent = script.written()
            guard let first = sent.first else { break }
            // Answer the first, then hand back the others (as a GOAWAY after the cap does).
            script.receive(Self.answer(first.message), at: step)
            script.receive(sent.dropFirst().flatMap { [0xfc, 0xfc, UInt8($0.id >> 8), UInt8($0.id & 0xff)] }, at: step)
            #expect(script.state.waiting.allSatisfy { $0.failedAttempts == 0 }, "after an answer, a hand-back is no failure")
            answeredRounds += 1
            if step == 0 {
                let later = try script.ask("later.pipe.test", at: step)
                script.turn(at: step)
                let next = script.written()
                #expect(next.count == 3, "the two handed back and the new one")
                let labels = next.map { Array($0.message[12..<16]) }  // the first label's start
                #expect(labels == [[2, 0x63, 0x31, 4], [2, 0x63, 0x32, 4], [5, 0x6c, 0x61, 0x74]], "handed back first, in order")
                script.receive(next.flatMap { Self.answer($0.message) }, at: step)
                #expect(Self.succeeded(script.finished[later.token]) != nil)
                break
            }
        }
        #expect(tokens.allSatisfy { Self.succeeded(script.finished[$0]) != nil }, "\(script.finished)")
        #expect(answeredRounds == 1)
    }

    /// The waiting queue takes handed-back queries at its front, in order, with or without room in
    /// its taken front.
    @Test func theWaitingQueueTakesQueriesBackAtItsFront() {
        func job(_ token: UInt64) -> PipelineJob { PipelineJob(token: token, wire: [], deadline: .now) }
        var queue = JobQueue()
        queue.append(contentsOf: (1...5).map(job))
        _ = queue.popFirst()
        _ = queue.popFirst()
        queue.prepend(contentsOf: [job(10)])  // room in the taken front
        #expect(queue.map(\.token) == [10, 3, 4, 5])
        queue.prepend(contentsOf: [job(11), job(12), job(13)])  // more than the room
        #expect(queue.map(\.token) == [11, 12, 13, 10, 3, 4, 5])
        var empty = JobQueue()
        empty.prepend(contentsOf: [job(1), job(2)])
        #expect(empty.map(\.token) == [1, 2] && empty.count == 2)
    }

    /// Queries handed back unprocessed end nothing: a connection that only refuses is silent when a
    /// query's deadline passes, and is dropped.
    @Test func refusalsAreNotProgress() throws {
        var script = Script()
        let quiet = try script.ask("quiet.pipe.test", timeout: 1_000)
        let refused = try script.ask("refused.pipe.test", timeout: 5_000)
        script.turn(at: 0)
        let sent = script.written()
        #expect(sent.count == 2)
        script.receive([0xfc, 0xfc, UInt8(sent[1].id >> 8), UInt8(sent[1].id & 0xff)], at: 500)
        script.turn(at: 500)
        #expect(script.written().count == 1, "the refused query went out again")
        script.turn(at: 1_000)
        #expect(Self.code(script.finished[quiet.token]) == .timeout)
        #expect(script.closes == 1, "nothing ended a query since the first went out: silent")
        #expect(script.finished[refused.token] == nil, "the refused query is sent again on a new connection")
    }

    /// A query whose deadline passes with nothing read since it was sent marks the connection dead:
    /// it fails with a timeout, the connection closes, and the others go out on a new one.
    @Test func aSilentConnectionIsDroppedAndItsOtherQueriesGoAgain() throws {
        var script = Script()
        let soon = try script.ask("soon.pipe.test", timeout: 1_000)
        let later = try script.ask("later.pipe.test", timeout: 5_000)
        script.turn(at: 0)
        #expect(script.written().count == 2)
        #expect(script.state.wake(script.at(0)) == script.at(1_000))
        script.turn(at: 999)
        #expect(script.finished.isEmpty && script.closes == 0)
        script.turn(at: 1_000)
        #expect(Self.code(script.finished[soon.token]) == .timeout)
        #expect(script.closes == 1 && script.connects.count == 2)
        let again = script.written()
        #expect(again.count == 1)
        script.receive(Self.answer(again[0].message), at: 1_001)
        #expect(Self.succeeded(script.finished[later.token]) != nil)
    }

    /// The same expiry on a connection that answered after the query went out is one slow query, not
    /// a dead connection: it fails alone.
    @Test func aSlowQueryOnALiveConnectionFailsAlone() throws {
        var script = Script()
        let slow = try script.ask("slow.pipe.test", timeout: 1_000)
        let quick = try script.ask("quick.pipe.test", timeout: 5_000)
        script.turn(at: 0)
        let sent = script.written()
        script.receive(Self.answer(sent[1].message), at: 10)
        script.turn(at: 1_000)
        #expect(Self.code(script.finished[slow.token]) == .timeout)
        #expect(Self.succeeded(script.finished[quick.token]) != nil)
        #expect(script.closes == 0 && script.connects.count == 1)
    }

    /// F27 of redteam-4: the ID of a query given up on stays reserved on its connection until its
    /// late answer comes — a draw that lands on it moves on — and the late answer reaches nobody
    /// and frees the ID.
    @Test func aGivenUpIDIsNotReusedWhileItsLateAnswerCanCome() throws {
        var script = Script()
        let early = try script.ask("early.pipe.test", timeout: 5_000)
        let late = try script.ask("late.pipe.test", timeout: 1_000)
        // Every draw after the first two starts on 101, the ID the late query will leave behind.
        script.turn(at: 0, opens: ScriptedFraming(draws: [100, 101] + Array(repeating: 101, count: 8)))
        let sent = script.written()
        #expect(sent.map(\.id) == [100, 101])
        script.receive(Self.answer(sent[0].message), at: 5)
        script.turn(at: 1_000)
        #expect(Self.code(script.finished[late.token]) == .timeout && Self.succeeded(script.finished[early.token]) != nil)
        #expect(script.state.abandoned.contains(101) && script.closes == 0)
        var ids: [UInt16] = []
        for round in 0..<3 {
            let query = try script.ask("new\(round).pipe.test", at: 1_001 + round)
            script.turn(at: 1_001 + round)
            let out = script.written()
            ids += out.map(\.id)
            script.receive(out.flatMap { Self.answer($0.message) }, at: 1_001 + round)
            #expect(Self.succeeded(script.finished[query.token]) != nil)
        }
        #expect(ids == [102, 102, 102])
        // The late answer for ID 101 resumes nobody and frees the ID: the next draw takes it.
        let before = script.finished.count
        script.receive(Self.answer(sent[1].message), at: 1_100)
        #expect(script.finished.count == before)
        #expect(!script.state.abandoned.contains(101))
        _ = try script.ask("freed.pipe.test", at: 1_101)
        script.turn(at: 1_101)
        #expect(script.written().map(\.id) == [101])
    }

    /// A new connection starts with nothing reserved: a late answer cannot come on it.
    @Test func aNewConnectionStartsWithNothingReserved() throws {
        var script = Script()
        _ = try script.ask("early.pipe.test", timeout: 5_000)
        _ = try script.ask("late.pipe.test", timeout: 1_000)
        script.turn(at: 0)
        let sent = script.written()
        script.receive(Self.answer(sent[0].message), at: 5)
        script.turn(at: 1_000)
        #expect(script.state.abandoned.contains(101))
        script.lose("closed")
        #expect(!script.state.abandoned.contains(101))
        _ = try script.ask("next.pipe.test", at: 1_001)
        script.turn(at: 1_001, opens: ScriptedFraming(firstID: 101))
        #expect(script.written().map(\.id) == [101])
    }

    /// Red team P1: a server that streams answers to no query is cut off once they outnumber its
    /// real answers by ``PipelineState/unsolicitedAllowance``; its queries fail at once instead of
    /// waiting out a connection that is read forever. A few (an answer sent twice) are forgiven.
    @Test func aStreamOfAnswersToNoQueryBreaksTheConnection() throws {
        var script = Script()
        let query = try script.ask("flood.pipe.test")
        script.turn(at: 0)
        let sent = script.written()
        let stray = { (id: UInt16) -> [UInt8] in
            var message = sent[0].message
            message[0] = UInt8(id >> 8)
            message[1] = UInt8(id & 0xff)
            return Self.answer(message)
        }
        let allowance = PipelineState<ScriptedFraming>.unsolicitedAllowance
        script.receive((0..<allowance).flatMap { stray(5_000 + UInt16($0)) }, at: 1)
        #expect(script.closes == 0 && script.finished.isEmpty, "up to the allowance: dropped one by one")
        script.receive(stray(6_000), at: 2)
        #expect(script.closes == 1)
        #expect(Self.code(script.finished[query.token]) == .malformedResponse)
    }

    /// Bytes that answer nothing (PINGs, SETTINGS, padding) are allowed up to 128 KiB for each
    /// query in flight and one more since the last answer; past that the connection is broken and
    /// its queries fail at once instead of waiting their deadlines out on a server that talks on.
    @Test func bytesThatAnswerNothingAreBoundedPerQueryInFlight() throws {
        var script = Script()
        let first = try script.ask("one.pipe.test")
        let second = try script.ask("two.pipe.test")
        script.turn(at: 0)
        let sent = script.written()
        let allowance = PipelineState<ScriptedFraming>.bytesPerAnswerAllowance
        let noise = { (count: Int) in [UInt8](repeating: 0xfe, count: count) }
        script.receive(noise(3 * allowance), at: 1)
        #expect(script.closes == 0, "two in flight: three allowances, to the byte")
        script.receive(Self.answer(sent[0].message), at: 2)
        #expect(Self.succeeded(script.finished[first.token]) != nil)
        script.receive(noise(2 * allowance), at: 3)
        #expect(script.closes == 0, "an answer starts the count again; one in flight now: two allowances")
        script.receive(noise(2), at: 4)
        #expect(script.closes == 1)
        #expect(Self.code(script.finished[second.token]) == .malformedResponse)
    }

    /// Red team N3: the end of a query given up on counts as an answer for the allowance, so a
    /// server whose late answers arrive after a stall is not cut off for them.
    @Test func aLateAnswerStartsTheByteCountAgain() throws {
        var script = Script()
        let query = try script.ask("late.pipe.test")
        script.turn(at: 0)
        _ = script.written()
        let allowance = PipelineState<ScriptedFraming>.bytesPerAnswerAllowance
        let noise = { (count: Int) in [UInt8](repeating: 0xfe, count: count) }
        script.receive(noise(2 * allowance - 2) + [0xfd, 0xfd], at: 1)
        script.receive(noise(2 * allowance), at: 2)
        #expect(script.closes == 0 && script.finished[query.token] == nil, "the late end started the count again")
        script.receive(noise(2), at: 3)
        #expect(script.closes == 1)
    }

    /// Red team N4: bytes that end no query (a PING a second) do not make a connection live: a
    /// query that times out on it marks it silent, and the other query goes out on a new one.
    @Test func aTrickleThatAnswersNothingIsSilence() throws {
        var script = Script()
        let first = try script.ask("trickle.pipe.test", timeout: 1_000)
        let second = try script.ask("other.pipe.test", timeout: 5_000)
        script.turn(at: 0)
        #expect(script.written().count == 2)
        for at in stride(from: 100, through: 900, by: 100) { script.receive([0xfe, 0xfe], at: at) }
        script.turn(at: 1_000)
        #expect(Self.code(script.finished[first.token]) == .timeout)
        #expect(script.closes == 1 && script.connects.count == 2, "dropped as silent, and a new connection asked for")
        let again = script.written()
        #expect(again.count == 1)
        script.receive(Self.answer(again[0].message), at: 1_100)
        #expect(Self.succeeded(script.finished[second.token]) != nil)
    }

    /// The queue of waiting queries against a plain array: taken from the front, appended at the
    /// back, filtered and emptied in any mix, always in order.
    @Test func theWaitingQueueKeepsItsOrderThroughEveryOperation() {
        var queue = JobQueue()
        var model: [UInt64] = []
        var generator = SplitMix64(state: 49)
        var token: UInt64 = 0
        let deadline = ContinuousClock.now
        for _ in 0..<20_000 {
            switch generator.next() % 16 {
            case 0..<7:
                token += 1
                queue.append(PipelineJob(token: token, wire: [], deadline: deadline + .milliseconds(Int(token % 97))))
                model.append(token)
            case 7..<14:
                #expect(queue.popFirst()?.token == model.first)
                if !model.isEmpty { model.removeFirst() }
            case 14:
                queue.removeAll { $0.token % 5 == 0 }
                model.removeAll { $0 % 5 == 0 }
            default:
                if generator.next() % 8 == 0 {
                    #expect(queue.takeAll().map(\.token) == model)
                    model = []
                }
            }
            #expect(queue.count == model.count)
        }
        #expect(queue.map(\.token) == model)
        let first = model.map { deadline + .milliseconds(Int($0 % 97)) }.min()
        #expect(queue.earliestDeadline == first)
    }

    /// An answer sent twice is dropped, and the connection goes on.
    @Test func anAnswerSentTwiceIsDroppedAndTheConnectionGoesOn() throws {
        var script = Script()
        let first = try script.ask("twice.pipe.test")
        script.turn(at: 0)
        let sent = script.written()
        script.receive(Self.answer(sent[0].message) + Self.answer(sent[0].message), at: 1)
        #expect(Self.succeeded(script.finished[first.token]) != nil && script.closes == 0)
        let second = try script.ask("after.pipe.test", at: 2)
        script.turn(at: 2)
        script.receive(script.written().flatMap { Self.answer($0.message) }, at: 3)
        #expect(Self.succeeded(script.finished[second.token]) != nil && script.closes == 0)
    }

    /// GOAWAY's equivalent: a draining connection takes no new query, closes once its last answer
    /// comes, and a new connection carries what waited.
    @Test func aDrainingConnectionFinishesItsQueriesThenCloses() throws {
        var script = Script()
        let first = try (0..<2).map { try script.ask("d\($0).pipe.test").token }
        script.turn(at: 0)
        let sent = script.written()
        script.receive([0xff, 0xff] + Self.answer(sent[0].message), at: 1)
        let waiting = try script.ask("after.pipe.test", at: 2)
        script.turn(at: 2)
        #expect(script.written().isEmpty && script.closes == 0)
        script.receive(Self.answer(sent[1].message), at: 3)
        script.turn(at: 4)
        #expect(first.allSatisfy { Self.succeeded(script.finished[$0]) != nil })
        #expect(script.closes == 1 && script.connects.count == 2)
        let again = script.written()
        #expect(again.count == 1)
        script.receive(Self.answer(again[0].message), at: 5)
        #expect(Self.succeeded(script.finished[waiting.token]) != nil)
    }

    /// A framing's capacity holds the rest back until answers make room.
    @Test func queriesPastTheCapacityWaitTheirTurn() throws {
        var script = Script()
        let tokens = try (0..<5).map { try script.ask("w\($0).pipe.test").token }
        script.turn(at: 0, opens: ScriptedFraming(limit: 2))
        var sent = script.written()
        #expect(sent.count == 2 && script.state.waiting.count == 3)
        var now = 1
        while !sent.isEmpty {
            script.receive(sent.flatMap { Self.answer($0.message) }, at: now)
            script.turn(at: now)
            sent = script.written()
            #expect(sent.count <= 2)
            now += 1
        }
        #expect(tokens.allSatisfy { Self.succeeded(script.finished[$0]) != nil })
    }

    /// An unused connection closes after ``PipelineState/idleTimeout``, not before; the state is
    /// then idle (the thread ends).
    @Test func anUnusedConnectionClosesAfterItsIdleTime() throws {
        var script = Script()
        try script.ask("idle.pipe.test")
        script.turn(at: 0)
        script.receive(script.written().flatMap { Self.answer($0.message) }, at: 1)
        #expect(script.state.wake(script.at(1)) == script.at(10_000))
        script.turn(at: 9_999)
        #expect(script.closes == 0 && !script.state.isIdle)
        script.turn(at: 10_000)
        #expect(script.closes == 1 && script.state.isIdle)
    }

    /// RFC 5452 §9.1: an answer under a query's ID that is not to its question is refused for that
    /// query (the name compared without case); an error answer without a question passes.
    @Test func anAnswerToAnotherQuestionIsRefused() throws {
        var script = Script()
        let asked = try script.ask("right.pipe.test")
        let mixedCase = try script.ask("case.pipe.test")
        let formerr = try script.ask("formerr.pipe.test")
        let bare = try script.ask("bare.pipe.test")
        let otherType = try script.ask("type.pipe.test")
        script.turn(at: 0)
        let sent = script.written()
        var wrongName = DNSMessage.query(name: try DomainName("wrong.pipe.test"), type: .a, id: sent[0].id)
        wrongName[2] |= 0x80
        var upper = sent[1].message
        upper[2] |= 0x80
        let caseName = try DomainName("case.pipe.test").wire.count
        for index in 12..<12 + caseName where (0x61...0x7a).contains(upper[index]) { upper[index] -= 0x20 }
        #expect(upper != sent[1].message)
        let noQuestion: (UInt16, UInt8) -> [UInt8] = { id, rcode in [UInt8(id >> 8), UInt8(id & 0xff), 0x80, rcode, 0, 0, 0, 0, 0, 0, 0, 0] }
        var aaaa = sent[4].message
        aaaa[2] |= 0x80
        aaaa[12 + (try DomainName("type.pipe.test").wire.count) + 1] = 28
        let frames = [wrongName, upper, noQuestion(sent[2].id, 1), noQuestion(sent[3].id, 0), aaaa]
        script.receive(frames.flatMap { [UInt8($0.count >> 8), UInt8($0.count & 0xff)] + $0 }, at: 1)
        #expect(Self.code(script.finished[asked.token]) == .mismatchedResponse)
        #expect(Self.succeeded(script.finished[mixedCase.token]) != nil)
        #expect(Self.succeeded(script.finished[formerr.token]) != nil)
        #expect(Self.code(script.finished[bare.token]) == .mismatchedResponse)
        #expect(Self.code(script.finished[otherType.token]) == .mismatchedResponse)
        // Type 65 is not type 97: the type's bytes are compared as they are, not folded like letters.
        var https = DNSMessage.query(name: try DomainName("t.pipe.test"), type: .https, id: 1)
        https[2] |= 0x80
        var other = https
        other[12 + (try DomainName("t.pipe.test").wire.count) + 1] = 0x61
        #expect(!WireQuestion.echoes(other, questionOf: https))
        #expect(WireQuestion.echoes(https, questionOf: https))
        // Not a response, or cut inside the question: left to the decoder, which names the defect.
        other[2] &= 0x7f
        #expect(WireQuestion.echoes(other, questionOf: https))
        #expect(WireQuestion.echoes(Array(https[..<20]), questionOf: https))
    }

    /// A write the connection could not take comes back with the same range, however much output
    /// was added since (TLS requires the retry to repeat it).
    @Test func aWriteThatTookNothingIsRepeatedWithItsLength() throws {
        var script = Script()
        try script.ask("one.pipe.test")
        script.turn(at: 0)
        let first = try #require(script.state.nextWrite)
        script.state.wrote(0)
        try script.ask("two.pipe.test", at: 1)
        script.turn(at: 1)
        #expect(script.state.nextWrite == first)
        script.state.wrote(first.count)
        let rest = try #require(script.state.nextWrite)
        #expect(rest.lowerBound == first.upperBound)
        script.state.wrote(rest.count)
        #expect(script.state.nextWrite == nil && !script.state.wantsWrite)
    }

    /// A connection that cannot be opened fails what waits, and a refusal of the protocol is said.
    @Test func aFailedConnectionFailsWhatWaits() throws {
        var script = Script()
        let query = try script.ask("nohttp2.pipe.test")
        script.turn(at: 0, opens: nil)
        #expect(script.connects.count == 1)
        script.state.connectFailed(DNSError(.malformedResponse, "ALPN picked http/1.1"), refused: true, &script.actions)
        script.settle()
        #expect(Self.code(script.finished[query.token]) == .malformedResponse)
        #expect(script.refusals == 1 && script.state.isIdle)
    }
}
