import DNSCore
import Foundation
import ResolverConfig

/// `user:` — the daemon binds its ports as root, then runs as an unprivileged account (unbound's
/// `username:`, BIND's `-u`).
enum Privileges {
    enum Outcome: Equatable, Sendable {
        /// The process now runs as the user (uid, gid).
        case switched(uid: uid_t, gid: gid_t)
        /// It already ran as the user.
        case already
        /// Started as another user that is not root (systemd's `User=`): it cannot switch and stays.
        case notRoot(uid: uid_t)
    }

    /// Switches every thread of the process to `user`'s uid and gid with no supplementary groups
    /// (glibc applies `setuid` to all threads), then checks that root cannot be taken back.
    /// - Parameter user: an account name from the passwd database.
    /// - Returns: what was done.
    /// - Throws: ``/DNSCore/DNSError`` with ``/DNSCore/DNSError/Code/invalidConfiguration`` when the user
    ///   is unknown or a step fails: the daemon must not go on as root when told not to.
    static func drop(to user: String) throws(DNSError) -> Outcome {
        guard let entry = getpwnam(user) else { throw DNSError(.invalidConfiguration, "user: no user '\(user)' on this system") }
        let (uid, gid) = (entry.pointee.pw_uid, entry.pointee.pw_gid)
        if geteuid() == uid, getegid() == gid { return .already }
        guard geteuid() == 0 else { return .notRoot(uid: geteuid()) }
        var group = gid
        guard setgroups(1, &group) == 0 else { throw failure("setgroups", user) }
        guard setgid(gid) == 0 else { throw failure("setgid", user) }
        guard setuid(uid) == 0 else { throw failure("setuid", user) }
        guard getuid() == uid, geteuid() == uid, getgid() == gid, uid == 0 || setuid(0) != 0 else {
            throw DNSError(.invalidConfiguration, "user: switched to '\(user)' but root could be taken back; stopping")
        }
        return .switched(uid: uid, gid: gid)
    }

    /// The account's uid and gid, when it exists.
    static func ids(of user: String) -> (uid: uid_t, gid: gid_t)? {
        guard let entry = getpwnam(user) else { return nil }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// Run after the switch, as the account: what the daemon still writes — the cache file's
    /// directory (`cache.persist`, saved by rename), the query log's file and directory (reopened on
    /// SIGHUP, rotated) — must be writable by it, or the daemon stops now, naming the path and the
    /// account, rather than failing quietly later (F28).
    static func checkWritable(afterSwitchTo user: String, config: ConfigFile) throws(DNSError) {
        func directory(of path: String) -> String {
            let parent = (path as NSString).deletingLastPathComponent
            return parent.isEmpty ? "." : parent
        }
        var needed: [(what: String, path: String)] = []
        if let persist = config.lookup.persistPath { needed.append(("cache.persist: the cache file's directory", directory(of: persist))) }
        if let log = config.daemon.queryLog {
            needed.append(("query_log: the file's directory (rotation)", directory(of: log.path)))
            var info = stat()
            if lstat(log.path, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1 else {
                    throw DNSError(.invalidConfiguration, "query_log: \(log.path) is not a regular file of one link; refused")
                }
                needed.append(("query_log: the file", log.path))
            }
        }
        for (what, path) in needed where access(path, W_OK) != 0 {
            throw DNSError(.invalidConfiguration, "user: \(user) cannot write \(path) (\(what)): \(String(cString: strerror(errno)))")
        }
    }

    private static func failure(_ call: String, _ user: String) -> DNSError {
        DNSError(.invalidConfiguration, "user: \(call) for '\(user)' failed: \(String(cString: strerror(errno)))")
    }
}
