import CurlSupport
import DNSCore
import Foundation
import Glibc
import TestSupport
import Testing

extension DaemonSuites {
    /// `resolve daemon` as a service: the sd_notify protocol against a socket of the test's own,
    /// the lame-duck stop on SIGTERM with the health-check name, and `user:`.
    @Suite(.serialized) struct DaemonServiceTests {
        static func config(port: Int, dnsPort: Int, extra: String = "") -> String {
            DaemonProcess.config(
                port: port,
                extra: """
                    dns_listen: "127.0.0.1:\(dnsPort)"
                    \(extra)
                    """)
        }

        func dig(_ port: Int, _ arguments: [String]) async throws -> CLI.Output {
            try await CLI.run(["@127.0.0.1", "-p", "\(port)", "+tries=1", "+time=3"] + arguments, executable: "/usr/bin/dig")
        }

        @Test func tellsSystemdWhenReadyReloadingAndStoppingAndPingsTheWatchdog() async throws {
            let listener = try NotifySocketListener()
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let daemon = try await DaemonProcess(
                config: Self.config(port: port, dnsPort: dnsPort), port: port,
                environment: ["NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "400000"], waitForHealth: false)
            defer { daemon.stop() }

            let start = await listener.messages(for: 10) { $0.contains("READY=1") }
            let ready = try #require(start.last { $0.contains("READY=1") }, "no READY=1: \(start) \(daemon.logText)")
            #expect(ready.contains("STATUS=ready; 1 upstream; 0 watched, 0 hijacked"), "\(ready)")
            // READY=1 only once every listener is bound: both answer at once.
            #expect(try await daemon.get("/healthz").status == 200)
            #expect(try await dig(dnsPort, ["+short", "www.hd.test", "A"]).stdout == "198.18.0.10\n")

            // WATCHDOG_USEC=400000: a ping every 200 ms.
            let pings = await listener.messages(for: 1.1).filter { $0 == "WATCHDOG=1" }
            #expect((4...7).contains(pings.count), "\(pings.count) pings in 1.1 s")

            kill(daemon.process.processIdentifier, SIGHUP)
            let reload = await listener.messages(for: 5) { $0.contains("READY=1") }.filter { $0 != "WATCHDOG=1" }
            #expect(reload.count == 2, "\(reload)")
            let reloading = try #require(reload.first)
            #expect(reloading.hasPrefix("RELOADING=1\nMONOTONIC_USEC="), "\(reloading)")
            // MONOTONIC_USEC is CLOCK_MONOTONIC now, in microseconds.
            var now = timespec()
            clock_gettime(CLOCK_MONOTONIC, &now)
            let sent = UInt64(reloading.split(separator: "\n")[1].dropFirst("MONOTONIC_USEC=".count)) ?? 0
            let monotonic = UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
            #expect(sent <= monotonic && monotonic - sent < 5_000_000, "\(sent) vs \(monotonic)")
            #expect(reload.last?.hasPrefix("READY=1\nSTATUS=") == true, "\(reload)")

            kill(daemon.process.processIdentifier, SIGTERM)
            let stop = await listener.messages(for: 5) { $0.contains("STOPPING=1") }
            #expect(stop.contains { $0.hasPrefix("STOPPING=1") }, "\(stop)")
            daemon.process.waitUntilExit()
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
        }

        @Test func lameDuckFailsHealthChecksWhileStillAnsweringThenStops() async throws {
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let daemon = try await DaemonProcess(
                config: Self.config(port: port, dnsPort: dnsPort, extra: "readiness: {dns_name: health.pool.test, lame_duck: 2}"), port: port)
            defer { daemon.stop() }
            var ready = false
            for _ in 0..<50 where !ready {
                ready = try await daemon.get("/readyz").status == 200
                if !ready { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(ready, "\(daemon.logText)")
            // The health name is answered by the daemon itself: NOERROR, no records, no upstream.
            let healthy = try await dig(dnsPort, ["health.pool.test", "A"])
            #expect(healthy.stdout.contains("status: NOERROR") && healthy.stdout.contains("ANSWER: 0"), "\(healthy.stdout)")
            let healthyTCP = try await dig(dnsPort, ["+tcp", "HEALTH.pool.test", "A"])
            #expect(healthyTCP.stdout.contains("status: NOERROR"), "\(healthyTCP.stdout)")

            let signalled = Date()
            kill(daemon.process.processIdentifier, SIGTERM)
            try await Task.sleep(for: .milliseconds(300))
            // Lame duck: health checks fail, everything else is answered.
            let readyz = try await daemon.get("/readyz")
            #expect(readyz.status == 503 && daemon.text(readyz) == "stopping\n")
            let failing = try await dig(dnsPort, ["health.pool.test", "A"])
            #expect(failing.stdout.contains("status: SERVFAIL"), "\(failing.stdout)")
            #expect(try await dig(dnsPort, ["+short", "www.hd.test", "A"]).stdout == "198.18.0.10\n")
            #expect(try await dig(dnsPort, ["+tcp", "+short", "www.hd.test", "A"]).stdout == "198.18.0.10\n")
            #expect(try await daemon.get("/healthz").status == 200)
            #expect(try await daemon.get("/v1/resolve?host=www.hd.test&type=a").status == 200)
            #expect(daemon.process.isRunning)

            while daemon.process.isRunning, Date().timeIntervalSince(signalled) < 10 { try await Task.sleep(for: .milliseconds(50)) }
            let stoppedAfter = Date().timeIntervalSince(signalled)
            #expect(!daemon.process.isRunning)
            #expect(stoppedAfter >= 2 && stoppedAfter < 4, "stopped \(stoppedAfter) s after SIGTERM, lame_duck 2 s")
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
            #expect(daemon.logText.contains("lame duck"), "\(daemon.logText)")
        }

        @Test func aSecondSIGTERMEndsTheLameDuckAtOnce() async throws {
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let daemon = try await DaemonProcess(
                config: Self.config(port: port, dnsPort: dnsPort, extra: "readiness: {lame_duck: 60}"), port: port)
            defer { daemon.stop() }
            let signalled = Date()
            kill(daemon.process.processIdentifier, SIGTERM)
            #expect(try await daemon.waitForLog("lame duck"))
            kill(daemon.process.processIdentifier, SIGTERM)
            while daemon.process.isRunning, Date().timeIntervalSince(signalled) < 10 { try await Task.sleep(for: .milliseconds(50)) }
            #expect(!daemon.process.isRunning && Date().timeIntervalSince(signalled) < 5)
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
        }

        /// The unit in dist/systemd is what `systemd-analyze verify` accepts (no warning), with the
        /// binary it names replaced by the one under test, and its hardening rates "OK" or better.
        @Test func theSystemdUnitVerifiesAndIsHardened() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let unit = directory.appendingPathComponent("resolve-daemon.service").path
            let text = try String(contentsOfFile: TestEnvironment.root + "/dist/systemd/resolve-daemon.service", encoding: .utf8)
            #expect(text.contains("ExecStart=/usr/bin/resolve daemon --config /etc/resolve/daemon.yaml"))
            try text.replacingOccurrences(of: "/usr/bin/resolve", with: CLI.binary).write(toFile: unit, atomically: true, encoding: .utf8)
            let verify = try await CLI.run(["verify", "--man=no", unit], executable: "/usr/bin/systemd-analyze")
            #expect(verify.status == 0 && verify.stdout.isEmpty && verify.stderr.isEmpty, "\(verify.stdout)\(verify.stderr)")
            let security = try await CLI.run(["security", "--offline=yes", "--no-pager", unit], executable: "/usr/bin/systemd-analyze")
            let overall = security.stdout.split(separator: "\n").first { $0.contains("Overall exposure level") }
            let score = overall.flatMap { Double($0.split(separator: ":").last?.split(separator: " ").first ?? "") }
            #expect((score ?? 10) <= 2.0, "\(security.stdout)")
        }

        /// Started as root with `user: nobody`: every listener bound as root (port 53 would need it),
        /// then the process runs as nobody; reload and the cache file keep working.
        @Test(.enabled(if: getuid() == 0, "needs root to switch users"))
        func switchesToTheConfiguredUserOnceBound() async throws {
            guard let nobody = getpwnam("nobody") else { return }
            let (uid, gid) = (nobody.pointee.pw_uid, nobody.pointee.pw_gid)
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("state-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: state) }
            #expect(chown(state.path, uid, gid) == 0)
            let config = Self.config(port: port, dnsPort: dnsPort, extra: "user: nobody\ncache: {persist: \(state.path)/cache.bin}")
            let daemon = try await DaemonProcess(config: config, port: port)
            defer { daemon.stop() }
            #expect(chmod(daemon.directory.path, 0o755) == 0 && chmod(daemon.configFile.path, 0o644) == 0)

            // /healthz answers as soon as the HTTP listener is bound; the switch follows the last one.
            #expect(try await daemon.waitForLog("running as nobody"), "\(daemon.logText)")
            let status = try String(contentsOfFile: "/proc/\(daemon.process.processIdentifier)/status", encoding: .utf8)
            let ids = { (key: String) in
                status.split(separator: "\n").first { $0.hasPrefix(key + ":") }?.split(separator: "\t").dropFirst().map(String.init)
            }
            #expect(ids("Uid") == Array(repeating: "\(uid)", count: 4), "\(status)")
            #expect(ids("Gid") == Array(repeating: "\(gid)", count: 4), "\(status)")
            #expect(ids("Groups") == ["\(gid)"] || ids("Groups")?.first?.trimmingCharacters(in: .whitespaces) == "\(gid)", "\(status)")
            // Every thread, the main one too (an async main would leave it root: see Resolve.main()).
            let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(daemon.process.processIdentifier)/task")
            let rootThreads = tasks.filter { task in
                let text = (try? String(contentsOfFile: "/proc/\(daemon.process.processIdentifier)/task/\(task)/status", encoding: .utf8)) ?? ""
                return !text.contains("\nUid:\t\(uid)\t\(uid)\t\(uid)\t\(uid)\n")
            }
            #expect(tasks.count > 2 && rootThreads.isEmpty, "threads not switched: \(rootThreads) of \(tasks)")
            // Still serving, on both listeners.
            #expect(try await dig(dnsPort, ["+short", "www.hd.test", "A"]).stdout == "198.18.0.10\n")
            // A reload re-reads the file as nobody.
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try await daemon.waitForLog("configuration reloaded"), "\(daemon.logText)")
            // The cache is written on the way out, by nobody.
            kill(daemon.process.processIdentifier, SIGTERM)
            daemon.process.waitUntilExit()
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
            var info = stat()
            #expect(stat(state.path + "/cache.bin", &info) == 0 && info.st_uid == uid, "\(daemon.logText)")
        }

        /// F28: started as root with `user: nobody` and files only root can read — the CA file (as
        /// under /etc), a block list — the daemon still answers after the switch, over a connection it
        /// opens only then (the CA bundle is in memory, not read again), blocks what the list says,
        /// and writes its query log as nobody. A reload that would need the files again is refused and
        /// says why; the running configuration keeps serving.
        @Test(.enabled(if: getuid() == 0, "needs root to switch users"))
        func rootOnlyFilesAreReadBeforeTheSwitch() async throws {
            guard let nobody = getpwnam("nobody") else { return }
            let (uid, gid) = (nobody.pointee.pw_uid, nobody.pointee.pw_gid)
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let secret = FileManager.default.temporaryDirectory.appendingPathComponent("root-only-\(UUID().uuidString.prefix(8))")
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("state-\(UUID().uuidString.prefix(8))")
            for directory in [secret, state] { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
            defer { for directory in [secret, state] { try? FileManager.default.removeItem(at: directory) } }
            #expect(chown(state.path, uid, gid) == 0)
            let ca = secret.appendingPathComponent("ca.pem").path, list = secret.appendingPathComponent("block.txt").path
            try FileManager.default.copyItem(atPath: TestEnvironment.caFile, toPath: ca)
            try "listed.block.test\n".write(toFile: list, atomically: true, encoding: .utf8)
            #expect(chmod(ca, 0o600) == 0 && chmod(list, 0o600) == 0 && chmod(secret.path, 0o700) == 0)
            let log = state.appendingPathComponent("queries.jsonl").path
            let config = Self.config(
                port: port, dnsPort: dnsPort,
                extra: """
                    user: nobody
                    block: {lists: [\(list)]}
                    query_log: {file: \(log)}
                    forward: [{zones: [hd.test], upstreams: [{doh: "\(TestEnvironment.dohA)", bootstrap: [127.0.0.1]}]}]
                    """
            ).replacingOccurrences(of: "ca_file: \(TestEnvironment.caFile)", with: "ca_file: \(ca)")
            let daemon = try await DaemonProcess(config: config, port: port)
            defer { daemon.stop() }
            #expect(chmod(daemon.directory.path, 0o755) == 0 && chmod(daemon.configFile.path, 0o644) == 0)
            #expect(try await daemon.waitForLog("running as nobody"), "\(daemon.logText)")
            // hd.test goes to a forward zone's upstream of its own, which nothing asked before the
            // switch: this lookup opens its connection as nobody (before the fix: the CA file could
            // not be read then, and every lookup was SERVFAIL).
            let www = try await dig(dnsPort, ["+short", "www.hd.test", "A"])
            #expect(www.stdout == "198.18.0.10\n", "\(www.stdout)\(daemon.logText)")
            let blocked = try await dig(dnsPort, ["listed.block.test", "A"])
            #expect(blocked.stdout.contains("status: NXDOMAIN"), "\(blocked.stdout)")
            // A reload as nobody cannot read the CA file: refused, named, and the old one serves on.
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try await daemon.waitForLog("configuration NOT reloaded"), "\(daemon.logText)")
            #expect(daemon.logText.contains(ca), "\(daemon.logText)")
            #expect(try await dig(dnsPort, ["+short", "www.hd.test", "AAAA"]).stdout == "2001:2::10\n")
            kill(daemon.process.processIdentifier, SIGTERM)
            daemon.process.waitUntilExit()
            #expect(daemon.process.terminationStatus == 0, "\(daemon.logText)")
            var info = stat()
            #expect(stat(log, &info) == 0 && info.st_uid == uid, "the query log is nobody's")
            let lines = try String(contentsOfFile: log, encoding: .utf8)
            #expect(lines.contains("\"name\":\"www.hd.test\""), "\(lines)")
        }

        /// F28: what the daemon still writes after the switch — the cache file's directory, the query
        /// log's — must be writable by the user, or it stops at once and names the path and the user
        /// (before: a warning, and a cache silently never saved).
        @Test(.enabled(if: getuid() == 0, "needs root to switch users"))
        func aDirectoryTheUserCannotWriteStopsTheStart() async throws {
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let state = FileManager.default.temporaryDirectory.appendingPathComponent("root-state-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: state) }
            #expect(chmod(state.path, 0o755) == 0)
            let config = Self.config(port: port, dnsPort: dnsPort, extra: "user: nobody\ncache: {persist: \(state.path)/cache.bin}")
            let daemon = try await DaemonProcess(config: config, port: port, waitForHealth: false)
            defer { daemon.stop() }
            let stopped = try await daemon.waitForLog("stopping: cannot run as nobody")
            #expect(stopped, "\(daemon.logText)")
            guard stopped else { return }
            for _ in 0..<50 where daemon.process.isRunning { try await Task.sleep(for: .milliseconds(100)) }
            #expect(!daemon.process.isRunning && daemon.process.terminationStatus != 0)
            #expect(daemon.logText.contains("nobody cannot write \(state.path)"), "\(daemon.logText)")
        }

        /// F29 of redteam-5: the query log's directory is writable by `user:` (rotation needs it), so
        /// whoever runs as that user can plant a link there. Started as root, the daemon neither
        /// follows it nor gives its target away: the file it points to keeps its owner and bytes, and
        /// the daemon stops, naming the path.
        @Test(.enabled(if: getuid() == 0, "needs root to switch users"))
        func aLinkPlantedAsTheQueryLogIsNeverFollowed() async throws {
            guard let nobody = getpwnam("nobody") else { return }
            let (uid, gid) = (nobody.pointee.pw_uid, nobody.pointee.pw_gid)
            let port = unusedLoopbackPort(), dnsPort = unusedLoopbackPort()
            let base = FileManager.default.temporaryDirectory.appendingPathComponent("planted-\(UUID().uuidString.prefix(8))")
            let logs = base.appendingPathComponent("logs"), secret = base.appendingPathComponent("secret")
            for directory in [logs, secret] { try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true) }
            defer { try? FileManager.default.removeItem(at: base) }
            #expect(chown(logs.path, uid, gid) == 0 && chmod(secret.path, 0o700) == 0)
            let victim = secret.appendingPathComponent("victim").path
            try "root's own\n".write(toFile: victim, atomically: true, encoding: .utf8)
            #expect(chmod(victim, 0o600) == 0)
            let log = logs.appendingPathComponent("queries.jsonl").path
            #expect(symlink(victim, log) == 0)
            let config = Self.config(port: port, dnsPort: dnsPort, extra: "user: nobody\nquery_log: {file: \(log)}")
            let daemon = try await DaemonProcess(config: config, port: port, waitForHealth: false)
            defer { daemon.stop() }
            let stopped = try await daemon.waitForLog("stopping: cannot run as nobody")
            #expect(stopped, "\(daemon.logText)")
            #expect(daemon.logText.contains(log), "\(daemon.logText)")
            var info = stat()
            #expect(stat(victim, &info) == 0 && info.st_uid == 0 && info.st_mode & 0o777 == 0o600)
            #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root's own\n")
            // A hard link is refused the same way (one link only).
            try FileManager.default.removeItem(atPath: log)
            #expect(link(victim, log) == 0)
            let second = try await DaemonProcess(config: config, port: port, waitForHealth: false)
            defer { second.stop() }
            #expect(try await second.waitForLog("stopping: cannot run as nobody"), "\(second.logText)")
            #expect(stat(victim, &info) == 0 && info.st_uid == 0)
            #expect(try String(contentsOfFile: victim, encoding: .utf8) == "root's own\n")
        }
    }
}
