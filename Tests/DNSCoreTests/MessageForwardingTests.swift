import DNSCore
import Synchronization
import TestSupport
import Testing

/// Forwarded messages (the types the engine does not answer, HTTPS/SVCB lookups, DNSSEC chain
/// fetches) go through the pool's one attempt loop: circuits, hedging, RTT, reachability, metrics
/// and the injected clock are the address lookups' own (issue 48 §2). Recording fakes, a manual clock.
@Suite struct MessageForwardingTests {
    let clock = ManualClock()
    let tasks = DrainableTasks()

    func engine(_ upstreams: [any DNSUpstream], configure: (inout ResolverOptions) -> Void = { _ in }) -> ResolverEngine {
        var options = ResolverOptions(timeout: .seconds(2))
        configure(&options)
        return ResolverEngine(upstreams: upstreams, options: options, clock: clock, spawner: tasks)
    }

    func query(_ name: String, _ type: RecordType = .mx) throws -> (wire: [UInt8], question: DNSMessage.Question) {
        let question = DNSMessage.Question(name: try DomainName(name), type: type)
        return (DNSMessage(id: 0, flags: 0x0100, questions: [question]).encode(), question)
    }

    @Test func aForwardedFailureOpensTheCircuitAndLookupsGoElsewhereAtOnce() async throws {
        let broken = ScriptedExchanger("https://broken.test/q", .fail(.connectFailed))
        let healthy = ScriptedExchanger("https://healthy.test/q", .respond())
        let engine = engine([broken, healthy]) { $0.hedging = false }
        let (wire, question) = try query("mail.hd.test")
        for _ in 0..<3 {
            let response = try DNSMessage(decoding: try await engine.forward(wire, question: question))
            #expect(response.answers.first?.type == .txt && response.id == 0)
        }
        #expect(broken.exchanges == 3 && healthy.exchanges == 3)
        #expect(engine.pool.isOpen(0), "three forwarded failures open the circuit, as three lookups' would")
        #expect(engine.pool.healthSnapshot[0].lastTransportFailure != nil)
        #expect(engine.pool.healthSnapshot[1].lastResponse != nil && engine.pool.healthSnapshot[1].answeredRTT != nil)
        // Open: the next forward, and the next address lookup, go to the healthy upstream first.
        _ = try await engine.forward(wire, question: question)
        #expect(broken.exchanges == 3 && healthy.exchanges == 4)
        // Past the backoff, a probe (an address lookup of the health-check name) tries it, off the path.
        broken.reply(.respond())
        clock.advance(by: .seconds(1))
        _ = try await engine.forward(wire, question: question)
        #expect(broken.exchanges == 3, "a user's forward is no trial")
        await tasks.drain()
        #expect(broken.events.last?.forwarded == false && broken.events.last?.type == .ns)
        #expect(!engine.pool.isOpen(0))
        _ = try await engine.forward(wire, question: question)
        #expect(broken.exchanges == 4, "closed by the probe's answer: first in order again")
    }

    @Test func aStalledUpstreamIsHedgedForForwardedMessagesToo() async throws {
        let stalled = ScriptedExchanger("https://stalled.test/q", clock: clock, .slow(.seconds(10)))
        let healthy = ScriptedExchanger("https://healthy.test/q", .respond())
        let engine = engine([stalled, healthy])
        let (wire, question) = try query("_dns.hd.test", .https)
        let started = clock.now
        let forwarded = Task { try await engine.forward(wire, question: question) }
        await clock.waitForSleepers(2)  // the stalled exchange, and the hedge timer
        #expect(healthy.exchanges == 0, "not asked before the hedge delay")
        clock.advance(by: .milliseconds(200))
        let response = try DNSMessage(decoding: try await forwarded.value)
        #expect(response.questions == [question])
        #expect(clock.now - started == .milliseconds(200), "the hedge delay, not the stalled upstream's share of 2 s")
        #expect(engine.pool.healthSnapshot[0].consecutiveFailures == 1, "outrun: charged as any lookup is")
    }

    @Test func whatTheClientsMessageCanCauseMovesOnButIsNotChargedToTheUpstream() async throws {
        // F48-9: a relayed message is the client's; a refusal it can cause says nothing of health.
        let mismatched = ScriptedExchanger("https://mismatched.test/q", .mismatched)
        let garbage = ScriptedExchanger("https://garbage.test/q", .garbage)
        let failing = ScriptedExchanger("https://servfail.test/q", .respond(rcode: 2))
        let engine = engine([mismatched, garbage, failing]) { $0.hedging = false }
        let (wire, question) = try query("mail.hd.test")
        let response = try DNSMessage(decoding: try await engine.forward(wire, question: question))
        #expect(response.responseCode == .serverFailure, "an RCODE is an answer, returned as it came")
        #expect(mismatched.exchanges == 1 && garbage.exchanges == 1, "each moved on to the next")
        let health = engine.pool.healthSnapshot
        #expect(health.map(\.consecutiveFailures) == [0, 0, 0])
        // R1: what the message caused is no response for readiness either; the RCODE is one.
        #expect(health.map { $0.lastResponse != nil } == [false, false, true] && health.allSatisfy { $0.lastTransportFailure == nil })
        let only = self.engine([mismatched]) { $0.hedging = false }
        await #expect { try await only.forward(wire, question: question) } throws: {
            let error = $0 as? DNSError
            return error?.code == .mismatchedResponse && error?.attempts.first?.upstream == "https://mismatched.test/q"
        }
        // A URL too long for the upstream's HTTP server (414), five times: the circuit stays closed
        // and readiness true; a transport failure is still charged (the first test).
        let refusing = ScriptedExchanger("https://refusing.test/q", .status(414))
        let pool = self.engine([refusing]) { $0.hedging = false }
        for _ in 0..<5 { _ = try? await pool.forward(wire, question: question) }
        #expect(refusing.exchanges == 5 && !pool.pool.isOpen(0))
        #expect(pool.pool.healthSnapshot[0].lastResponse == nil && pool.pool.healthSnapshot[0].lastTransportFailure == nil)
        // R1: a 503 (or 429, or a portal's page) is the server unwell, whatever was asked: charged,
        // and never a response that would make readiness true.
        for reply in [ScriptedExchanger.Reply.status(503), .status(429), .fail(.badContentType)] {
            let unwell = ScriptedExchanger("https://unwell.test/q", reply)
            let engine = self.engine([unwell]) { $0.hedging = false }
            for _ in 0..<3 { _ = try? await engine.forward(wire, question: question) }
            #expect(engine.pool.isOpen(0), "\(reply)")
            #expect(
                !engine.pool.healthSnapshot[0].isReachable(now: clock.now, window: .seconds(30)) && engine.pool.healthSnapshot[0].lastResponse == nil)
        }
        // R3: plain DNS reports a relayed message's RCODE as an error; REFUSED, SERVFAIL (an AXFR
        // it will not serve) are the server's word on the message: not charged.
        for code in [DNSError.Code.refused, .serverFailure] {
            let plain = ScriptedExchanger("dns://127.0.0.1:5399", .fail(code))
            let engine = self.engine([plain]) { $0.hedging = false }
            for _ in 0..<5 { _ = try? await engine.forward(wire, question: question) }
            #expect(plain.exchanges == 5 && !engine.pool.isOpen(0), "\(code)")
        }
        // An address lookup's HTTP failure is the upstream's own: charged as before.
        let lookups = self.engine([refusing]) { $0.hedging = false }
        for index in 0..<3 { _ = try? await lookups.resolve("www\(index).hd.test", type: .a) }
        #expect(lookups.pool.isOpen(0))
    }

    @Test func upstreamsThatCarryOnlyAddressesAreSkippedNotCharged() async throws {
        let json = ScriptedUpstream("https://json.test/resolve", .addresses(["198.18.0.1"]))
        let doh = ScriptedExchanger("https://doh.test/q", .respond())
        let engine = engine([json, doh])
        #expect(engine.canForward)
        let (wire, question) = try query("mail.hd.test")
        _ = try await engine.forward(wire, question: question)
        #expect(json.queries == 0 && doh.exchanges == 1)
        #expect(engine.pool.healthSnapshot[0].consecutiveFailures == 0)
        let addressesOnly = self.engine([json])
        #expect(!addressesOnly.canForward)
        await #expect { try await addressesOnly.forward(wire, question: question) } throws: {
            ($0 as? DNSError)?.code == .invalidConfiguration
        }
    }

    @Test func identicalForwardsInFlightShareOneExchange() async throws {
        let slow = ScriptedExchanger("https://slow.test/q", clock: clock, .slow(.milliseconds(50)))
        let engine = engine([slow])
        let (wire, question) = try query("mail.hd.test")
        let (other, otherQuestion) = try query("mail.hd.test", .txt)
        let first = Task { try await engine.forward(wire, question: question) }
        await clock.waitForSleepers(1)
        let second = Task { try await engine.forward(wire, question: question) }
        let third = Task { try await engine.forward(other, question: otherQuestion) }
        while engine.forwarding.followers(wire) < 1 { await Task.yield() }
        await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(50))
        let answers = try await [first.value, second.value, third.value]
        #expect(answers[0] == answers[1] && answers[0] != answers[2])
        #expect(slow.exchanges == 2, "one exchange per distinct query")
    }

    @Test func theBudgetIsTheEnginesTimeoutOnItsClockShared() async throws {
        let silent = ScriptedExchanger("https://silent.test/q", clock: clock, .slow(.seconds(60)))
        let other = ScriptedExchanger("https://other.test/q", clock: clock, .slow(.seconds(60)))
        let engine = engine([silent, other]) { $0.hedging = false }
        let (wire, question) = try query("mail.hd.test")
        let forwarded = Task { try await engine.forward(wire, question: question) }
        await clock.waitForSleepers(1)
        #expect(silent.events.first?.timeout == .seconds(1), "half of the 2 s budget: the other one gets the rest")
        clock.advance(by: .seconds(1))
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        await #expect { try await forwarded.value } throws: { error in
            let error = error as? DNSError
            return error?.code == .timeout && error?.attempts.count == 2
        }
    }
}
