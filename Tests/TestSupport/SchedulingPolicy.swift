import Foundation

/// The scheduling policy in a /proc `stat` file (field 41: 0 SCHED_OTHER, 3 SCHED_BATCH), as
/// `/proc/thread-self/stat` or `/proc/PID/task/TID/stat`; nil when it cannot be read.
public func schedulingPolicy(statFile path: String) -> Int? {
    guard let stat = try? String(contentsOfFile: path, encoding: .utf8), let close = stat.lastIndex(of: ")") else { return nil }
    // Fields after the command (which may hold spaces) start at field 3.
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    return fields.count > 38 ? Int(fields[38]) : nil
}
