import Foundation
import Testing

@testable import DNSCore

/// Replays the fuzzer's seed corpus (real BIND responses) and every crasher it ever found.
@Suite struct FuzzRegressionTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz")

    static func files(_ folder: String) -> [URL] {
        let directory = fuzzDirectory.appendingPathComponent(folder)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        // Files only: the daemon fuzzers keep their crashers in subfolders (replayed by ResolverDaemonTests).
        return names.filter { !$0.hasPrefix(".") }.sorted().map { directory.appendingPathComponent($0) }
            .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true }
    }

    @Test func seedCorpusDecodesAndRoundTrips() throws {
        let seeds = Self.files("corpus")
        #expect(seeds.count >= 40)
        var decoded = 0
        for file in seeds {
            let bytes = Array(try Data(contentsOf: file))
            guard let message = try? DNSMessage(decoding: bytes) else { continue }
            decoded += 1
            #expect(try DNSMessage(decoding: message.encode()) == message, "\(file.lastPathComponent)")
        }
        #expect(decoded >= 40, "real BIND responses must decode")
    }

    @Test func everyCrasherIsHandled() throws {
        for file in Self.files("crashers") {
            let bytes = Array(try Data(contentsOf: file))
            if let message = try? DNSMessage(decoding: bytes) {
                #expect(try DNSMessage(decoding: message.encode()) == message, "\(file.lastPathComponent)")
                if let question = message.questions.first { _ = try? message.addressAnswer(for: question, id: message.id) }
            }
        }
    }
}
