import CurlSupport
import Foundation
import TestSupport
import Testing

extension DaemonSuites {
    /// `cache.shared` with a real Redis (Debian's redis-server 7 on loopback, with a password): two
    /// daemons share answers, a forger who can write to Redis but lacks the key is refused, and Redis
    /// going away slows and fails nothing.
    @Suite(.serialized) struct SharedCacheTests {
        static let password = "redis-password-for-tests-0123"

        func metric(_ daemon: DaemonProcess, _ line: String) async throws -> Double {
            let text = daemon.text(try await daemon.get("/metrics"))
            guard let found = text.split(separator: "\n").first(where: { $0.hasPrefix(line + " ") }) else { return 0 }
            return Double(found.split(separator: " ").last ?? "") ?? 0
        }

        func addresses(_ daemon: DaemonProcess, _ host: String) async throws -> String {
            daemon.text(try await daemon.get("/v1/resolve?host=\(host)&type=a"))
        }

        func redisCLI(_ port: Int, _ arguments: [String]) async throws -> CLI.Output {
            // The password by environment, not argv.
            try await CLI.run(
                ["-c", "REDISCLI_AUTH='\(Self.password)' exec /usr/bin/redis-cli -h 127.0.0.1 -p \(port) \"$@\"", "redis-cli"] + arguments,
                executable: "/bin/sh")
        }

        @Test func membersShareAnswersRefuseForgeriesAndOutliveRedis() async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("shared-\(UUID().uuidString.prefix(8))")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let redisPort = unusedLoopbackPort()
            let passwordFile = directory.appendingPathComponent("redis.password").path
            try (Self.password + "\n").write(toFile: passwordFile, atomically: true, encoding: .utf8)
            let keyFile = directory.appendingPathComponent("shared.key").path
            try "a-shared-key-of-at-least-32-bytes-for-the-pool".write(toFile: keyFile, atomically: true, encoding: .utf8)
            let redisConfig = directory.appendingPathComponent("redis.conf").path
            try """
            bind 127.0.0.1
            port \(redisPort)
            save ""
            appendonly no
            protected-mode yes
            requirepass \(Self.password)
            dir \(directory.path)
            """.write(toFile: redisConfig, atomically: true, encoding: .utf8)
            let redis = Process()
            redis.executableURL = URL(fileURLWithPath: "/usr/bin/redis-server")
            redis.arguments = [redisConfig]
            // Not the test's own output: a server holding the pipe would keep `swift test` waiting.
            redis.standardOutput = FileHandle.nullDevice
            redis.standardError = FileHandle.nullDevice
            try redis.run()
            defer { kill(redis.processIdentifier, SIGKILL) }
            var up = false
            for _ in 0..<50 where !up {
                up = (try? await redisCLI(redisPort, ["PING"]))?.stdout == "PONG\n"
                if !up { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(up, "redis-server did not start")

            let shared = "cache: {shared: {redis: \"127.0.0.1:\(redisPort)\", key_file: \(keyFile), password_file: \(passwordFile)}}"
            let portA = unusedLoopbackPort(), portB = unusedLoopbackPort()
            let memberA = try await DaemonProcess(config: DaemonProcess.config(port: portA, extra: shared), port: portA)
            defer { memberA.stop() }
            let memberB = try await DaemonProcess(config: DaemonProcess.config(port: portB, extra: shared), port: portB)
            defer { memberB.stop() }

            // A resolves through its upstream and writes the answer; B answers it from Redis.
            #expect(try await addresses(memberA, "www.hd.test").contains("198.18.0.10"))
            var stored = false
            for _ in 0..<50 where !stored {
                stored = try await redisCLI(redisPort, ["EXISTS", "httpdns:www.hd.test/1"]).stdout == "1\n"
                if !stored { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(stored)
            let ttl =
                Int(try await redisCLI(redisPort, ["PTTL", "httpdns:www.hd.test/1"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
            #expect((1...300_000).contains(ttl), "Redis expires the value with the answer's TTL: \(ttl) ms")
            #expect(try await addresses(memberB, "www.hd.test").contains("198.18.0.10"))
            #expect(try await metric(memberB, "httpdns_shared_cache_hits_total") == 1)
            #expect(try await metric(memberB, "httpdns_shared_cache_requests_total{outcome=\"hit\"}") == 1)

            // The forger writes to Redis without the key: a genuine value under another name, and one
            // with a byte changed. B refuses both and answers from its upstream.
            #expect(try await redisCLI(redisPort, ["COPY", "httpdns:www.hd.test/1", "httpdns:cdn.hd.test/1"]).stdout == "1\n")
            #expect(try await redisCLI(redisPort, ["COPY", "httpdns:www.hd.test/1", "httpdns:shop.hd.test/1"]).stdout == "1\n")
            _ = try await redisCLI(redisPort, ["SETRANGE", "httpdns:shop.hd.test/1", "40", "X"])
            let cdn = try await addresses(memberB, "cdn.hd.test")
            #expect(cdn.contains("127.0.0.4") && !cdn.contains("198.18.0.10"), "\(cdn)")
            let shop = try await addresses(memberB, "shop.hd.test")
            #expect(shop.contains("127.0.0.4") && !shop.contains("198.18.0.10"), "\(shop)")
            #expect(try await metric(memberB, "httpdns_shared_cache_requests_total{outcome=\"rejected\"}") == 2)

            // F24 of redteam-4: a 32 MB value under a name's key. B asks Redis for no more than a
            // genuine value can be (GETRANGE), refuses it by its length, and answers from upstream;
            // its peak memory does not move by the value's size (before: ~3 copies, +100 MB).
            func peakRSS(_ member: DaemonProcess) throws -> Int {
                let status = try String(contentsOfFile: "/proc/\(member.process.processIdentifier)/status", encoding: .utf8)
                let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
                return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            }
            let big = try await CLI.run(
                [
                    "-c",
                    "head -c 33554432 /dev/zero | REDISCLI_AUTH='\(Self.password)' exec /usr/bin/redis-cli -h 127.0.0.1 -p \(redisPort) -x SET httpdns:v4only.hd.test/1",
                ], executable: "/bin/sh")
            #expect(big.stdout == "OK\n", "\(big.stdout)\(big.stderr)")
            let peakBefore = try peakRSS(memberB)
            let v4only = try await addresses(memberB, "v4only.hd.test")
            #expect(v4only.contains("198.18.0.40"), "\(v4only)")
            let peakAfter = try peakRSS(memberB)
            #expect(peakAfter - peakBefore < 16 * 1024, "peak RSS grew from \(peakBefore) kB to \(peakAfter) kB")
            #expect(try await metric(memberB, "httpdns_shared_cache_requests_total{outcome=\"rejected\"}") == 3)
            #expect(memberB.logText.contains("failed authentication"))
            #expect(!memberA.logText.contains(Self.password) && !memberB.logText.contains(Self.password), "the password is never logged")

            // Redis goes away: lookups go on, as fast, without it.
            kill(redis.processIdentifier, SIGKILL)
            var down = false
            for _ in 0..<50 where !down {
                down = try await redisCLI(redisPort, ["PING"]).stdout != "PONG\n"
                if !down { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(down)
            let started = Date()
            #expect(try await addresses(memberB, "origin.hd.test").contains("127.0.0.4"))
            #expect(try await addresses(memberB, "bank.hd.test").contains("127.0.0.4"))
            #expect(Date().timeIntervalSince(started) < 1.5, "two lookups without Redis took \(Date().timeIntervalSince(started)) s")
            #expect(try await metric(memberB, "httpdns_shared_cache_requests_total{outcome=\"error\"}") >= 1)
            #expect(memberB.logText.contains("Redis unavailable"))
        }
    }
}
