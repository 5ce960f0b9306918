import DNSCore
import Foundation
import TestSupport
import Testing

@testable import DNSStubServer
@testable import DNSWire
@testable import ResolverDaemon

/// Replays the daemon fuzzers' seeds and every crasher they found (Scripts/fuzz.sh stub|doh):
/// each input is answered with a well-formed response or refused, never a trap.
@Suite struct FuzzReplayTests {
    static func inputs(_ folders: String...) -> [[UInt8]] { FuzzCorpus.inputs(folders) }

    @Test func stubDatagramsFromTheCorpusAndCrashers() throws {
        let inputs = Self.inputs("corpus-stub", "crashers/stub")
        #expect(inputs.count >= 9)
        for wire in inputs {
            switch StubDatagram.reply(to: wire, cached: { _ in nil }).reply {
            case .none:
                #expect(wire.count < 12 || wire[2] & 0x80 != 0)
            case .now(let bytes):
                #expect(try DNSMessage(decoding: bytes).isResponse)
            case .answer:
                Issue.record("nothing is cached here")
            case .lookup(let query):
                let failure = DNSAnswers.response(to: query, .serverFailure, negativeTTL: 0)
                let message = try DNSMessage(decoding: StubDatagram.fitted(failure.bytes, to: query))
                #expect(message.id == query.id)
                #expect(message.questions == [query.question])
            }
        }
    }

    @Test func dohRequestsFromTheCorpusAndCrashers() throws {
        let inputs = Self.inputs("corpus-doh", "crashers/doh")
        #expect(inputs.count >= 19)
        var parsed = 0
        for bytes in inputs {
            guard let selector = bytes.first else { continue }
            let rest = Array(bytes.dropFirst())
            let result: Result<[UInt8], DoHRequest.Refusal>
            if selector & 1 == 0 {
                result = DoHRequest.query(method: "GET", target: "/dns-query?" + String(decoding: rest, as: UTF8.self), contentType: nil, body: [])
            } else {
                let newline = rest.firstIndex(of: 0x0a) ?? rest.count
                result = DoHRequest.query(
                    method: "POST", target: "/dns-query", contentType: String(decoding: rest[..<newline], as: UTF8.self),
                    body: newline < rest.count ? Array(rest[(newline + 1)...]) : [])
            }
            if case .success(let wire) = result, (try? DNSQuery(wire)) != nil { parsed += 1 }
        }
        #expect(parsed >= 18, "the seeds are real queries")
    }
}
