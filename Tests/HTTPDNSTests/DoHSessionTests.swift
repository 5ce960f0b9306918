import DNSCore
import Foundation
import HTTP2Wire
import TestSupport
import Testing

@testable import HTTPDNS

/// HPACK (RFC 7541) as the DoH client reads it: the RFC's own examples, blocks written by a real
/// peer encoder (Python's `hpack`, as `h2` and nghttp2-based servers index and Huffman-code), and
/// blocks that must be refused.
@Suite struct HPACKDecoderTests {
    static func bytes(_ hex: String) -> [UInt8] { Hex.bytes(hex) }

    static func fields(_ pairs: [(String, String)]) -> [HPACKDecoder.Field] {
        pairs.map { HPACKDecoder.Field(name: $0.0, value: $0.1) }
    }

    /// RFC 7541 C.4.1: a request with a Huffman-coded literal.
    @Test func rfcRequestExampleWithHuffman() throws {
        var decoder = HPACKDecoder()
        let decoded = try decoder.decode(Self.bytes("828684418cf1e3c2e5f23a6ba0ab90f4ff")[...])
        #expect(decoded == Self.fields([(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "www.example.com")]))
    }

    /// RFC 7541 C.6 (Huffman, a 256-byte table) as Python's `hpack` writes it: the second and third
    /// responses lean on the dynamic table, and the third evicts from it.
    @Test func responsesThatIndexAndEvict() throws {
        var decoder = HPACKDecoder()
        let location = ("location", "https://www.example.com")
        let first = try decoder.decode(
            Self.bytes(
                "3fe101488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3")[...])
        #expect(first == Self.fields([(":status", "302"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), location]))
        let second = try decoder.decode(Self.bytes("4883640effc1c0bf")[...])
        #expect(second == Self.fields([(":status", "307"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:21 GMT"), location]))
        let third = try decoder.decode(
            Self.bytes(
                "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007"
            )[...])
        #expect(
            third
                == Self.fields([
                    (":status", "200"), ("cache-control", "private"), ("date", "Mon, 21 Oct 2013 20:13:22 GMT"), location,
                    ("content-encoding", "gzip"), ("set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"),
                ]))
        #expect(decoder.maxSize == 256)
    }

    @Test func malformedBlocksAreRefused() {
        let cases: [(String, String)] = [
            ("80", "index 0"),
            ("be", "an index past both tables"),
            ("3fe21f", "a size update above the limit (4,096)"),
            ("88" + "20", "a size update after a field"),
            ("0f", "a block ending inside an integer"),
            ("0085", "a string past the block's end"),
            ("0081ff", "Huffman padding of more than 7 bits"),
            ("008100", "Huffman padding that is not all ones"),
            ("0084ffffffff", "EOS inside a Huffman string"),
            ("0fffffffffff7f", "an integer above 2^24"),
            ("00ff" + String(repeating: "80", count: 9) + "01", "a string length shifted past the sign bit"),
            ("3fe1" + String(repeating: "80", count: 70) + "00", "a size update with 70 continuation bytes"),
        ]
        for (hex, what) in cases {
            var decoder = HPACKDecoder()
            #expect(throws: HPACKDecoder.Failure.self, "\(what)") { try decoder.decode(Self.bytes(hex)[...]) }
        }
    }

    /// Every byte string decodes or is refused; none traps (a small in-process fuzz; Fuzz/ runs the
    /// coverage-guided one).
    @Test func randomBlocksNeverTrap() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let count = Int.random(in: 0...40, using: &generator)
            let block = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
            var decoder = HPACKDecoder()
            _ = try? decoder.decode(block[...])
        }
    }
}

/// The DoH client's HTTP/2 side (``DoHSession``) fed server frames as bytes: what it writes, what
/// it delivers, and how it refuses a server that breaks the protocol.
@Suite struct DoHSessionTests {
    static let query: [UInt8] = DNSMessage.query(name: try! DomainName("www.hd.test"), type: .a, id: 0)

    static func session(_ method: DoHSession.Target.Method = .get, maxResponseBytes: Int = 65_535) throws -> DoHSession {
        let endpoint = try UpstreamEndpoint.doh("https://doh.test:8443/dns-query", bootstrap: ["127.0.0.1"])
        return DoHSession(target: .init(endpoint: endpoint, method: method), maxResponseBytes: maxResponseBytes)
    }

    static func frame(_ type: UInt8, flags: UInt8 = 0, stream: UInt32 = 0, _ payload: [UInt8] = []) -> [UInt8] {
        var bytes: [UInt8] = []
        HTTP2FrameHeader(length: payload.count, rawType: type, flags: HTTP2FrameFlags(rawValue: flags), stream: stream).append(to: &bytes)
        return bytes + payload
    }

    static let settings = frame(0x4)
    /// `:status 200`, `content-type: application/dns-message`, indexed the way nghttp2 does.
    static let okHeaders = HPACKDecoderTests.bytes("885f901d75d0620d263d4c495216a4a840e62f")
    static let answer: [UInt8] = {
        var message = query
        message[2] |= 0x80
        return message
    }()

    struct Run {
        var session: DoHSession
        var output: [UInt8] = []
        var events: [PipelineEvent] = []

        mutating func feed(_ bytes: [UInt8]) {
            var input = bytes
            session.receive(&input, into: &output, events: &events)
        }
    }

    static func started(_ method: DoHSession.Target.Method = .get, maxResponseBytes: Int = 65_535) throws -> (Run, UInt32) {
        var run = Run(session: try session(method, maxResponseBytes: maxResponseBytes))
        run.session.start(into: &run.output)
        run.feed(settings)
        run.output = []
        let id = run.session.send(query, into: &run.output) { _ in false }
        return (run, id)
    }

    /// The frames in `bytes`: type, flags, stream, payload.
    static func frames(_ bytes: [UInt8]) -> [(UInt8, UInt8, UInt32, [UInt8])] {
        var result: [(UInt8, UInt8, UInt32, [UInt8])] = []
        var offset = 0
        while bytes.count - offset >= 9 {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            guard bytes.count - offset - 9 >= length else { break }
            let stream = DoHSession.read32(bytes[...], at: offset + 5)
            result.append((bytes[offset + 3], bytes[offset + 4], stream, Array(bytes[offset + 9..<offset + 9 + length])))
            offset += 9 + length
        }
        return result
    }

    @Test func aGETIsOneHeadersFrameWithTheQueryInThePath() throws {
        var run = Run(session: try Self.session())
        run.session.start(into: &run.output)
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        #expect(Array(run.output.prefix(preface.count)) == preface)
        run.output.removeFirst(preface.count)
        let opening = Self.frames(run.output)
        #expect(opening.map(\.0) == [0x4, 0x8])  // SETTINGS, the connection's WINDOW_UPDATE
        run.output = []
        let id = run.session.send(Self.query, into: &run.output) { _ in false }
        #expect(id == 1)
        let sent = Self.frames(run.output)
        #expect(sent.count == 1)
        #expect(sent[0].0 == 0x1 && sent[0].1 == 0x5 && sent[0].2 == 1)  // HEADERS, END_STREAM | END_HEADERS
        var decoder = HPACKDecoder()
        let fields = try decoder.decode(sent[0].3[...])
        #expect(fields.first { $0.name == ":path" }?.value == "/dns-query?dns=" + DoHWire.encodeBase64URL(Self.query))
        #expect(fields.first { $0.name == ":authority" }?.value == "doh.test:8443")
        #expect(fields.map(\.name) == [":method", ":scheme", ":path", ":authority", "accept"])
        #expect(run.session.send(Self.query, into: &run.output) { _ in false } == 3)
    }

    @Test func aPOSTSendsItsBodyWithinTheWindow() throws {
        let (run, id) = try Self.started(.post)
        let sent = Self.frames(run.output).filter { $0.2 == id }
        #expect(sent.map(\.0) == [0x1, 0x0])
        #expect(sent[1].1 == 0x1 && sent[1].3 == Self.query)
        var decoder = HPACKDecoder()
        let fields = try decoder.decode(sent[0].3[...])
        #expect(fields.map(\.name) == [":method", ":scheme", ":path", ":authority", "content-type", "content-length", "accept"])
        // A server that opens no window: the body waits for WINDOW_UPDATE.
        var held = Run(session: try Self.session(.post))
        held.session.start(into: &held.output)
        held.feed(Self.frame(0x4, [0, 4, 0, 0, 0, 0]))  // INITIAL_WINDOW_SIZE 0
        held.output = []
        let stream = held.session.send(Self.query, into: &held.output) { _ in false }
        #expect(Self.frames(held.output).map(\.0) == [0x1])
        held.output = []
        var increment: [UInt8] = []
        increment.appendHTTP2UInt32(UInt32(Self.query.count))
        held.feed(Self.frame(0x8, stream: stream, increment))
        #expect(Self.frames(held.output).map(\.0) == [0x0])
    }

    /// Red team N3: a stream this client gave up on still ends on the wire (its answer was under
    /// way, or the server resets it): the end is told once, as `.late`, so that the pipeline counts
    /// it as an answer for the bytes a connection may send without one.
    @Test func theEndOfAStreamGivenUpOnIsToldOnce() throws {
        var (run, id) = try Self.started()
        run.session.abandon(id, into: &run.output)
        run.feed(Self.frame(0x1, flags: 0x4, stream: id, Self.okHeaders) + Self.frame(0x0, flags: 0x1, stream: id, Self.answer))
        #expect(run.events == [.late(id)])
        run.feed(Self.frame(0x3, stream: id, [0, 0, 0, 8]))
        #expect(run.events == [.late(id)], "told once")
        // Ended by the server's reset instead.
        var (reset, other) = try Self.started()
        reset.session.abandon(other, into: &reset.output)
        reset.feed(Self.frame(0x3, stream: other, [0, 0, 0, 8]))
        #expect(reset.events == [.late(other)])
    }

    /// Red team N1: a SETTINGS frame repeating INITIAL_WINDOW_SIZE moves every stream's window once,
    /// to the last value, whatever the number of entries.
    @Test func repeatedInitialWindowEntriesMoveEachWindowOnce() throws {
        var run = Run(session: try Self.session(.post))
        run.session.start(into: &run.output)
        run.feed(Self.frame(0x4, [0, 4, 0, 0, 0, 0]))  // INITIAL_WINDOW_SIZE 0: bodies wait
        let streams = (0..<3).map { _ in run.session.send(Self.query, into: &run.output) { _ in false } }
        #expect(streams.allSatisfy { run.session.streams[$0]?.sendWindow == 0 })
        var entries: [UInt8] = []
        for index in 0..<2_730 {
            entries.appendHTTP2UInt16(4)
            entries.appendHTTP2UInt32(index % 2 == 0 ? 1_000_000 : 7)  // ends on 7
        }
        run.output = []
        run.feed(Self.frame(0x4, entries))
        #expect(run.session.peerInitialWindow == 7)
        // Each stream sent 7 bytes of its body at once, and has 0 left.
        let data = Self.frames(run.output).filter { $0.0 == 0x0 }
        #expect(data.map(\.3.count) == [7, 7, 7])
        #expect(streams.allSatisfy { run.session.streams[$0]?.sendWindow == 0 })
        #expect(run.events.isEmpty)
    }

    @Test func aWholeResponseIsDelivered() throws {
        var (run, id) = try Self.started()
        run.feed(Self.frame(0x1, flags: 0x4, stream: id, Self.okHeaders) + Self.frame(0x0, flags: 0x1, stream: id, Self.answer))
        #expect(run.events == [.answer(id, Self.answer)])
        // Split anywhere, the same.
        var (split, other) = try Self.started()
        let bytes = Self.frame(0x1, flags: 0x4, stream: other, Self.okHeaders) + Self.frame(0x0, flags: 0x1, stream: other, Self.answer)
        for byte in bytes { split.feed([byte]) }
        #expect(split.events.isEmpty)
        var input = bytes
        split.session.receive(&input, into: &split.output, events: &split.events)
        #expect(split.events == [.answer(other, Self.answer)])
    }

    @Test func headersInContinuationsAndPaddedData() throws {
        var (run, id) = try Self.started()
        let headers = Self.okHeaders
        let padded: [UInt8] = [3] + Self.answer + [0, 0, 0]
        run.feed(
            Self.frame(0x1, stream: id, Array(headers.prefix(3))) + Self.frame(0x9, flags: 0x4, stream: id, Array(headers.dropFirst(3)))
                + Self.frame(0x0, flags: 0x9, stream: id, padded))
        #expect(run.events == [.answer(id, Self.answer)])
    }

    /// Red team W3: a header block may take 64 frames (as the daemon's server allows), not 65; a body
    /// in one-byte DATA frames, empty ones between, arrives whole (it grows in place).
    @Test func headerBlocksAreBoundedInFramesAndBodiesGrowInPlace() throws {
        let headers = Self.okHeaders
        func block(frames: Int, stream: UInt32) -> [UInt8] {
            var bytes = Self.frame(0x1, stream: stream, Array(headers.prefix(1)))
            for index in 1..<frames - 1 { bytes += Self.frame(0x9, stream: stream, index < headers.count ? [headers[index]] : []) }
            let rest = headers.count > frames - 1 ? Array(headers[(frames - 1)...]) : []
            return bytes + Self.frame(0x9, flags: 0x4, stream: stream, rest)
        }
        var (run, id) = try Self.started()
        var body: [UInt8] = []
        for byte in Self.answer { body += Self.frame(0x0, stream: id, [byte]) + Self.frame(0x0, stream: id) }
        run.feed(block(frames: DoHSession.maxHeaderFrames, stream: id) + body + Self.frame(0x0, flags: 0x1, stream: id))
        #expect(run.events == [.answer(id, Self.answer)])

        var (over, other) = try Self.started()
        over.feed(block(frames: DoHSession.maxHeaderFrames + 1, stream: other))
        guard case .broken(let error) = over.events.last else {
            Issue.record("a block in 65 frames: expected the connection to break, got \(over.events)")
            return
        }
        #expect(error.message.contains("more than 64 frames"))
    }

    @Test func httpFailuresAreTheQuerysOwn() throws {
        // 404
        var (notFound, first) = try Self.started()
        notFound.feed(Self.frame(0x1, flags: 0x5, stream: first, [0x8d]))
        var status = DNSError(.httpStatus, "HTTP status 404")
        status.httpStatus = 404  // what the pool reads to tell the message's fault from the server's
        #expect(notFound.events == [.failed(first, status)])
        // 200 text/html
        var (html, second) = try Self.started()
        var block: [UInt8] = [0x88]
        HPACKRequestFields.append(nameIndex: 31, value: "text/html".utf8, to: &block)
        html.feed(Self.frame(0x1, flags: 0x5, stream: second, block))
        #expect(html.events == [.failed(second, DNSError(.badContentType, "content type 'text/html', expected application/dns-message"))])
        // larger than the cap: reset, and the query fails
        var (large, third) = try Self.started(maxResponseBytes: 20)
        large.output = []
        large.feed(Self.frame(0x1, flags: 0x4, stream: third, Self.okHeaders) + Self.frame(0x0, flags: 0x1, stream: third, Self.answer))
        #expect(large.events == [.failed(third, DNSError(.responseTooLarge, "the response is larger than 20 bytes"))])
        #expect(Self.frames(large.output).map(\.0) == [0x3])
    }

    @Test func refusedAndGoneAwayStreamsGoOutAgain() throws {
        var (run, id) = try Self.started()
        let second = run.session.send(Self.query, into: &run.output) { _ in false }
        run.feed(Self.frame(0x3, stream: id, [0, 0, 0, 7]))
        #expect(run.events == [.unprocessed(id)])
        run.events = []
        var goaway: [UInt8] = []
        goaway.appendHTTP2UInt32(id)
        goaway.appendHTTP2UInt32(0)
        run.feed(Self.frame(0x7, goaway))
        #expect(run.events == [.unprocessed(second)])
        #expect(run.session.isDraining && run.session.capacity == 0)
    }

    @Test func pingsAndSettingsAreAcknowledged() throws {
        var (run, _) = try Self.started()
        run.output = []
        run.feed(Self.frame(0x6, [1, 2, 3, 4, 5, 6, 7, 8]) + Self.frame(0x4, [0, 3, 0, 0, 0, 10]))
        let frames = Self.frames(run.output)
        #expect(frames.map(\.0) == [0x6, 0x4])
        #expect(frames[0].1 == 0x1 && frames[0].3 == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(frames[1].1 == 0x1)
        #expect(run.session.capacity == 10)
    }

    @Test func aServerThatDoesNotSpeakHTTP2IsRefused() throws {
        var run = Run(session: try Self.session())
        run.feed(Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8))
        guard case .refused = run.events.first else {
            Issue.record("expected refused, got \(run.events)")
            return
        }
    }

    @Test func protocolBreachesEndTheConnection() throws {
        let (base, id) = try Self.started()
        let breaches: [(String, [UInt8])] = [
            ("PUSH_PROMISE", Self.frame(0x5, flags: 0x4, stream: id, [0, 0, 0, 2])),
            ("a frame above 16,384 bytes", Self.frame(0x0, stream: id, [UInt8](repeating: 0, count: 16_385))),
            ("HEADERS on a stream never opened", Self.frame(0x1, flags: 0x5, stream: 99, [0x88])),
            ("DATA on a stream never opened", Self.frame(0x0, flags: 0x1, stream: 97, [0])),
            ("an interrupted header block", Self.frame(0x1, stream: id, [0x88]) + Self.frame(0x6, [0, 0, 0, 0, 0, 0, 0, 0])),
            ("an undecodable block", Self.frame(0x1, flags: 0x4, stream: id, [0x80])),
            ("a connection WINDOW_UPDATE of 0", Self.frame(0x8, [0, 0, 0, 0])),
            ("padding past the frame", Self.frame(0x0, flags: 0x8, stream: id, [9, 1])),
            ("DATA before HEADERS", Self.frame(0x0, stream: id, [1])),
        ]
        for (what, bytes) in breaches {
            var run = base
            run.output = []
            run.feed(bytes)
            guard case .broken = run.events.last else {
                Issue.record("\(what): expected the connection to break, got \(run.events)")
                continue
            }
            #expect(Self.frames(run.output).last?.0 == 0x7, "\(what): GOAWAY")
        }
    }

    /// PINGs answered faster than the server reads the answers: bounded, then the connection ends.
    @Test func aPingFloodEndsTheConnectionInsteadOfBuffering() throws {
        var (run, _) = try Self.started()
        let ping = Self.frame(0x6, [1, 2, 3, 4, 5, 6, 7, 8])
        var flood: [UInt8] = []
        for _ in 0..<70_000 { flood += ping }
        run.feed(flood)
        guard case .broken = run.events.last else {
            Issue.record("expected the connection to break, got \(run.events.count) events")
            return
        }
        #expect(run.output.count <= DoHSession.maxPendingOutput + 64)
    }

    /// Random server bytes after the preface: every outcome is an event or nothing, never a trap.
    @Test func randomServerBytesNeverTrap() throws {
        let (base, _) = try Self.started()
        for _ in 0..<5_000 {
            var run = base
            let count = Int.random(in: 0...64)
            var bytes = (0..<count).map { _ in UInt8.random(in: 0...255) }
            // Half the time a plausible length, so that frame bodies are reached.
            if bytes.count >= 9, Bool.random() { (bytes[0], bytes[1], bytes[2]) = (0, 0, UInt8(bytes.count - 9)) }
            run.feed(bytes)
        }
    }

    /// The fuzzer's seeds and any crasher it left (Fuzz/H2ClientFuzzer.swift's framing: the first
    /// byte picks a header block or server bytes after SETTINGS): replayed on every run.
    @Test func theFuzzSeedsAndCrashersReplayWithoutATrap() throws {
        let inputs = FuzzCorpus.inputs(["corpus-h2client", "crashers/h2client"])
        #expect(inputs.count >= 6)
        for input in inputs {
            guard let mode = input.first else { continue }
            if mode & 1 == 0 {
                var decoder = HPACKDecoder()
                _ = try? decoder.decode(input.dropFirst())
                continue
            }
            var (run, _) = try Self.started(.post, maxResponseBytes: 512)
            run.feed((mode & 2 == 0 ? Self.settings : []) + Array(input.dropFirst()))
            for case .answer(_, let body) in run.events { #expect(body.count <= 512) }
        }
    }
}
