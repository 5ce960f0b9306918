import Foundation

/// The fuzzers' seeds and crashers (`Fuzz/<folder>`), for the tests that replay them.
public enum FuzzCorpus {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz")

    /// Every input in `folders` (under `Fuzz/`), in name order within each.
    public static func inputs(_ folders: [String]) -> [[UInt8]] {
        folders.flatMap { folder -> [[UInt8]] in
            let directory = root.appendingPathComponent(folder)
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            return names.filter { !$0.hasPrefix(".") }.sorted().compactMap { try? Array(Data(contentsOf: directory.appendingPathComponent($0))) }
        }
    }
}
